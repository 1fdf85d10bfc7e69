-- Blueque "Task Started": the process running a reserved task records its pid.
-- KEYS[1] blueque_task_<id>, KEYS[2] blueque_started_tasks_<queue>
-- ARGV[1] task id, ARGV[2] listener id, ARGV[3] pid, ARGV[4] now,
-- ARGV[5] attempt the caller holds ('': not checked), ARGV[6] start time of the process
-- Returns {1} when started, {0, status, node, attempt} when refused, {-1} when missing.
local refused = refuse_misfit({{KEYS[1], 'hash'}, {KEYS[2], 'set'}})
if refused then return refused end
refused = refuse_unless_held(KEYS[1], {reserved = true}, ARGV[2], ARGV[5])
if refused then return refused end
redis.call('SADD', KEYS[2], ARGV[2] .. ' ' .. ARGV[3] .. ' ' .. ARGV[1])
-- its `started_at` was written when it was taken (reserve.lua)
redis.call('HSET', KEYS[1], 'status', 'started', 'pid', ARGV[3], 'pstart', ARGV[6],
    'updated', ARGV[4])
return {1}
