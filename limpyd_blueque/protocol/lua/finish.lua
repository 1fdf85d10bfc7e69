-- Blueque "Task Completed Successfully" and "Task Failed", with fencing: only the
-- listener (and attempt) that holds the task may finish it, and only once. Its holder
-- also records here that a task it stopped on a cancel request is 'canceled'; and a task
-- whose cancel was asked before its outcome is filed as canceled whatever the outcome
-- (the cancel came first: it wins), its result or error kept.
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
-- ARGV[12] default result ttl, ARGV[13] default failure ttl (see _finished.lua)
-- A task with a utube key hands it to the next task of that key (see _line.lua).
-- Returns {1} when finished, {2} when filed as canceled, {0, status, node, attempt} when
-- refused, {-1} when missing.
-- (KEYS[12] to KEYS[15] are indexes beside the task, written with redis.pcall: see
-- _finished.lua)
local refused = refuse_misfit({{KEYS[1], 'hash'}, {KEYS[2], 'list'}, {KEYS[3], 'set'},
    {KEYS[4], 'list'}, {KEYS[5], 'zset'}, {KEYS[6], 'hash'}, {KEYS[7], 'hash'},
    {KEYS[8], 'zset'}, {KEYS[9], 'list'}, {KEYS[10], 'zset'}, {KEYS[11], 'list'}})
if refused then return refused end
refused = refuse_unless_held(KEYS[1], {reserved = true, started = true}, ARGV[2],
    ARGV[7])
if refused then return refused end
local id, status, list = ARGV[1], ARGV[4], KEYS[4]
if status == 'canceled' or canceling(KEYS[1]) then status, list = 'canceled', KEYS[11] end
local held, started_at = unpack(redis.call('HMGET', KEYS[1], 'status', 'started_at'))
local pid = ARGV[3]
if pid == '' then pid = redis.call('HGET', KEYS[1], 'pid') or '' end
redis.call('LREM', KEYS[2], 1, id)
redis.call('SREM', KEYS[3], ARGV[2] .. ' ' .. pid .. ' ' .. id)
unflag_stalled(KEYS[1], KEYS[14], id)
local field = 'result'
if ARGV[4] ~= 'complete' then field = 'error' end
redis.call('HSET', KEYS[1], 'status', status, field, ARGV[5], 'updated', ARGV[6])
redis.call('LPUSH', list, id)
redis.call('ZREM', KEYS[5], id)
local u = utube_keys(KEYS[7], KEYS[8], ARGV[8], ARGV[9], ARGV[10], KEYS[9], KEYS[10])
if utube_leave(u, id, KEYS[1]) then redis.call('PUBLISH', ARGV[11], 1) end
local call = {complete = 'calls.ack', failed = 'calls.fail', canceled = 'calls.cancel'}
redis.call('HINCRBY', KEYS[6], call[status], 1)
if held == 'started' then observe(KEYS[6], 'run', started_at, ARGV[6]) end
retain({retention = KEYS[13], settings = KEYS[12], throughput = KEYS[15], stats = KEYS[6],
    result_ttl = ARGV[12], failure_ttl = ARGV[13]}, KEYS[1], id, status, ARGV[6])
if status == 'canceled' then return {2} end
return {1}
