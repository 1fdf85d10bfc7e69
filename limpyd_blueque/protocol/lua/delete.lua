-- Delete a task and its entries: Blueque "Delete Finished Task" for a complete or failed
-- task, and this library's delete of a task in any state but running (canceled, expired,
-- buried, or waiting: out of every waiting structure at once).
-- KEYS[1] blueque_task_<id>, KEYS[2] blueque_complete_tasks_<queue>,
-- KEYS[3] blueque_failed_tasks_<queue>, KEYS[4] <prefix>:canceled:<queue>,
-- KEYS[5] <prefix>:expired:<queue>, KEYS[6] <prefix>:buried:<queue>,
-- KEYS[7] blueque_pending_tasks_<queue>, KEYS[8] <prefix>:prioritized:<queue>,
-- KEYS[9] blueque_scheduled_tasks_<queue>, KEYS[10] <prefix>:identifiers:<queue>,
-- KEYS[11] <prefix>:expiry:<queue>, KEYS[12] <prefix>:stats:<queue>,
-- KEYS[13] <prefix>:utubes:<queue>, KEYS[14] <prefix>:utube_waiting:<queue>,
-- KEYS[15] <prefix>:retention:<queue>, KEYS[16] <prefix>:waiting:<queue>,
-- KEYS[17] <prefix>:after:<queue>:<id>, KEYS[18] <prefix>:children:<queue>:<id> (what it
-- waits for, and who waits for it), KEYS[19] <prefix>:ended:<queue>: a task not finished
-- that others wait for, or a node of a workflow, is pushed there (`<id>`, or
-- `<id> <workflow>`), its children set kept: its followers are told it is gone (counted
-- as canceled, see models/dependencies.py)
-- ARGV[1] task id, ARGV[2] queue the caller believes the task is in, ARGV[3] 'finished'
-- (complete, failed, canceled or expired only) or 'any' (all but reserved and started),
-- ARGV[4] name prefix of the utube lists, ARGV[5] key prefix of task hashes, ARGV[6]
-- wake-up channel
-- Returns {1, '', '', pushed} when deleted (`pushed`: '1' when its followers are to be
-- told), {0, status, queue} when refused, {-1} when missing.
local refused = refuse_misfit({{KEYS[1], 'hash'}, {KEYS[2], 'list'}, {KEYS[3], 'list'},
    {KEYS[4], 'list'}, {KEYS[5], 'list'}, {KEYS[6], 'list'}, {KEYS[7], 'list'},
    {KEYS[8], 'zset'}, {KEYS[9], 'zset'}, {KEYS[10], 'hash'}, {KEYS[11], 'zset'},
    {KEYS[12], 'hash'}, {KEYS[13], 'hash'}, {KEYS[14], 'zset'}, {KEYS[15], 'zset'}})
if refused then return refused end
local id = ARGV[1]
local lists = {complete = KEYS[2], failed = KEYS[3], canceled = KEYS[4], expired = KEYS[5]}
local allowed = {complete = true, failed = true, canceled = true, expired = true}
if ARGV[3] == 'any' then
    lists.buried = KEYS[6]
    allowed.buried, allowed.pending, allowed.scheduled = true, true, true
    allowed.waiting = true
end
local status, refusal = status_among(KEYS[1], ARGV[2], allowed)
if not status then return refusal end
if lists[status] then
    redis.call('LREM', lists[status], 0, id)
else  -- waiting
    local u = utube_keys(KEYS[13], KEYS[14], ARGV[4], ARGV[5], ARGV[2], KEYS[7], KEYS[8],
        ARGV[7])
    line_remove(u, id, KEYS[1])
    redis.call('ZREM', KEYS[9], id)
    identifier_release(KEYS[10], KEYS[1], id)
    if utube_leave(u, id, KEYS[1]) then redis.call('PUBLISH', ARGV[6], 1) end
end
redis.call('ZREM', KEYS[11], id)
redis.call('ZREM', KEYS[15], id)
if status == 'waiting' then redis.pcall('ZREM', KEYS[16], id) end
local followed, pushed = redis.call('HMGET', KEYS[1], 'follow', 'workflow'), ''

if followed[1] and not (status == 'complete' or status == 'failed' or status == 'canceled'
        or status == 'expired') then
    local entry = id
    if followed[2] then entry = id .. ' ' .. followed[2] end
    redis.pcall('LPUSH', KEYS[19], entry)
    redis.pcall('DEL', KEYS[17])
    pushed = '1'
else
    redis.pcall('DEL', KEYS[17], KEYS[18])
end
redis.call('DEL', KEYS[1])
redis.call('HINCRBY', KEYS[12], 'calls.delete', 1)
return {1, '', '', pushed}
