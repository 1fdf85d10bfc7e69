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
-- ARGV[10] '1' when the caller counts the take and its wait itself (statistics.Tally),
--   else counted here in the queue's counters
-- then five per queue: ARGV[6 + 5i] default lease length in seconds for queue i ('' or
--   '0': no expiry; 'never': no expiry whatever the task or queue say, for a caller
--   that does not renew leases), ARGV[7 + 5i] the queue's name, ARGV[8 + 5i] the name
--   prefix of its utube lists, ARGV[9 + 5i] the keys of its groups
--   (keys.KeySpace.group_layout), ARGV[10 + 5i] '0' when the caller knows the queue has
--   no limit (as a worker reads them twice a second), else its limit is read here
-- Tasks without a group come first, as above; when none of the queues has one that may
-- run, the next task of their groups in their fair turns (see _groups.lua), a group whose
-- limit is reached being held back on the way. A queue whose own limit (the queue as a
-- whole) is reached is passed over.
-- Each term is the task's own, else its queue's, else the default (see _terms.lua).
-- Lease ends are timed by the server's clock, so clients' clocks need not agree.
-- A queue one of whose keys holds another type is skipped (reported in `broken`), so
-- one bad key never blocks the other queues. Each key is checked where the step uses it
-- (a read or a write that Redis refuses with nothing changed, `redis.pcall`), what was
-- written before it undone (the task taken goes back where it waited): a plain task
-- costs no check of the keys it does not touch. An id whose hash is gone, or that is filed
-- elsewhere by its known status, is dropped from the list. A task that cannot be run as
-- it is (no hash but a value of another type, an unknown status, no queue field or one
-- that is no queue name, an attempt or another number field that is not a number) is
-- quarantined; a task of another queue met through a
-- stray entry is dropped from this list (its own queue runs it): failed with an error naming the
-- problem, filed in this queue's failed list, never run.
-- Returns {queue index (0: nothing), task id, task hash as a flat list, ttr, max run time,
--   max attempts ('' for none), dropped ids, quarantined (flat: queue, id, problem),
--   broken (flat, four per queue: its index, its key of another type ('' if none was
--   found), the type found, the type it must hold), 1 when it stopped early at the ARGV[8] bound,
--   the ids expired on the way, the task's (or its queue's) stall timeout ('': none),
--   its lease's deadline as written ('+inf': none), the time the task was last updated
--   before it was taken (its wait began), as its hash had it, then the queue's
--   result_ttl and failure_ttl as its settings hold them ('-': unset; '': not read, the
--   task has all its lease terms), for the finish step (see finish.lua's ARGV[15])}.
local prefix, listener, now, pid = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local bound = tonumber(ARGV[8]) or 100
local tallied = ARGV[10] == '1'
local clock = redis.call('TIME')
local server_now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local statuses = {scheduled = true, pending = true, reserved = true, started = true,
    complete = true, failed = true, canceled = true, buried = true, expired = true}
-- the fields of a task hash read as numbers (here or by its worker): one that holds
-- something else makes the task unrunnable as it is ('' counts as unset); `attempt`, a
-- count, is checked on its own first
local NUMBER_FIELDS = {'created', 'updated', 'eta', 'pid', 'ttr', 'max_run_time',
    'max_attempts', 'stall_timeout', 'expires_at', 'priority', 'result_ttl', 'failure_ttl',
    'error_ttl'}
local dropped, quarantined, broken, expired, passed = {}, {}, {}, {}, 0

-- true when Redis refused a command on a key of another type (nothing changed); any other
-- error (a full Redis refusing the step's first write, say) ends the step with it
local function refused(reply)
    if type(reply) ~= 'table' or reply.err == nil then return false end
    if string.sub(reply.err, 1, 9) ~= 'WRONGTYPE' then error(reply.err, 0) end
    return true
end

-- every structure of a queue with its type: named in a report when one is refused
local function structures(k)
    return {{k.pending, 'list'}, {k.reserved, 'list'}, {k.leases, 'zset'},
        {k.started, 'set'}, {k.settings, 'hash'}, {k.failed, 'list'}, {k.prioritized, 'zset'},
        {k.identifiers, 'hash'}, {k.expiry, 'zset'}, {k.expired, 'list'}, {k.stats, 'hash'},
        {k.utubes, 'hash'}, {k.waiting, 'zset'}, {k.u.g.grouped, 'zset'},
        {k.u.g.groups, 'zset'}, {k.u.g.held, 'zset'}, {k.u.g.limits, 'hash'},
        {k.u.g.queue_starts, 'zset'}}
        -- k.retention: see _finished.lua
end

local function not_a_number(text)
    return text ~= '' and (tonumber(text) == nil or string.find(text, '[xX]') ~= nil)
end

-- why the task at `key` cannot run ('bad'), or that it is not a pending task of `queue`
-- ('drop'), or 'ok' with its hash (flat, as HGETALL gives it) and its fields by name
local function problem_of(key, queue)
    local flat = redis.pcall('HGETALL', key)
    if refused(flat) then
        return 'its key holds a ' .. redis.call('TYPE', key)['ok'] .. ', not a hash', 'bad'
    end
    if #flat == 0 then return nil, 'drop' end
    local f = {}
    for j = 1, #flat, 2 do f[flat[j]] = flat[j + 1] end
    local status = f.status
    if status ~= 'pending' then
        if status and statuses[status] then return nil, 'drop' end
        if not status then return 'no status field', 'bad' end
        return 'status ' .. string.format('%q', status) .. ' is not a status', 'bad'
    end
    local own = f.queue
    if not own then return 'no queue field, found in ' .. queue, 'bad' end
    if own ~= queue then
        -- a task of another queue met through a stray entry: its own queue runs it, if
        -- it names one (else it would wait forever)
        if #own <= 200 and string.match(own, '^[%w%._%-]+$') then return nil, 'drop' end
        return 'queue field ' .. string.format('%q', own) .. ' is not a queue name', 'bad'
    end
    if f.group and not group_of(f.group) then
        return 'group field ' .. string.format('%q', f.group) .. ' is not a group name', 'bad'
    end
    local attempt = f.attempt
    if attempt and not string.match(attempt, '^%d+$') then
        return 'attempt field ' .. string.format('%q', attempt) .. ' is not a count', 'bad'
    end
    for _, name in ipairs(NUMBER_FIELDS) do
        if f[name] and not_a_number(f[name]) then
            return name .. ' field ' .. string.format('%q', f[name]) .. ' is not a number',
                'bad'
        end
    end
    return nil, 'ok', f, flat
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

local open_queues = {}  -- the queues not found broken: {index, keys}
local sound = {}  -- the queues not found broken, their limit reached or not
local N = 14
for i = 1, #KEYS / N do
    local b = N * (i - 1)
    local k = {pending = KEYS[b + 1], reserved = KEYS[b + 2], leases = KEYS[b + 3],
        started = KEYS[b + 4], settings = KEYS[b + 5], failed = KEYS[b + 6],
        prioritized = KEYS[b + 7], identifiers = KEYS[b + 8], expiry = KEYS[b + 9],
        expired = KEYS[b + 10], stats = KEYS[b + 11], utubes = KEYS[b + 12],
        waiting = KEYS[b + 13], retention = KEYS[b + 14], failure_ttl = ARGV[9]}
    k.u = utube_keys(k.utubes, k.waiting, ARGV[8 + 5 * i], prefix, ARGV[7 + 5 * i],
        k.pending, k.prioritized, ARGV[9 + 5 * i])
    local bad, found, kind = nil, nil, nil
    local closed = false
    if ARGV[10 + 5 * i] ~= '0' then  -- the limit of the queue as a whole
        local text = redis.pcall('HGET', k.u.g.limits, '')
        if refused(text) then
            bad, found, kind = k.u.g.limits, redis.call('TYPE', k.u.g.limits)['ok'], 'hash'
        elseif text then
            local limit = groups().parse_limit(text)
            if limit.running or limit.starts then
                k.queue_limit = limit
                local ok, why = pcall(groups().queue_closed, k.u.g, limit, k.leases,
                    server_now)
                if ok then
                    closed = why ~= nil
                else
                    bad, found, kind = misfit(structures(k))
                    if not bad then error(why, 0) end
                end
            end
        end
    end
    if bad then
        for _, value in ipairs({i, bad, found, kind}) do broken[#broken + 1] = value end
    elseif not closed then
        open_queues[#open_queues + 1] = {i, k}
    end
    if not bad then sound[#sound + 1] = {i, k} end
end

-- a queue found broken on the way (`why`: its misfit key, the type found and the type it
-- must hold, when known): reported, and passed over from now on
local function break_queue(entry, why)
    local bad, found, kind
    if why then bad, found, kind = why[1], why[2], why[3] else
        bad, found, kind = misfit(structures(entry[2]))
    end
    for _, value in ipairs({entry[1], bad or '', found or 'value of another type', kind or ''}) do
        broken[#broken + 1] = value
    end
    for j, other in ipairs(open_queues) do
        if other == entry then table.remove(open_queues, j) break end
    end
    entry[2].broken = true
end

-- the reply of the step: the lease set and the started set of each queue that did not
-- give the task (`chosen`: its index, 0 when none did) are checked, so that a queue whose
-- own writes would be refused is reported at every call, whatever it holds
local function reply_with(chosen, reply)
    for _, entry in ipairs(sound) do
        local k = entry[2]
        if entry[1] ~= chosen and not k.broken then
            local bad, found, kind = misfit({{k.leases, 'zset'}, {k.started, 'set'}})
            if bad then
                for _, value in ipairs({entry[1], bad, found, kind}) do
                    broken[#broken + 1] = value
                end
            end
        end
    end
    return reply
end

-- the queue whose next task comes first: its entry, and where that task waits ('list'
-- is then only a guess when a third value, where to look next, is given)
local function next_queue()
    local j = 1
    local best, chosen, source = nil, nil, nil
    while j <= #open_queues do
        local entry = open_queues[j]
        local k = entry[2]
        local top = redis.pcall('ZRANGE', k.prioritized, 0, 0, 'WITHSCORES')
        local priority, where = nil, nil
        if refused(top) then
            break_queue(entry)
        else
            if top[2] then priority, where = score_priority(top[2]), 'zset' end
            local length = 1
            if (priority == nil or priority < 0) and #open_queues == 1 then
                -- one queue: its list is tried at once, its sorted set next (see `take`)
                return entry, 'list', where
            end
            if priority == nil or priority < 0 then length = redis.pcall('LLEN', k.pending) end
            if refused(length) then
                break_queue(entry)
            else
                if (priority == nil or priority < 0) and length > 0 then
                    priority, where = 0, 'list'
                end
                if priority and (best == nil or priority > best) then
                    best, chosen, source = priority, entry, where
                end
                j = j + 1
            end
        end
    end
    return chosen, source
end

-- take the next task of a queue into its holder's reserved list: its id, its score
-- when it waited in the prioritized set, and where it waited; nil when none waits or a
-- key of another type refuses it (nothing changed: the queue is then broken). A list
-- found empty sends the take to `otherwise` when given (see `next_queue`).
local function take(entry, source, otherwise)
    local k = entry[2]
    if source == 'list' then
        local id = redis.pcall('RPOPLPUSH', k.pending, k.reserved)
        if refused(id) then break_queue(entry) return nil end
        if id or otherwise ~= 'zset' then return id, nil, source end
    end
    local popped = redis.call('ZPOPMIN', k.prioritized)
    if not popped[1] then return nil end
    if refused(redis.pcall('LPUSH', k.reserved, popped[1])) then
        redis.call('ZADD', k.prioritized, popped[2], popped[1])
        break_queue(entry)
        return nil
    end
    return popped[1], popped[2], 'zset'
end

-- put a task just taken back where it waited (a key of its queue refused the step)
local function untake(k, source, id, score)
    if source == 'list' then
        redis.call('LMOVE', k.reserved, k.pending, 'LEFT', 'RIGHT')
    else
        redis.call('LREM', k.reserved, 1, id)
        redis.call('ZADD', k.prioritized, score, id)
    end
end

-- the lease terms of a task: its own fields (`f`), else its queue's settings, else the
-- defaults (see _terms.lua), then its queue's `result_ttl` and `failure_ttl` as the
-- settings hold them ('-' when unset; both nil when the settings were not read: the task
-- has all its terms); nil when the settings hash is of another type
local function terms_of(f, settings, ttr, max_run_time, max_attempts)
    local own = {f.ttr, f.max_run_time, f.max_attempts, f.stall_timeout}
    local queue = {false, false, false, false}
    local read = not (usable(own[1]) and usable(own[2]) and usable(own[3])
        and usable(own[4]))
    if read then
        queue = redis.pcall('HMGET', settings, 'ttr', 'max_run_time', 'max_attempts',
            'stall_timeout', 'result_ttl', 'failure_ttl')
        if refused(queue) then return nil end
    end
    local function pick(n, default) return usable(own[n]) or usable(queue[n]) or usable(default) end
    local own_ttr = ttr
    if ttr ~= 'never' then own_ttr = pick(1, ttr) end
    local result_ttl, failure_ttl = nil, nil
    if read then result_ttl, failure_ttl = queue[5] or '-', queue[6] or '-' end
    return {own_ttr, pick(2, max_run_time), pick(3, max_attempts), pick(4, nil), result_ttl,
        failure_ttl}
end

-- the fields a holder writes on the task, set in its flat hash `flat` as in Redis
local function set_fields(flat, fields)
    local at = {}
    for j = 1, #flat, 2 do at[flat[j]] = j end
    for j = 1, #fields, 2 do
        if at[fields[j]] then
            flat[at[fields[j]] + 1] = fields[j + 1]
        else
            flat[#flat + 1] = fields[j]
            flat[#flat + 1] = fields[j + 1]
        end
    end
end

-- the task `id` just taken from `entry`'s queue into its holder's reserved list: started
-- (its reply), or passed over (dropped, quarantined, expired: nil), or put back where it
-- waited by `untaken()` (a key of its queue found of another type: the queue is broken);
-- `taken`, for a task of a group, is what `group_take` gave
local function settle(entry, id, untaken, taken)
    local i, k = entry[1], entry[2]
    local queue = ARGV[7 + 5 * i]
    local key = prefix .. id
    local why, verdict, f, flat = problem_of(key, queue)
    local limit = verdict == 'ok' and tonumber(f.expires_at)
    -- a task that is not plain writes to more of its queue's keys: all of their type
    -- first, or the task goes back where it waited and the queue is broken
    local checked = verdict == 'drop' or (verdict == 'ok' and not f.expires_at
        and not f.identifier) or not misfit(structures(k))
    if not checked then
        untaken()
        break_queue(entry)
    elseif verdict == 'drop' then
        redis.call('LREM', k.reserved, -1, id)
        dropped[#dropped + 1] = id
        passed = passed + 1
    elseif verdict == 'bad' then
        quarantine(key, id, queue, k, why)
        passed = passed + 1
    elseif limit and limit <= server_now then
        redis.call('LREM', k.reserved, -1, id)
        expire_task(k, key, id, now, false)  -- the next of its utube key joins the line
        expired[#expired + 1] = id
        passed = passed + 1
    else
        local terms = terms_of(f, k.settings, ARGV[6 + 5 * i], ARGV[6], ARGV[7])
        if not terms then
            untaken()
            break_queue(entry)
            return nil
        end
        local ttr, max_run_time, max_attempts, stall = terms[1], terms[2], terms[3],
            terms[4]
        -- as its holder's beats compare it (see renew.lua): the text Redis keeps
        local deadline = '+inf'
        if ttr ~= 'never' and ttr and ttr > 0 then
            deadline = string.format('%.17g', server_now + ttr)
        end
        -- the lease set and the started set are checked by their first write (the task
        -- goes back where it waited when one is refused); the task's key is a hash
        if refused(redis.pcall('ZADD', k.leases, deadline, id)) then
            untaken()
            break_queue(entry, {k.leases, redis.call('TYPE', k.leases)['ok'], 'zset'})
            return nil
        end
        local fields
        local attempt = tostring((tonumber(f.attempt) or 0) + 1)
        -- `started_at` is the instant a window of starts counts (see _groups.lua): the
        -- server's, written when the task is taken, whether it starts here or in a
        -- process of its own (start.lua leaves it)
        local stamp = string.format('%.6f', server_now)
        if pid == '' then
            -- its start writes the started set later (start.lua): of its type first
            if misfit({{k.started, 'set'}}) then
                redis.call('ZREM', k.leases, id)
                untaken()
                break_queue(entry, {k.started, redis.call('TYPE', k.started)['ok'], 'set'})
                return nil
            end
            fields = {'attempt', attempt, 'status', 'reserved', 'node', listener,
                'updated', now, 'started_at', stamp}
        else
            if refused(redis.pcall('SADD', k.started, listener .. ' ' .. pid .. ' ' .. id)) then
                redis.call('ZREM', k.leases, id)
                untaken()
                break_queue(entry, {k.started, redis.call('TYPE', k.started)['ok'], 'set'})
                return nil
            end
            fields = {'attempt', attempt, 'status', 'started', 'node', listener,
                'pid', pid, 'pstart', ARGV[5], 'updated', now, 'started_at', stamp}
        end
        redis.call('HSET', key, unpack(fields))
        if taken then
            groups().started(k.u.g, taken, attempt, k.queue_limit, server_now)
        elseif k.queue_limit then
            groups().count_start(k.u.g.queue_starts, k.queue_limit, id .. ':' .. attempt,
                server_now)
        end
        if not tallied then observe(k.stats, 'wait', f.updated, now) end
        if f.expires_at then redis.call('ZREM', k.expiry, id) end  -- never expires now
        if f.identifier then identifier_release(k.identifiers, key, id) end
        if not tallied then redis.pcall('HINCRBY', k.stats, 'calls.take', 1) end
        local waiting_since = f.updated
        set_fields(flat, fields)
        return {i, id, flat, term_text(ttr), term_text(max_run_time),
            term_text(max_attempts), dropped, quarantined, broken, 0, expired,
            term_text(stall), deadline, waiting_since or '', terms[5] or '',
            terms[6] or ''}
    end
    return nil
end

-- the tasks without a group first
while passed < bound do
    local entry, source, otherwise = next_queue()
    if not entry then break end
    local k = entry[2]
    local open_before = #open_queues
    local id, score
    id, score, source = take(entry, source, otherwise)
    if id then
        local reply = settle(entry, id, function() untake(k, source, id, score) end, nil)
        if reply then return reply_with(entry[1], reply) end
    elseif #open_queues == open_before then
        break  -- nothing taken and no queue found broken: nothing more to take
    end
end

-- then the tasks of the groups, queue by queue (a key of another type among a queue's
-- group keys breaks that queue only)
local j, stopped = 1, false
while passed < bound and j <= #open_queues do
    local entry = open_queues[j]
    local k = entry[2]
    local ok, taken, why = pcall(groups().take, k.u.g, k.leases, server_now)
    if not ok then
        if not misfit(structures(k)) then error(taken, 0) end
        break_queue(entry)  -- the next queue is now at j
    elseif type(why) == 'table' then  -- a key of the group it came to, of another type
        break_queue(entry, why)
    elseif not taken then
        stopped = stopped or why == 'more'
        j = j + 1
    else
        local id = taken[1]
        redis.call('LPUSH', k.reserved, id)
        local reply = settle(entry, id, function()
            redis.call('LREM', k.reserved, 1, id)
            groups().untake(k.u.g, taken)
        end, taken)
        if reply then return reply_with(entry[1], reply) end
    end
end
local more = 0
if passed >= bound or stopped then more = 1 end
return reply_with(0, {0, '', {}, '', '', '', dropped, quarantined, broken, more, expired})
