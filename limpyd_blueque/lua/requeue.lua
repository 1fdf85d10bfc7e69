-- Put a task its holder no longer runs back in line: pending at once, or scheduled
-- at an eta. Used to retry after an error, and to hand a task back on shutdown.
-- KEYS[1] blueque_task_<id>, KEYS[2] blueque_reserved_tasks_<queue>_<listener>,
-- KEYS[3] blueque_started_tasks_<queue>, KEYS[4] blueque_pending_tasks_<queue>,
-- KEYS[5] blueque_scheduled_tasks_<queue>, KEYS[6] <prefix>:leases:<queue>
-- ARGV[1] task id, ARGV[2] listener id, ARGV[3] attempt the caller holds ('': not checked),
-- ARGV[4] now, ARGV[5] eta ('': pending at once), ARGV[6] error to record ('': none),
-- ARGV[7] wake-up channel, ARGV[8] 'front' (taken next) or 'back' (end of the line),
-- ARGV[9] priority change ('': none)
-- Returns {1} when requeued, {0, status, node, attempt} when refused, {-1} when missing.
local refused = refuse_misfit({{KEYS[1], 'hash'}, {KEYS[2], 'list'}, {KEYS[3], 'set'},
    {KEYS[4], 'list'}, {KEYS[5], 'zset'}, {KEYS[6], 'zset'}})
if refused then return refused end
refused = refuse_unless_held(KEYS[1], {reserved = true, started = true}, ARGV[2],
    ARGV[3])
if refused then return refused end
local id = ARGV[1]
local pid = redis.call('HGET', KEYS[1], 'pid') or ''
redis.call('LREM', KEYS[2], 1, id)
redis.call('SREM', KEYS[3], ARGV[2] .. ' ' .. pid .. ' ' .. id)
redis.call('ZREM', KEYS[6], id)
redis.call('HDEL', KEYS[1], 'node', 'pid', 'pstart', 'alive_until')
if ARGV[6] ~= '' then redis.call('HSET', KEYS[1], 'error', ARGV[6]) end
if ARGV[9] ~= '' then
    local priority = tonumber(redis.call('HGET', KEYS[1], 'priority')) or 0
    redis.call('HSET', KEYS[1], 'priority', priority + tonumber(ARGV[9]))
end
if ARGV[5] == '' then
    redis.call('HSET', KEYS[1], 'status', 'pending', 'updated', ARGV[4])
    if ARGV[8] == 'front' then
        redis.call('RPUSH', KEYS[4], id)
    else
        redis.call('LPUSH', KEYS[4], id)
    end
    redis.call('PUBLISH', ARGV[7], 1)
else
    redis.call('HSET', KEYS[1], 'status', 'scheduled', 'eta', ARGV[5], 'updated', ARGV[4])
    redis.call('ZADD', KEYS[5], ARGV[5], id)
end
return {1}
