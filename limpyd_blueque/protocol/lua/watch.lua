-- A producer waits for a task's outcome (Job.wait, aio.Queue.wait): the task is marked
-- as waited for (its `waited` field holds its outcome channel: every step that finishes
-- it publishes its status there, see `retain` in _finished.lua), and its outcome read.
-- KEYS[1] blueque_task_<id>
-- ARGV[1] its outcome channel (keys.KeySpace.outcome_channel)
-- Returns {status, result, error, attempt, codec, encrypted}, or {} when there is no
-- such task (nothing written).
local refused = refuse_misfit({{KEYS[1], 'hash'}})
if refused then return refused end
local got = redis.call('HMGET', KEYS[1], 'status', 'result', 'error', 'waited', 'attempt',
    'codec', 'encrypted')
if not got[1] then
    if redis.call('EXISTS', KEYS[1]) == 0 then return {} end
end
if got[4] ~= ARGV[1] then redis.call('HSET', KEYS[1], 'waited', ARGV[1]) end
return {got[1] or '', got[2] or '', got[3] or '', got[5] or '', got[6] or '', got[7] or ''}
