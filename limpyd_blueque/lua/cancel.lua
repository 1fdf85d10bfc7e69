-- Cancel a waiting task: out of every waiting structure, status 'canceled', filed in the
-- canceled list of its queue, its identifier free again; all at once.
-- KEYS[1] blueque_task_<id>, KEYS[2] blueque_pending_tasks_<queue>,
-- KEYS[3] <prefix>:prioritized:<queue>, KEYS[4] blueque_scheduled_tasks_<queue>,
-- KEYS[5] <prefix>:identifiers:<queue>, KEYS[6] <prefix>:canceled:<queue>,
-- KEYS[7] <prefix>:expiry:<queue>, KEYS[8] <prefix>:stats:<queue>,
-- KEYS[9] <prefix>:utubes:<queue>, KEYS[10] <prefix>:utube_waiting:<queue>
-- ARGV[1] task id, ARGV[2] queue the caller believes the task is in, ARGV[3] now,
-- ARGV[4] name prefix of the utube lists, ARGV[5] key prefix of task hashes, ARGV[6]
-- wake-up channel
-- Returns {1} when canceled, {0, status, queue} when refused (not waiting, or in another
-- queue), {-1} when there is no such task.
local refused = refuse_misfit({{KEYS[1], 'hash'}, {KEYS[2], 'list'}, {KEYS[3], 'zset'},
    {KEYS[4], 'zset'}, {KEYS[5], 'hash'}, {KEYS[6], 'list'}, {KEYS[7], 'zset'},
    {KEYS[8], 'hash'}, {KEYS[9], 'hash'}, {KEYS[10], 'zset'}})
if refused then return refused end
local id = ARGV[1]
local status, refusal = status_among(KEYS[1], ARGV[2], {pending = true, scheduled = true})
if not status then return refusal end
line_remove(KEYS[2], KEYS[3], id)
redis.call('ZREM', KEYS[4], id)
local u = utube_keys(KEYS[9], KEYS[10], ARGV[4], ARGV[5], ARGV[2], KEYS[2], KEYS[3])
if utube_leave(u, id, KEYS[1]) then redis.call('PUBLISH', ARGV[6], 1) end
identifier_release(KEYS[5], KEYS[1], id)
redis.call('HSET', KEYS[1], 'status', 'canceled', 'updated', ARGV[3])
redis.call('LPUSH', KEYS[6], id)
redis.call('ZREM', KEYS[7], id)
redis.call('HINCRBY', KEYS[8], 'calls.cancel', 1)
return {1}
