-- Put a finished task that did not complete (failed, canceled, expired or buried) back in
-- line, as a new
-- task would be: pending at once (at the back, or the front, of its priority) or
-- scheduled at an eta; its attempts so far no longer count toward its maximum.
-- KEYS[1] blueque_task_<id>, KEYS[2] the list of its status (failed or canceled),
-- KEYS[3] blueque_pending_tasks_<queue>, KEYS[4] <prefix>:prioritized:<queue>,
-- KEYS[5] blueque_scheduled_tasks_<queue>, KEYS[6] <prefix>:identifiers:<queue>,
-- KEYS[7] <prefix>:utubes:<queue>, KEYS[8] <prefix>:utube_waiting:<queue>,
-- KEYS[9] <prefix>:retention:<queue>
-- ARGV[1] task id, ARGV[2] queue the caller believes the task is in, ARGV[3] the status
-- the caller found (whose list is KEYS[2]), ARGV[4] now, ARGV[5] eta ('': pending now),
-- ARGV[6] '1': at the front, ARGV[7] new priority ('': unchanged), ARGV[8] wake-up
-- channel, ARGV[9] key prefix of task hashes, ARGV[10] name prefix of the utube lists
-- Returns {1} when requeued, {0, status, queue} when refused (its status is not ARGV[3]
-- any more, is not failed or canceled, or it is in another queue), {-1} when missing.
local refused = refuse_misfit({{KEYS[1], 'hash'}, {KEYS[2], 'list'}, {KEYS[3], 'list'},
    {KEYS[4], 'zset'}, {KEYS[5], 'zset'}, {KEYS[6], 'hash'}, {KEYS[7], 'hash'},
    {KEYS[8], 'zset'}, {KEYS[9], 'zset'}})
if refused then return refused end
local id, queue = ARGV[1], ARGV[2]
local allowed = {}
if ({failed = true, canceled = true, expired = true, buried = true})[ARGV[3]] then
    allowed[ARGV[3]] = true
end
local status, refusal = status_among(KEYS[1], queue, allowed)
if not status then return refusal end
redis.call('LREM', KEYS[2], 0, id)
redis.call('ZREM', KEYS[9], id)
redis.call('HDEL', KEYS[1], 'cancel_requested')
if ARGV[7] ~= '' then
    if tonumber(ARGV[7]) == 0 then
        redis.call('HDEL', KEYS[1], 'priority')
    else
        redis.call('HSET', KEYS[1], 'priority', ARGV[7])
    end
end
redis.call('HSET', KEYS[1], 'uncounted', redis.call('HGET', KEYS[1], 'attempt') or 0)
if ARGV[5] == '' then
    redis.call('HSET', KEYS[1], 'status', 'pending', 'updated', ARGV[4])
    local u = utube_keys(KEYS[7], KEYS[8], ARGV[10], ARGV[9], queue, KEYS[3], KEYS[4], ARGV[11])
    if line_join(u, id, KEYS[1], ARGV[4], ARGV[6] == '1') then
        redis.call('PUBLISH', ARGV[8], 1)
    end
else
    redis.call('HSET', KEYS[1], 'status', 'scheduled', 'eta', ARGV[5], 'updated', ARGV[4])
    redis.call('ZADD', KEYS[5], ARGV[5], id)
end
identifier_claim(KEYS[6], ARGV[9], KEYS[1], id, queue)
return {1}
