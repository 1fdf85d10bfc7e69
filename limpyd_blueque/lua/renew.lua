-- Heartbeat: say a worker is alive, extend the leases of the tasks it runs, and tell it
-- who else may be dead, in one call. A task process whose worker is gone calls it too,
-- for its own task only.
-- KEYS[1] <prefix>:workers, KEYS[2] <prefix>:workers:info,
-- KEYS[3] <prefix>:workers:machine:<machine>; then two per lease: blueque_task_<id>,
-- <prefix>:leases:<queue>; then one per task watched: blueque_task_<id>
-- ARGV[1] worker (listener) id ('': no worker record, as for a task process)
-- ARGV[2] liveness timeout: the worker is alive until the server's now plus this, and a
--   task process renewing its own lease marks its task `alive_until` as far ahead
-- ARGV[3] the worker's identity (JSON), ARGV[4] the number of leases
-- then, per lease: task id, attempt held ('' for a task without one), lease length in
--   seconds ('' or '0': none), seconds for which its process says it lives ('': it does
--   not speak for itself; set by a task process whose worker is gone, and for a task run
--   in its worker's own process, which a long call may keep from beating)
-- A lease is extended only while the task is reserved or started in that attempt, and
-- never shortened (its holder may have touched it further).
-- Returns {lost, siblings, expired, now, 1 when the worker's record was missing,
-- watched}: lost, flat, the id and status ('' when gone)
-- of each task whose lease is lost (finished, gone, or held by a newer attempt);
-- siblings, flat, the id and identity of every other worker on the same machine;
-- expired, the ids of workers whose record ran out; now, the server's time; watched,
-- flat, per task watched whose hash is there: id, `cancel_requested` ('' when not
-- asked), `progress` ('' when none). ARGV then holds, after the leases, the id of each
-- task watched (every task the worker runs, at every beat).
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local worker, timeout = ARGV[1], tonumber(ARGV[2]) or 0
local siblings, expired, revived = {}, {}, 0
-- records of another type are left alone: the worker goes on (and nobody is judged dead)
if worker ~= '' and not misfit({{KEYS[1], 'zset'}, {KEYS[2], 'hash'}, {KEYS[3], 'set'}}) then
    revived = redis.call('ZADD', KEYS[1], now + timeout, worker)
    redis.call('HSET', KEYS[2], worker, ARGV[3])
    redis.call('SADD', KEYS[3], worker)
    for _, other in ipairs(redis.call('SMEMBERS', KEYS[3])) do
        if other ~= worker then
            siblings[#siblings + 1] = other
            siblings[#siblings + 1] = redis.call('HGET', KEYS[2], other) or ''
        end
    end
    expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. now)
end
local lost = {}
local count = tonumber(ARGV[4]) or 0
for i = 1, count do
    local task, leases = KEYS[2 * i + 2], KEYS[2 * i + 3]
    local id, attempt, ttr, alive = ARGV[4 * i + 1], ARGV[4 * i + 2], ARGV[4 * i + 3],
        tonumber(ARGV[4 * i + 4])
    local status = nil
    if not misfit({{task, 'hash'}, {leases, 'zset'}}) then
        status = redis.call('HGET', task, 'status')
    end
    if (status == 'reserved' or status == 'started')
            and (redis.call('HGET', task, 'attempt') or '') == attempt then
        local deadline = '+inf'
        local seconds = tonumber(ttr)
        if seconds and seconds > 0 then deadline = now + seconds end
        -- never shortens a lease: a `touch` may have extended it further
        local current = tonumber(redis.call('ZSCORE', leases, id))
        if deadline == '+inf' or not current or current < deadline then
            redis.call('ZADD', leases, deadline, id)
        end
        if alive then redis.call('HSET', task, 'alive_until', now + alive) end
    else
        lost[#lost + 1] = id
        lost[#lost + 1] = status or ''
    end
end
local watched = {}
for j = 1, #KEYS - 3 - 2 * count do
    local task = KEYS[3 + 2 * count + j]
    if redis.call('TYPE', task)['ok'] == 'hash' then
        local flags = redis.call('HMGET', task, 'cancel_requested', 'progress')
        watched[#watched + 1] = ARGV[4 + 4 * count + j]
        watched[#watched + 1] = flags[1] or ''
        watched[#watched + 1] = flags[2] or ''
    end
end
return {lost, siblings, expired, tostring(now), revived, watched}
