-- Take back tasks whose holder is gone: their lease expired (any host), or the process
-- running them is dead (same host). Each goes back to pending at the front of its queue,
-- or fails once it has used its attempts.
-- KEYS, six per task: blueque_task_<id>, <prefix>:leases:<queue>,
--   blueque_pending_tasks_<queue>, blueque_failed_tasks_<queue>,
--   blueque_started_tasks_<queue>, <prefix>:queue:<queue> (queue settings)
-- ARGV[1] now, ARGV[2] 'expired' (only if the lease ended by now) or 'dead' (always),
-- ARGV[3] default maximum attempts ('': no maximum), ARGV[4] why, for the error field;
-- then four per task: task id, reserved-list key prefix of the queue (the listener id
-- read from the hash completes it), wake-up channel, attempt expected ('': any)
-- Returns, flat, per task: id, outcome ('pending', 'failed' or 'skipped').
local now, mode, default_max, why = tonumber(ARGV[1]), ARGV[2], ARGV[3], ARGV[4]
local out = {}
for i = 1, #KEYS / 6 do
    local task, leases, pending, failed, started, settings =
        KEYS[6 * i - 5], KEYS[6 * i - 4], KEYS[6 * i - 3], KEYS[6 * i - 2], KEYS[6 * i - 1], KEYS[6 * i]
    local id, reserved_prefix, channel, expected =
        ARGV[4 * i + 1], ARGV[4 * i + 2], ARGV[4 * i + 3], ARGV[4 * i + 4]
    local status = redis.call('HGET', task, 'status')
    local attempt = redis.call('HGET', task, 'attempt') or ''
    local score = redis.call('ZSCORE', leases, id)
    local outcome = 'skipped'
    if status ~= 'reserved' and status ~= 'started' then
        -- finished or gone: only a stale lease entry is left to remove
        redis.call('ZREM', leases, id)
    elseif (expected == '' or expected == attempt)
            and (mode == 'dead' or (score and tonumber(score) <= now)) then
        local node = redis.call('HGET', task, 'node') or ''
        local pid = redis.call('HGET', task, 'pid') or ''
        redis.call('LREM', reserved_prefix .. node, 1, id)
        redis.call('SREM', started, node .. ' ' .. pid .. ' ' .. id)
        redis.call('ZREM', leases, id)
        redis.call('HDEL', task, 'node', 'pid', 'pstart')
        local max = redis.call('HGET', task, 'max_attempts')
            or redis.call('HGET', settings, 'max_attempts') or default_max
        local used = tonumber(attempt) or 0
        if max ~= '' and used >= tonumber(max) then
            redis.call('HSET', task, 'status', 'failed', 'updated', ARGV[1], 'error',
                'LeaseExpired: ' .. why .. ' after ' .. used .. ' attempt(s)')
            redis.call('LPUSH', failed, id)
            outcome = 'failed'
        else
            redis.call('HSET', task, 'status', 'pending', 'updated', ARGV[1])
            redis.call('RPUSH', pending, id)
            redis.call('PUBLISH', channel, 1)
            outcome = 'pending'
        end
    end
    out[#out + 1] = id
    out[#out + 1] = outcome
end
return out
