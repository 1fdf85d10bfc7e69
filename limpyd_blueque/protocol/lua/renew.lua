-- Heartbeat: say a worker is alive, extend the leases of the tasks it runs, tell it which
-- of them were asked to cancel and who else may be dead, in one call. A task process
-- whose worker is gone calls it too, for its own task only.
-- What a beat costs Redis does not grow with the tasks a worker runs: cancels come from
-- one set per queue, and a lease still at the deadline this worker wrote last is its own
-- without reading its task (every step that takes a task from its holder removes or
-- rewrites its lease), so one read per queue and deadline finds them all and one write
-- per queue extends them; only a lease found moved (or never written by this worker), or
-- one its own process speaks for, is checked against its task hash.
-- KEYS[1] <prefix>:workers, KEYS[2] <prefix>:workers:info,
-- KEYS[3] <prefix>:workers:machine:<machine>; then two per queue: <prefix>:leases:<queue>,
-- <prefix>:canceling:<queue>; then one per lease: blueque_task_<id>; then one per task
-- watched: blueque_task_<id>
-- ARGV[1] worker (listener) id ('': no worker record, as for a task process)
-- ARGV[2] liveness timeout: the worker is alive until the server's now plus this, and a
--   task process renewing its own lease marks its task `alive_until` as far ahead
-- ARGV[3] the worker's identity (JSON), ARGV[4] the number of queues, ARGV[5] the number
--   of leases, ARGV[6] key prefix of task hashes, ARGV[7] '1': read the cancels asked
-- then, per lease (6 each): its queue's index among the queues (from 1), task id, attempt
--   held ('' for a task without one), lease length in seconds ('' or '0': none), seconds
--   for which its process says it lives ('': it does not speak for itself; set by a task
--   process whose worker is gone, and for a task run in its worker's own process, which
--   a long call may keep from beating), the lease's deadline as this worker last wrote it
--   ('': unknown)
-- then the id of each task watched.
-- A lease is extended only while the task is reserved or started in that attempt, and
-- never shortened (its holder may have touched it further).
-- Returns {lost, siblings, expired, now, 1 when the worker's record was missing, watched,
-- renewed, canceling}: lost, flat, the id and status ('' when gone) of each task whose
-- lease is lost (finished, gone, or held by a newer attempt); siblings, flat, the id and
-- identity of every other worker on the same machine; expired, the ids of workers whose
-- record ran out; now, the server's time; watched, flat, per task watched: id and
-- `progress` ('' when none); renewed, flat, per lease kept: id and its deadline now (as
-- Redis writes it); canceling, the ids of the queues' running tasks whose cancel was asked.
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local worker, timeout = ARGV[1], tonumber(ARGV[2]) or 0
local queues, count, prefix = tonumber(ARGV[4]) or 0, tonumber(ARGV[5]) or 0, ARGV[6]
local first_task = 3 + 2 * queues  -- KEYS[first_task + j]: the task of lease j

-- a call refused for a key of another type gives nil: that part of the beat is passed over
local function try(...)
    local reply = redis.pcall(...)
    if type(reply) == 'table' and reply.err then return nil end
    return reply
end

local function deadline_text(deadline)
    if deadline == math.huge then return '+inf' end
    return string.format('%.17g', deadline)
end

