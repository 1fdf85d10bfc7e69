-- Blueque "Task Completed Successfully" and "Task Failed", with fencing: only the
-- listener (and attempt) that holds the task may finish it, and only once.
-- KEYS[1] blueque_task_<id>, KEYS[2] blueque_reserved_tasks_<queue>_<listener>,
-- KEYS[3] blueque_started_tasks_<queue>, KEYS[4] blueque_<status>_tasks_<queue>,
-- KEYS[5] <prefix>:leases:<queue>, KEYS[6] <prefix>:stats:<queue> (counts an 'ack' or a
-- 'fail'), KEYS[7] <prefix>:utubes:<queue>, KEYS[8] <prefix>:utube_waiting:<queue>,
-- KEYS[9] blueque_pending_tasks_<queue>, KEYS[10] <prefix>:prioritized:<queue>
-- ARGV[1] task id, ARGV[2] listener id, ARGV[3] pid ('': the pid in the hash),
-- ARGV[4] 'complete' or 'failed', ARGV[5] result or error, ARGV[6] now,
-- ARGV[7] attempt the caller holds ('': not checked), ARGV[8] name prefix of the utube
-- lists, ARGV[9] key prefix of task hashes, ARGV[10] queue name, ARGV[11] wake-up channel
-- A task with a utube key hands it to the next task of that key (see _line.lua).
-- Returns {1} when finished, {0, status, node, attempt} when refused, {-1} when missing.
local refused = refuse_misfit({{KEYS[1], 'hash'}, {KEYS[2], 'list'}, {KEYS[3], 'set'},
    {KEYS[4], 'list'}, {KEYS[5], 'zset'}, {KEYS[6], 'hash'}, {KEYS[7], 'hash'},
    {KEYS[8], 'zset'}, {KEYS[9], 'list'}, {KEYS[10], 'zset'}})
if refused then return refused end
refused = refuse_unless_held(KEYS[1], {reserved = true, started = true}, ARGV[2],
    ARGV[7])
if refused then return refused end
local pid = ARGV[3]
if pid == '' then pid = redis.call('HGET', KEYS[1], 'pid') or '' end
redis.call('LREM', KEYS[2], 1, ARGV[1])
redis.call('SREM', KEYS[3], ARGV[2] .. ' ' .. pid .. ' ' .. ARGV[1])
local field = 'result'
if ARGV[4] == 'failed' then field = 'error' end
redis.call('HSET', KEYS[1], 'status', ARGV[4], field, ARGV[5], 'updated', ARGV[6])
redis.call('LPUSH', KEYS[4], ARGV[1])
redis.call('ZREM', KEYS[5], ARGV[1])
local u = utube_keys(KEYS[7], KEYS[8], ARGV[8], ARGV[9], ARGV[10], KEYS[9], KEYS[10])
if utube_leave(u, ARGV[1], KEYS[1]) then redis.call('PUBLISH', ARGV[11], 1) end
if ARGV[4] == 'failed' then
    redis.call('HINCRBY', KEYS[6], 'calls.fail', 1)
else
    redis.call('HINCRBY', KEYS[6], 'calls.ack', 1)
end
return {1}
