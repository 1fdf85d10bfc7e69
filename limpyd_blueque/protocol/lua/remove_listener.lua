-- Blueque listener removal: drop a listener and its count in blueque_queues.
-- KEYS[1] blueque_listeners_<queue>, KEYS[2] blueque_queues
-- ARGV[1] listener id, ARGV[2] queue name
-- Returns 1 when removed, 0 when it was not there (then the count is unchanged).
-- A `blueque_queues` of another type is left alone.
local refused = refuse_misfit({{KEYS[1], 'set'}})
if refused then return refused end
local removed = redis.call('SREM', KEYS[1], ARGV[1])
if removed == 1 and not misfit({{KEYS[2], 'zset'}}) then
    redis.call('ZINCRBY', KEYS[2], -1, ARGV[2])
end
return removed
