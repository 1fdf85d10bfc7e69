-- Blueque listener removal: drop a listener and its count in blueque_queues.
-- KEYS[1] blueque_listeners_<queue>, KEYS[2] blueque_queues
-- ARGV[1] listener id, ARGV[2] queue name
-- Returns 1 when removed, 0 when it was not there (then the count is unchanged).
local removed = redis.call('SREM', KEYS[1], ARGV[1])
if removed == 1 then
    redis.call('ZINCRBY', KEYS[2], -1, ARGV[2])
end
return removed
