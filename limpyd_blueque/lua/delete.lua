-- Blueque "Delete Finished Task": drop a complete or failed task and its list entry.
-- KEYS[1] blueque_task_<id>, KEYS[2] blueque_complete_tasks_<queue>,
-- KEYS[3] blueque_failed_tasks_<queue>
-- ARGV[1] task id, ARGV[2] queue the caller believes the task is in
-- Returns {1} when deleted, {0, status, queue} when refused, {-1} when missing.
local refused = refuse_misfit({{KEYS[1], 'hash'}, {KEYS[2], 'list'}, {KEYS[3], 'list'}})
if refused then return refused end
local status = redis.call('HGET', KEYS[1], 'status')
if not status then return {-1} end
local queue = redis.call('HGET', KEYS[1], 'queue') or ''
if queue ~= ARGV[2] or (status ~= 'complete' and status ~= 'failed') then
    return {0, status, queue}
end
redis.call('DEL', KEYS[1])
if status == 'complete' then
    redis.call('LREM', KEYS[2], 1, ARGV[1])
else
    redis.call('LREM', KEYS[3], 1, ARGV[1])
end
return {1}
