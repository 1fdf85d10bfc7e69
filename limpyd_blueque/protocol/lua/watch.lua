-- A producer waits for a task's outcome (Job.wait, aio.Queue.wait): the task is marked
-- as waited for (`waited`: the steps that finish it then publish its status on its
-- outcome channel, see finish.lua and cancel.lua), and its outcome read.
-- KEYS[1] blueque_task_<id>
-- Returns {status, result, error}, or {} when there is no such task (nothing written).
local refused = refuse_misfit({{KEYS[1], 'hash'}})
if refused then return refused end
local got = redis.call('HMGET', KEYS[1], 'status', 'result', 'error', 'waited')
if not got[1] then
    if redis.call('EXISTS', KEYS[1]) == 0 then return {} end
end
if not got[4] then redis.call('HSET', KEYS[1], 'waited', '1') end
return {got[1] or '', got[2] or '', got[3] or ''}
