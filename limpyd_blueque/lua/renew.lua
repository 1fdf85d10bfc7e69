-- Heartbeat: say the worker is alive and extend the leases of the tasks it runs, in one call.
-- KEYS[1] <prefix>:workers; then two per task: blueque_task_<id>, <prefix>:leases:<queue>
-- ARGV[1] worker (listener) id ('': no worker record to refresh), ARGV[2] the time until
-- which that worker is alive (epoch seconds, by its own clock, as its readers compare);
-- then, per task: task id, attempt held ('' for a task without one), lease length in
-- seconds ('' or '0': none)
-- A lease is extended only while the task is reserved or started in that attempt.
-- Returns, flat, the id and status ('' when gone) of each task whose lease is lost:
-- finished, gone, or held by a newer attempt.
if ARGV[1] ~= '' then redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1]) end
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local lost = {}
for i = 1, (#KEYS - 1) / 2 do
    local task, leases = KEYS[2 * i], KEYS[2 * i + 1]
    local id, attempt, ttr = ARGV[3 * i], ARGV[3 * i + 1], ARGV[3 * i + 2]
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
