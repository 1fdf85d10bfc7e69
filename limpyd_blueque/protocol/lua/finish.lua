-- Blueque "Task Completed Successfully" and "Task Failed", with fencing: only the
-- listener (and attempt) that holds the task may finish it, and only once. Its holder
-- also records here that a task it stopped on a cancel request is 'canceled'; and a task
-- whose cancel was asked before its outcome is filed as canceled whatever the outcome
-- (the cancel came first: it wins), keeping no result nor error: one outcome.
-- KEYS[1] blueque_task_<id>, KEYS[2] blueque_reserved_tasks_<queue>_<listener>,
-- KEYS[3] blueque_started_tasks_<queue>, KEYS[4] the list of the status asked
-- (blueque_<status>_tasks_<queue>, or <prefix>:canceled:<queue>),
-- KEYS[5] <prefix>:leases:<queue>, KEYS[6] <prefix>:stats:<queue> (counts an 'ack', a
-- 'fail' or a 'cancel'), KEYS[7] <prefix>:utubes:<queue>, KEYS[8] <prefix>:utube_waiting:<queue>,
-- KEYS[9] blueque_pending_tasks_<queue>, KEYS[10] <prefix>:prioritized:<queue>,
-- KEYS[11] <prefix>:canceled:<queue>, KEYS[12] <prefix>:queue:<queue> (settings),
-- KEYS[13] <prefix>:retention:<queue>, KEYS[14] <prefix>:stalled:<queue>,
-- KEYS[15] <prefix>:stats:<queue>:m:<minute> (throughput)
-- ARGV[1] task id, ARGV[2] listener id, ARGV[3] pid ('': the pid in the hash),
-- ARGV[4] 'complete', 'failed' or 'canceled', ARGV[5] result or error, ARGV[6] now,
-- ARGV[7] attempt the caller holds ('': not checked), ARGV[8] name prefix of the utube
-- lists, ARGV[9] key prefix of task hashes, ARGV[10] queue name, ARGV[11] wake-up channel,
-- ARGV[12] default result ttl, ARGV[13] default failure ttl (see _finished.lua),
-- ARGV[14] '1' when the caller counts the step itself (statistics.Tally; KEYS[6] and
-- KEYS[15] are then not written), else counted here, ARGV[15] the queue's ttl of the
-- status asked (`result_ttl` or `failure_ttl`) as the reserve step read it, for a task's
-- retention is one of its terms, fixed when it was taken ('': not known, read here),
-- ARGV[16] the keys of the queue's groups (keys.KeySpace.group_layout): a task of a group
-- lets its slot go, ARGV[17] the peak memory of the process that ran the attempt, in
-- bytes ('': not known), noted as `peak_rss`
-- A task with a utube key hands it to the next task of that key (see _line.lua).
-- Returns {1, held, started_at, followed} when finished, {2, held, started_at, followed}
-- when filed as canceled (`held`: 'reserved' or 'started', the status it had;
-- `started_at`: when it started, as its hash had it, '' when unset; `followed`: '1' when
-- its end was listed for its followers, see `retain`), {0, status, node, attempt} when refused,
-- {-1} when missing.
-- (KEYS[12] to KEYS[15] are indexes beside the task, written with redis.pcall: see
-- _finished.lua)
-- Keys are checked where the step uses them: the task's hash by its first read, the
-- others by the writes Redis refuses with nothing changed (`redis.pcall`), what was
-- written before one undone; the keys of a utube task's key first. A key of another
-- type refuses the step as before, naming the first misfit of KEYS[1] to KEYS[11].
-- true when Redis refused a command on a key of another type (nothing changed); any other
-- error (a full Redis refusing the step's first write, say) ends the step with it
local function refused(reply)
    if type(reply) ~= 'table' or reply.err == nil then return false end
    if string.sub(reply.err, 1, 9) ~= 'WRONGTYPE' then error(reply.err, 0) end
    return true
end
local MISFITS = {{KEYS[1], 'hash'}, {KEYS[2], 'list'}, {KEYS[3], 'set'},
    {KEYS[4], 'list'}, {KEYS[5], 'zset'}, {KEYS[6], 'hash'}, {KEYS[7], 'hash'},
    {KEYS[8], 'zset'}, {KEYS[9], 'list'}, {KEYS[10], 'zset'}, {KEYS[11], 'list'}}
local id, listener, task = ARGV[1], ARGV[2], KEYS[1]
local got = redis.pcall('HMGET', task, 'status', 'node', 'attempt', 'cancel_requested',
    'started_at', 'pid', 'stalled_at', 'utube', 'result_ttl', 'failure_ttl', 'group',
    'waited', 'follow', 'workflow')
if refused(got) then return refuse_misfit(MISFITS) end
local held, node, current = got[1], got[2] or '', got[3] or ''
if not held then return {-1} end
if (held ~= 'reserved' and held ~= 'started') or node ~= listener
        or (ARGV[7] ~= '' and current ~= ARGV[7]) then
    return {0, held, node, current}
end
local utube = got[8]
if utube then  -- handing the key on writes to the utube keys and the line: checked first
    local misfit_reply = refuse_misfit(MISFITS)
    if misfit_reply then return misfit_reply end
end
local status, list = ARGV[4], KEYS[4]
if status == 'canceled' or got[4] then status, list = 'canceled', KEYS[11] end
local pid = ARGV[3]
if pid == '' then pid = got[6] or '' end
-- the writes a key of another type may refuse, each undone if a later one is (`inverse`
-- is kept when the write changed something)
local undo = {}
local function try(reply, inverse)
    if type(reply) == 'table' and reply.err ~= nil then
        for j = #undo, 1, -1 do undo[j]() end
        refused(reply)  -- an error other than a key of another type ends the step with it
        return false
    end
    if inverse and reply ~= 0 then undo[#undo + 1] = inverse end
    return true
end
local member = listener .. ' ' .. pid .. ' ' .. id
-- (a removal first: a full Redis refuses a step whose first write may use memory, and
-- lets one finish once it has written)
if not (try(redis.pcall('LREM', KEYS[2], 1, id),
            function() redis.call('LPUSH', KEYS[2], id) end)
        and try(redis.pcall('SREM', KEYS[3], member),
            function() redis.call('SADD', KEYS[3], member) end)
        and try(redis.pcall('LPUSH', list, id), function() redis.call('LPOP', list) end)
        and try(redis.pcall('ZREM', KEYS[5], id))) then
    return refuse_misfit(MISFITS) or redis.error_reply('BADKEY a key of the task holds '
        .. 'a value of another type')
end
if got[11] then groups().slot_free(groups_of(ARGV[16]), got[11], id) end
if got[7] then  -- no longer stalled
    redis.pcall('ZREM', KEYS[14], id)
    redis.call('HDEL', task, 'stalled_at')
end
local written = {'status', status, 'updated', ARGV[6]}
-- one outcome: a task whose cancel came first keeps no result nor error of its run
if not (status == 'canceled' and ARGV[4] ~= 'canceled') then
    local field = 'result'
    if ARGV[4] ~= 'complete' then field = 'error' end
    table.insert(written, field)
    table.insert(written, ARGV[5])
end
if (ARGV[17] or '') ~= '' then
    table.insert(written, 'peak_rss')
    table.insert(written, ARGV[17])
end
redis.call('HSET', task, unpack(written))
if utube then
    local u = utube_keys(KEYS[7], KEYS[8], ARGV[8], ARGV[9], ARGV[10], KEYS[9], KEYS[10],
        ARGV[16])
    if utube_leave(u, id, task) then redis.call('PUBLISH', ARGV[11], 1) end
end
local stats, throughput, queue_ttl = KEYS[6], KEYS[15], nil
if ARGV[15] ~= '' and (status == 'complete') == (ARGV[4] == 'complete') then
    queue_ttl = ARGV[15]  -- the queue's ttl of this status, read by the reserve step
end
if ARGV[14] == '1' then
    stats, throughput = nil, nil
else
    local call = {complete = 'calls.ack', failed = 'calls.fail', canceled = 'calls.cancel'}
    redis.pcall('HINCRBY', stats, call[status], 1)
    if held == 'started' then observe(stats, 'run', got[5], ARGV[6]) end
end
local own_ttl = got[10]
if status == 'complete' then own_ttl = got[9] end
local followed = retain({retention = KEYS[13], settings = KEYS[12], throughput = throughput,
    stats = stats,
    waited = got[12] or false, follow = got[13] or false, workflow = got[14] or false,
    result_ttl = ARGV[12], failure_ttl = ARGV[13], own_ttl = own_ttl, queue_ttl = queue_ttl},
    task, id, status, ARGV[6])
local ran = ''
if held == 'started' then ran = got[5] or '' end
followed = followed and '1' or ''
if status == 'canceled' then return {2, held, ran, followed} end
return {1, held, ran, followed}
