-- Cancel a task. A waiting one (pending, scheduled, or waiting for other tasks) at once: out of every waiting structure, status
-- 'canceled', filed in the canceled list of its queue, its identifier free again. A
-- running one (reserved or started) is asked to stop: its `cancel_requested` field is set,
-- its holder learns it at its next beat, stops the task and files it as canceled (see
-- finish.lua: from then on, whatever outcome the task records, it is filed as canceled).
-- KEYS[1] blueque_task_<id>, KEYS[2] blueque_pending_tasks_<queue>,
-- KEYS[3] <prefix>:prioritized:<queue>, KEYS[4] blueque_scheduled_tasks_<queue>,
-- KEYS[5] <prefix>:identifiers:<queue>, KEYS[6] <prefix>:canceled:<queue>,
-- KEYS[7] <prefix>:expiry:<queue>, KEYS[8] <prefix>:stats:<queue>,
-- KEYS[9] <prefix>:utubes:<queue>, KEYS[10] <prefix>:utube_waiting:<queue>,
-- KEYS[11] <prefix>:queue:<queue> (settings), KEYS[12] <prefix>:retention:<queue>,
-- KEYS[13] <prefix>:stats:<queue>:m:<minute>, KEYS[14] <prefix>:canceling:<queue>,
-- KEYS[15] <prefix>:waiting:<queue>, KEYS[16] <prefix>:after:<queue>:<id>
-- ARGV[1] task id, ARGV[2] queue the caller believes the task is in, ARGV[3] now,
-- ARGV[4] name prefix of the utube lists, ARGV[5] key prefix of task hashes, ARGV[6]
-- wake-up channel, ARGV[7] default result ttl, ARGV[8] default failure ttl, ARGV[9] the
-- keys of the queue's groups (keys.KeySpace.group_layout)
-- Returns {1, '', '', followed} when canceled (`followed`: '1' when its end was listed
-- for its followers, see `retain` in _finished.lua), {2, holder} when a running task was asked to stop (or had
-- been already), {0, status, queue} when refused (finished, or in another queue), {-1}
-- when there is no such task.
local refused = refuse_misfit({{KEYS[1], 'hash'}, {KEYS[2], 'list'}, {KEYS[3], 'zset'},
    {KEYS[4], 'zset'}, {KEYS[5], 'hash'}, {KEYS[6], 'list'}, {KEYS[7], 'zset'},
    {KEYS[8], 'hash'}, {KEYS[9], 'hash'}, {KEYS[10], 'zset'}, {KEYS[15], 'zset'}})
-- KEYS[11] to KEYS[14]: indexes beside the task, see _finished.lua
if refused then return refused end
local id = ARGV[1]
local status, refusal = status_among(KEYS[1], ARGV[2], {pending = true, scheduled = true,
    reserved = true, started = true, waiting = true})
if not status then return refusal end
if status == 'reserved' or status == 'started' then
    if not canceling(KEYS[1]) then redis.call('HSET', KEYS[1], 'cancel_requested', ARGV[3]) end
    -- where its holder's beat reads it (see renew.lua), passed over when of another type
    redis.pcall('SADD', KEYS[14], id)
    return {2, redis.call('HGET', KEYS[1], 'node') or ''}
end
if status == 'waiting' then  -- in no line: out of the waiting set, waiting for nothing
    redis.call('ZREM', KEYS[15], id)
    redis.pcall('DEL', KEYS[16])
end
local u = utube_keys(KEYS[9], KEYS[10], ARGV[4], ARGV[5], ARGV[2], KEYS[2], KEYS[3], ARGV[9])
line_remove(u, id, KEYS[1])
redis.call('ZREM', KEYS[4], id)
if utube_leave(u, id, KEYS[1]) then redis.call('PUBLISH', ARGV[6], 1) end
identifier_release(KEYS[5], KEYS[1], id)
redis.call('HSET', KEYS[1], 'status', 'canceled', 'updated', ARGV[3])
redis.call('LPUSH', KEYS[6], id)
redis.call('ZREM', KEYS[7], id)
redis.call('HINCRBY', KEYS[8], 'calls.cancel', 1)
local followed = retain({retention = KEYS[12], settings = KEYS[11], throughput = KEYS[13],
    stats = KEYS[8], result_ttl = ARGV[7], failure_ttl = ARGV[8]}, KEYS[1], id, 'canceled',
    ARGV[3])
return {1, '', '', followed and '1' or ''}
