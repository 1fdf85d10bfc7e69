-- Blueque "Submission", for one task or many without options, in one atomic step: the
-- common case, kept as light as the protocol step (enqueue_options.lua makes tasks with
-- options; both write the same for a task without).
-- KEYS[1]  blueque_queues, KEYS[2] blueque_pending_tasks_<queue>,
-- KEYS[3]  <prefix>:queue:<queue> (its settings: the default ttl),
-- KEYS[4]  <prefix>:expiry:<queue>, KEYS[5] <prefix>:stats:<queue>
-- KEYS[6..] blueque_task_<id>, one per task, in the order of the tasks in ARGV
-- ARGV[1]  queue name, ARGV[2] now (float seconds), ARGV[3] wake-up channel of the queue,
-- then per task: id, parameters
-- A task expires when not started within its queue's ttl, if the queue has one.
-- Returns the number of tasks created (all of them). Refuses the whole call, writing
-- nothing, if a task id exists or a key it writes holds another type.
local queue, now, channel = ARGV[1], ARGV[2], ARGV[3]
-- a queue settings hash of another type gives no default ttl (reads never abort)
local ttl = redis.pcall('HGET', KEYS[3], 'ttl')
ttl = type(ttl) == 'string' and tonumber(ttl) or nil
if ttl and not (ttl > 0 and ttl < math.huge) then ttl = nil end
local writes = {{KEYS[2], 'list'}}
if ttl then writes[2] = {KEYS[4], 'zset'} end
local refused = refuse_misfit(writes)
if refused then return refused end
local count = #KEYS - 5
for i = 1, count do
    if redis.call('EXISTS', KEYS[5 + i]) == 1 then
        return redis.error_reply('TASKEXISTS ' .. ARGV[2 + 2 * i])
    end
end
for i = 1, count do
    local key, id = KEYS[5 + i], ARGV[2 + 2 * i]
    redis.call('HSET', key, 'status', 'pending', 'queue', queue,
        'parameters', ARGV[3 + 2 * i], 'created', now, 'updated', now)
    if ttl then
        local limit = string.format('%.6f', tonumber(now) + ttl)
        redis.call('HSET', key, 'expires_at', limit)
        redis.call('ZADD', KEYS[4], limit, id)
    end
end
-- a queue index of another type is left alone: the tasks are made all the same
if not misfit({{KEYS[1], 'zset'}}) then redis.call('ZINCRBY', KEYS[1], 0, queue) end
for i = 1, count do
    redis.call('LPUSH', KEYS[2], ARGV[2 + 2 * i])
end
redis.call('PUBLISH', channel, count)
-- a counters hash of another type only loses the count
redis.pcall('HINCRBY', KEYS[5], 'calls.put', count)
return count
