-- Blueque "Node Task Pop", made atomic: take the next pending task of the queues, and
-- mark it reserved (or started, when a pid is given) at once. The next task is the first
-- in line of the highest priority any of the queues has (see _line.lua); between queues
-- whose next tasks have the same priority, the queue given first.
-- KEYS, fourteen per queue, queues in their order of preference:
--   blueque_pending_tasks_<queue>, blueque_reserved_tasks_<queue>_<listener>,
--   <prefix>:leases:<queue>, blueque_started_tasks_<queue>, <prefix>:queue:<queue>,
--   blueque_failed_tasks_<queue>, <prefix>:prioritized:<queue>,
--   <prefix>:identifiers:<queue>, <prefix>:expiry:<queue>, <prefix>:expired:<queue>,
--   <prefix>:stats:<queue>, <prefix>:utubes:<queue>, <prefix>:utube_waiting:<queue>,
--   <prefix>:retention:<queue>
-- A task met past its ttl (its `expires_at`, by the server's clock) is expired, not run.
-- ARGV[1] key prefix of task hashes (ids are only known inside)
-- ARGV[2] listener id, ARGV[3] now
-- ARGV[4] pid: '' to reserve only; a pid to reserve and start in the same step
-- ARGV[5] start time of that process (kept to tell it from a later one with its pid)
-- ARGV[6] default maximum run time, ARGV[7] default maximum attempts ('': none)
-- ARGV[8] most entries to pass over in one call (ids that are not pending tasks)
-- ARGV[9] default failure ttl, for the tasks quarantined or expired (see _finished.lua)
-- then three per queue: ARGV[7 + 3i] default lease length in seconds for queue i ('' or
--   '0': no expiry; 'never': no expiry whatever the task or queue say, for a caller
--   that does not renew leases), ARGV[8 + 3i] the queue's name, ARGV[9 + 3i] the name
--   prefix of its utube lists
-- Each term is the task's own, else its queue's, else the default (see _terms.lua).
-- Lease ends are timed by the server's clock, so clients' clocks need not agree.
-- A queue one of whose keys holds another type is skipped (reported in `broken`), so
-- one bad key never blocks the other queues. An id whose hash is gone, or that is filed
-- elsewhere by its known status, is dropped from the list. A task that cannot be run as
-- it is (no hash but a value of another type, an unknown status, no queue field, an
-- attempt that is not a number) is quarantined; a task of another queue met through a
-- stray entry is dropped from this list (its own queue runs it): failed with an error naming the
-- problem, filed in this queue's failed list, never run.
-- Returns {queue index (0: nothing), task id, task hash as a flat list, ttr, max run time,
--   max attempts ('' for none), dropped ids, quarantined (flat: queue, id, problem),
--   broken (flat: queue index, problem), 1 when it stopped early at the ARGV[8] bound,
--   the ids expired on the way, the task's (or its queue's) stall timeout ('': none),
--   its lease's deadline as written ('+inf': none)}.
local prefix, listener, now, pid = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local bound = tonumber(ARGV[8]) or 100
local clock = redis.call('TIME')
local server_now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local statuses = {scheduled = true, pending = true, reserved = true, started = true,
    complete = true, failed = true, canceled = true, buried = true, expired = true}
local dropped, quarantined, broken, expired, passed = {}, {}, {}, {}, 0

local function problem_of(key, id, queue)
    local kind = redis.call('TYPE', key)['ok']
    if kind == 'none' then return nil, 'drop' end
    if kind ~= 'hash' then return 'its key holds a ' .. kind .. ', not a hash', 'bad' end
    local status = redis.call('HGET', key, 'status')
    if status ~= 'pending' then
        if status and statuses[status] then return nil, 'drop' end
        if not status then return 'no status field', 'bad' end
        return 'status ' .. string.format('%q', status) .. ' is not a status', 'bad'
    end
    local own = redis.call('HGET', key, 'queue')
    if not own then return 'no queue field, found in ' .. queue, 'bad' end
    -- a task of another queue met through a stray entry: its own queue runs it
    if own ~= queue then return nil, 'drop' end
    local attempt = redis.call('HGET', key, 'attempt')
    if attempt and not string.match(attempt, '^%d+$') then
        return 'attempt field ' .. string.format('%q', attempt) .. ' is not a count', 'bad'
    end
    return nil, 'ok'
end

local function quarantine(key, id, queue, k, why)
    redis.call('LREM', k.reserved, -1, id)
    quarantined[#quarantined + 1] = queue
    quarantined[#quarantined + 1] = id
    quarantined[#quarantined + 1] = why
    if redis.call('TYPE', key)['ok'] == 'hash' then
        redis.call('HSET', key, 'status', 'failed', 'queue', queue, 'updated', now,
            'error', 'Quarantined: ' .. why)
        redis.call('LREM', k.failed, 0, id)  -- once, even if a stray entry was there
        redis.call('LPUSH', k.failed, id)
        retain({retention = k.retention, failure_ttl = k.failure_ttl, stats = k.stats}, key,
            id, 'failed', now)
    end
end

local open_queues = {}  -- the queues whose keys are all of their type: {index, keys}
local N = 14
for i = 1, #KEYS / N do
    local b = N * (i - 1)
    local k = {pending = KEYS[b + 1], reserved = KEYS[b + 2], leases = KEYS[b + 3],
        started = KEYS[b + 4], settings = KEYS[b + 5], failed = KEYS[b + 6],
        prioritized = KEYS[b + 7], identifiers = KEYS[b + 8], expiry = KEYS[b + 9],
        expired = KEYS[b + 10], stats = KEYS[b + 11], utubes = KEYS[b + 12],
        waiting = KEYS[b + 13], retention = KEYS[b + 14], failure_ttl = ARGV[9]}
    k.u = utube_keys(k.utubes, k.waiting, ARGV[9 + 3 * i], prefix, ARGV[8 + 3 * i],
        k.pending, k.prioritized)
    local bad, found = misfit({{k.pending, 'list'}, {k.reserved, 'list'}, {k.leases, 'zset'},
        {k.started, 'set'}, {k.settings, 'hash'}, {k.failed, 'list'}, {k.prioritized, 'zset'},
        {k.identifiers, 'hash'}, {k.expiry, 'zset'}, {k.expired, 'list'}, {k.stats, 'hash'},
        {k.utubes, 'hash'}, {k.waiting, 'zset'}})  -- k.retention: see _finished.lua
    if bad then
        broken[#broken + 1] = i
        broken[#broken + 1] = bad .. ' holds a ' .. found
    else
        open_queues[#open_queues + 1] = {i, k}
    end
end

-- the queue whose next task comes first: its index, keys, and where that task waits
local function next_queue()
    local best, chosen, source = nil, nil, nil
    for _, entry in ipairs(open_queues) do
        local priority, where = line_head(entry[2].pending, entry[2].prioritized)
        if priority and (best == nil or priority > best) then
            best, chosen, source = priority, entry, where
        end
    end
    return chosen, source
end

local function take(k, source)
    if source == 'list' then return redis.call('RPOPLPUSH', k.pending, k.reserved) end
    local popped = redis.call('ZPOPMIN', k.prioritized)
    if popped[1] then redis.call('LPUSH', k.reserved, popped[1]) end
    return popped[1]
end

while passed < bound do
    local entry, source = next_queue()
    if not entry then break end
    local i, k = entry[1], entry[2]
    local queue = ARGV[8 + 3 * i]
    local id = take(k, source)
    if not id then break end
    local key = prefix .. id
    local why, verdict = problem_of(key, id, queue)
    if verdict == 'drop' then
        redis.call('LREM', k.reserved, -1, id)
        dropped[#dropped + 1] = id
        passed = passed + 1
    elseif verdict == 'bad' then
        quarantine(key, id, queue, k, why)
        passed = passed + 1
    elseif is_expired(key, server_now) then
        redis.call('LREM', k.reserved, -1, id)
        expire_task(k, key, id, now, false)  -- the next of its utube key joins the line
        expired[#expired + 1] = id
        passed = passed + 1
    else
        local ttr, max_run_time, max_attempts, stall = lease_terms(key, k.settings,
            ARGV[7 + 3 * i], ARGV[6], ARGV[7])
        -- as its holder's beats compare it (see renew.lua): the text Redis keeps
        local deadline = '+inf'
        if ttr ~= 'never' and ttr and ttr > 0 then
            deadline = string.format('%.17g', server_now + ttr)
        end
        observe(k.stats, 'wait', redis.call('HGET', key, 'updated'), now)
        redis.call('HINCRBY', key, 'attempt', 1)
        if pid == '' then
            redis.call('HSET', key, 'status', 'reserved', 'node', listener, 'updated', now)
        else
            redis.call('HSET', key, 'status', 'started', 'node', listener, 'pid', pid,
                'pstart', ARGV[5], 'updated', now, 'started_at', now)
            redis.call('SADD', k.started, listener .. ' ' .. pid .. ' ' .. id)
        end
        redis.call('ZADD', k.leases, deadline, id)
        redis.call('ZREM', k.expiry, id)  -- a task that started never expires
        identifier_release(k.identifiers, key, id)
        redis.call('HINCRBY', k.stats, 'calls.take', 1)
        return {i, id, redis.call('HGETALL', key), term_text(ttr),
            term_text(max_run_time), term_text(max_attempts), dropped, quarantined,
            broken, 0, expired, term_text(stall), deadline}
    end
end
local more = 0
if passed >= bound then more = 1 end
return {0, '', {}, '', '', '', dropped, quarantined, broken, more, expired}
