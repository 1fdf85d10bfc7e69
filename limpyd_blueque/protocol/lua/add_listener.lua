-- Blueque listener registration: add a listener and count it in blueque_queues.
-- KEYS[1] blueque_listeners_<queue>, KEYS[2] blueque_queues
-- ARGV[1] listener id, ARGV[2] queue name
-- Returns 1 when added, 0 when it was already there (then the count is unchanged).
-- A `blueque_queues` of another type is left alone (the listener is still registered).
local refused = refuse_misfit({{KEYS[1], 'set'}})
if refused then return refused end
local added = redis.call('SADD', KEYS[1], ARGV[1])
if not misfit({{KEYS[2], 'zset'}}) then redis.call('ZINCRBY', KEYS[2], added, ARGV[2]) end
return added
