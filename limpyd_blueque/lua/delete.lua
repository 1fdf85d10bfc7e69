-- Blueque "Delete Finished Task": drop a complete, failed or canceled task and its list
-- entry.
-- KEYS[1] blueque_task_<id>, KEYS[2] blueque_complete_tasks_<queue>,
-- KEYS[3] blueque_failed_tasks_<queue>, KEYS[4] <prefix>:canceled:<queue>
-- ARGV[1] task id, ARGV[2] queue the caller believes the task is in
-- Returns {1} when deleted, {0, status, queue} when refused, {-1} when missing.
local refused = refuse_misfit({{KEYS[1], 'hash'}, {KEYS[2], 'list'}, {KEYS[3], 'list'},
    {KEYS[4], 'list'}})
if refused then return refused end
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return {-1} end
local queue = redis.call('HGET', KEYS[1], 'queue') or ''
local lists = {complete = KEYS[2], failed = KEYS[3], canceled = KEYS[4]}
if queue ~= ARGV[2] or not lists[status] then
    return {0, status, queue}
end
redis.call('DEL', KEYS[1])
redis.call('LREM', lists[status], 1, ARGV[1])
return {1}
