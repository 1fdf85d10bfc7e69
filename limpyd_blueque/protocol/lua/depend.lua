-- Make tasks of one queue (the parents) tell the tasks that wait for them when they
-- finish: each parent not finished yet gets the waiting task in its children set and a
-- `follow` field naming its queue's ended list (read when it finishes, see retain in
-- _finished.lua). All parents given are tasks of this queue (in the cluster key mode,
-- its slot).
-- KEYS[i] blueque_task_<parent id>, one per pair of ARGV after the first two
-- ARGV[1] name prefix of the children sets of the queue, ARGV[2] its ended list, then per
-- parent: its id, the waiting task (`<queue> <id>`, as the children set holds it)
-- Returns per parent: '' when the task now follows it, else its status when it finished
-- already ('complete', 'failed', 'canceled', 'expired'), or 'gone' (no such task: a
-- finished task deleted by its retention).
local FINISHED = {complete = true, failed = true, canceled = true, expired = true}
local out = {}
for i = 1, #KEYS do
    local parent, member = ARGV[1 + 2 * i], ARGV[2 + 2 * i]
    local status = redis.pcall('HGET', KEYS[i], 'status')
    if type(status) ~= 'string' then
        out[i] = 'gone'
    elseif FINISHED[status] then
        out[i] = status
    else
        redis.call('SADD', ARGV[1] .. parent, member)
        redis.call('HSETNX', KEYS[i], 'follow', ARGV[2])
        out[i] = ''
    end
end
return out