-- the worker's record; records of another type are left alone: the worker goes on (and
-- nobody is judged dead)
local siblings, expired, revived = {}, {}, 0
if worker ~= '' then
    local added = try('ZADD', KEYS[1], now + timeout, worker)
    local members = added and try('HSET', KEYS[2], worker, ARGV[3])
        and try('SADD', KEYS[3], worker) and try('SMEMBERS', KEYS[3])
    if members then
        revived = added
        for _, other in ipairs(members) do
            if other ~= worker then
                siblings[#siblings + 1] = other
                siblings[#siblings + 1] = try('HGET', KEYS[2], other) or ''
            end
        end
        expired = try('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. now) or {}
    end
end

-- the leases still at the deadline this worker wrote: the leases renewed together share
-- their deadline, found with one read of exactly that score; a lease alone at its
-- deadline (reserved since the last renewal, or touched) is read by itself. Only this
-- worker's own deadlines are read, never a span holding other workers' leases.
local groups, order = {}, {}
for j = 1, count do
    local at = 7 + 6 * (j - 1)
    local value = tonumber(ARGV[at + 6])
    -- an endless lease is never taken as unmoved: a newer holder's looks the same; nor
    -- one its process speaks for: its task hash is written, so it is checked first
    if value and value < math.huge and ARGV[at + 5] == '' then
        local key = ARGV[at + 1] .. ' ' .. ARGV[at + 6]
        local group = groups[key]
        if not group then
            group = {index = tonumber(ARGV[at + 1]), text = ARGV[at + 6], ids = {}}
            groups[key] = group
            order[#order + 1] = group
        end
        group.ids[#group.ids + 1] = ARGV[at + 2]
    end
end
local found = {}  -- queue index .. ' ' .. id -> the lease's deadline now
for _, group in ipairs(order) do
    local leases = KEYS[2 + 2 * group.index]
    if #group.ids == 1 then
        local score = try('ZSCORE', leases, group.ids[1])
        if score then found[group.index .. ' ' .. group.ids[1]] = tonumber(score) end
    else
        for _, id in ipairs(try('ZRANGEBYSCORE', leases, group.text, group.text) or {}) do
            found[group.index .. ' ' .. id] = tonumber(group.text)
        end
    end
end

-- each lease: kept (extended in one write per queue below), or lost
local lost, renewed, writes = {}, {}, {}
for j = 1, count do
    local at = 7 + 6 * (j - 1)
    local index, id, attempt = tonumber(ARGV[at + 1]), ARGV[at + 2], ARGV[at + 3]
    local seconds, alive, written = tonumber(ARGV[at + 4]), tonumber(ARGV[at + 5]), ARGV[at + 6]
    local task, leases = KEYS[first_task + j], KEYS[2 + 2 * index]
    local current, status = nil, ''
    local written_value = tonumber(written)
    if written_value and written_value < math.huge and not alive
            and found[index .. ' ' .. id] == written_value then
        current = written_value
    else
        local fields = try('HMGET', task, 'status', 'attempt')
        status = fields and fields[1] or ''
        if (status == 'reserved' or status == 'started') and (fields[2] or '') == attempt then
            local score = redis.pcall('ZSCORE', leases, id)
            if type(score) ~= 'table' then current = tonumber(score) or -math.huge end
        end
    end
    if current then
        local deadline = math.huge
        if seconds and seconds > 0 then deadline = now + seconds end
        if deadline > current then  -- never shortens: a `touch` may have extended it further
            local pairs_of = writes[index] or {}
            writes[index] = pairs_of
            pairs_of[#pairs_of + 1] = deadline_text(deadline)
            pairs_of[#pairs_of + 1] = id
            current = deadline
        end
        if alive then try('HSET', task, 'alive_until', now + alive) end
        renewed[#renewed + 1] = id
        renewed[#renewed + 1] = deadline_text(current)
    else
        lost[#lost + 1] = id
        lost[#lost + 1] = status
    end
end
for index, pairs_of in pairs(writes) do
    for from = 1, #pairs_of, 1000 do
        try('ZADD', KEYS[2 + 2 * index], unpack(pairs_of, from, math.min(from + 999, #pairs_of)))
    end
end

-- the cancels asked in each queue; an entry whose task no longer runs with its cancel
-- asked (settled, put back, retried) is dropped. At most 500 a beat: a set grown by
-- another client never holds Redis long, and shrinks at each beat.
local canceling = {}
if ARGV[7] == '1' then
    for index = 1, queues do
        local key = KEYS[3 + 2 * index]
        for _, id in ipairs(try('SRANDMEMBER', key, 500) or {}) do
            local fields = try('HMGET', prefix .. id, 'status', 'cancel_requested')
            if fields and (fields[1] == 'reserved' or fields[1] == 'started') and fields[2] then
                canceling[#canceling + 1] = id
            else
                try('SREM', key, id)
            end
        end
    end
end

-- the progress of each task watched
local watched = {}
for w = 1, #KEYS - first_task - count do
    watched[#watched + 1] = ARGV[7 + 6 * count + w]
    watched[#watched + 1] = try('HGET', KEYS[first_task + count + w], 'progress') or ''
end
return {lost, siblings, expired, tostring(now), revived, watched, renewed, canceling}
