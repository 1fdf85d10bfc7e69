-- Heartbeat: extend the leases of the tasks a worker runs, in one call.
-- KEYS, two per task: blueque_task_<id>, <prefix>:leases:<queue>
-- ARGV[1] now (unused: leases are timed by the server's clock); then, per task: task id,
--   attempt held ('' for a task without one), lease length in seconds ('' or '0': none)
-- A lease is extended only while the task is reserved or started in that attempt.
-- Returns, flat, the id and status ('' when gone) of each task whose lease is lost:
-- finished, gone, or held by a newer attempt.
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local lost = {}
for i = 1, #KEYS / 2 do
    local task, leases = KEYS[2 * i - 1], KEYS[2 * i]
    local id, attempt, ttr = ARGV[3 * i - 1], ARGV[3 * i], ARGV[3 * i + 1]
    local status = redis.call('HGET', task, 'status')
    if (status == 'reserved' or status == 'started')
            and (redis.call('HGET', task, 'attempt') or '') == attempt then
        local deadline = '+inf'
        local seconds = tonumber(ttr)
        if seconds and seconds > 0 then deadline = now + seconds end
        redis.call('ZADD', leases, deadline, id)
    else
        lost[#lost + 1] = id
        lost[#lost + 1] = status or ''
    end
end
return lost
