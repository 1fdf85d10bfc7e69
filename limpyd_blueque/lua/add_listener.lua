-- Blueque listener registration: add a listener and count it in blueque_queues.
-- KEYS[1] blueque_listeners_<queue>, KEYS[2] blueque_queues
-- ARGV[1] listener id, ARGV[2] queue name
-- Returns 1 when added, 0 when it was already there (then the count is unchanged).
local added = redis.call('SADD', KEYS[1], ARGV[1])
redis.call('ZINCRBY', KEYS[2], added, ARGV[2])
return added
