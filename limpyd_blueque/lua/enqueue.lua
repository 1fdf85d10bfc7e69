-- Blueque "Submission", for one task or many, in one atomic step.
-- KEYS[1]  blueque_queues
-- KEYS[2]  blueque_pending_tasks_<queue>
-- KEYS[3..] blueque_task_<id>, one per task, in the order of the ids in ARGV
-- ARGV[1]  queue name
-- ARGV[2]  now (float seconds)
-- ARGV[3]  wake-up channel of the queue
-- ARGV[4..] pairs: task id, parameters
-- Returns the number of tasks created. Refuses the whole call if a task id exists.
local queue, now, channel = ARGV[1], ARGV[2], ARGV[3]
local refused = refuse_misfit({{KEYS[2], 'list'}})
if refused then return refused end
local count = #KEYS - 2
for i = 1, count do
    if redis.call('EXISTS', KEYS[i + 2]) == 1 then
        return redis.error_reply('TASKEXISTS ' .. ARGV[2 + 2 * i])
    end
end
for i = 1, count do
    redis.call('HSET', KEYS[i + 2], 'status', 'pending', 'queue', queue,
        'parameters', ARGV[3 + 2 * i], 'created', now, 'updated', now)
end
-- a queue index of another type is left alone: the tasks are made all the same
if not misfit({{KEYS[1], 'zset'}}) then redis.call('ZINCRBY', KEYS[1], 0, queue) end
for i = 1, count do
    redis.call('LPUSH', KEYS[2], ARGV[2 + 2 * i])
end
redis.call('PUBLISH', channel, count)
return count
