-- Periodic tasks: one tick of one periodic task, in one atomic step (see periodic.py).
-- KEYS[1] <prefix>:periodic:<queue>      hash: name -> definition (JSON)
-- KEYS[2] <prefix>:periodic_due:<queue>  sorted set: name -> time of its next tick
-- KEYS[3] blueque_queues
-- KEYS[4] blueque_pending_tasks_<queue>
-- KEYS[5] blueque_task_<new id>
-- KEYS[6] blueque_task_<id of the last tick's task>: only when a run must not overlap the
--         previous one, and there was one
-- ARGV[1] name, ARGV[2] the definition the caller read ('' for none), ARGV[3] the due time
-- it read, ARGV[4] the next tick, ARGV[5] now, ARGV[6] queue name, ARGV[7] new task id,
-- ARGV[8] parameters, ARGV[9] the time of the tick run, ARGV[10] the definition after the
-- tick (naming the new task), ARGV[11] wake-up channel of the queue, ARGV[12..] the
-- statuses of a previous run that still runs
-- Compare-and-set: when the definition or the due time is not what the caller read, another
-- worker ticked (or the task was declared again, or removed) and nothing is written.
-- Returns {outcome, detail}: {'ticked', new task id}; {'overlap', status of the previous
-- run} (the tick is skipped, the next one set); {'raced', ''}; {'gone', ''} (a due entry
-- without definition, dropped). A key of another type refuses the step (BADKEY).
local refused = refuse_misfit({{KEYS[1], 'hash'}, {KEYS[2], 'zset'}, {KEYS[4], 'list'}})
if refused then return refused end
local name, seen, due, next_due = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local current = redis.call('HGET', KEYS[1], name)
local score = redis.call('ZSCORE', KEYS[2], name)
if (current or '') ~= seen or not score or tonumber(score) ~= tonumber(due) then
    return {'raced', ''}
end
if not current then
    redis.call('ZREM', KEYS[2], name)
    return {'gone', ''}
end
if KEYS[6] and not misfit({{KEYS[6], 'hash'}}) then
    local status = redis.call('HGET', KEYS[6], 'status')
    for i = 12, #ARGV do
        if status == ARGV[i] then
            redis.call('ZADD', KEYS[2], next_due, name)
            return {'overlap', status}
        end
    end
end
if redis.call('EXISTS', KEYS[5]) == 1 then
    return redis.error_reply('TASKEXISTS ' .. ARGV[7])
end
local queue, now, task_id = ARGV[6], ARGV[5], ARGV[7]
-- the task, exactly as a pending task of priority 0 is submitted (see enqueue.lua)
redis.call('HSET', KEYS[5], 'status', 'pending', 'queue', queue, 'parameters', ARGV[8],
    'created', now, 'updated', now, 'periodic', name, 'periodic_tick', ARGV[9])
if not misfit({{KEYS[3], 'zset'}}) then redis.call('ZINCRBY', KEYS[3], 0, queue) end
redis.call('LPUSH', KEYS[4], task_id)
redis.call('PUBLISH', ARGV[11], 1)
redis.call('HSET', KEYS[1], name, ARGV[10])
redis.call('ZADD', KEYS[2], next_due, name)
return {'ticked', task_id}
