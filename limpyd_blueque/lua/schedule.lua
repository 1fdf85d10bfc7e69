-- Blueque "Schedule Task": create a task that becomes pending at its eta.
-- KEYS[1] blueque_queues
-- KEYS[2] blueque_scheduled_tasks_<queue>
-- KEYS[3] blueque_task_<id>
-- ARGV[1] queue name, ARGV[2] now, ARGV[3] eta, ARGV[4] task id, ARGV[5] parameters
-- Returns 1. Refuses a task id that exists.
local refused = refuse_misfit({{KEYS[2], 'zset'}})
if refused then return refused end
if redis.call('EXISTS', KEYS[3]) == 1 then
    return redis.error_reply('TASKEXISTS ' .. ARGV[4])
end
redis.call('HSET', KEYS[3], 'status', 'scheduled', 'queue', ARGV[1], 'parameters', ARGV[5],
    'created', ARGV[2], 'updated', ARGV[2], 'eta', ARGV[3])
if not misfit({{KEYS[1], 'zset'}}) then redis.call('ZINCRBY', KEYS[1], 0, ARGV[1]) end
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[4])
return 1
