-- Flag a running task stalled (its progress did not move for its stall timeout), or clear
-- the flag, fenced by its attempt.
-- KEYS[1] blueque_task_<id>, KEYS[2] <prefix>:stalled:<queue>
-- ARGV[1] task id, ARGV[2] listener id holding it, ARGV[3] attempt ('': not checked),
-- ARGV[4] now: when it was found stalled ('': clear the flag)
-- Returns {1} when done, {0, status, node, attempt} when refused, {-1} when missing.
local refused = refuse_misfit({{KEYS[1], 'hash'}, {KEYS[2], 'zset'}})
if refused then return refused end
refused = refuse_unless_held(KEYS[1], {reserved = true, started = true}, ARGV[2], ARGV[3])
if refused then return refused end
if ARGV[4] == '' then
    redis.call('ZREM', KEYS[2], ARGV[1])
    redis.call('HDEL', KEYS[1], 'stalled_at')
else
    redis.call('ZADD', KEYS[2], ARGV[4], ARGV[1])
    redis.call('HSET', KEYS[1], 'stalled_at', ARGV[4])
end
return {1}
