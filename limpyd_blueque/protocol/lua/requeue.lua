-- Put a task its holder no longer runs back in line: pending at once, or scheduled
-- at an eta. Used to retry after an error, to hand a task back on shutdown, and for a
-- task that delays itself.
-- KEYS[1] blueque_task_<id>, KEYS[2] blueque_reserved_tasks_<queue>_<listener>,
-- KEYS[3] blueque_started_tasks_<queue>, KEYS[4] blueque_pending_tasks_<queue>,
-- KEYS[5] blueque_scheduled_tasks_<queue>, KEYS[6] <prefix>:leases:<queue>,
-- KEYS[7] <prefix>:prioritized:<queue>, KEYS[8] <prefix>:identifiers:<queue>,
-- KEYS[9] <prefix>:stats:<queue>, KEYS[10] <prefix>:stalled:<queue>,
-- KEYS[11] <prefix>:canceled:<queue>, KEYS[12] <prefix>:queue:<queue> (settings),
-- KEYS[13] <prefix>:retention:<queue>, KEYS[14] <prefix>:stats:<queue>:m:<minute>,
-- KEYS[15] <prefix>:utubes:<queue>, KEYS[16] <prefix>:utube_waiting:<queue>
-- ARGV[1] task id, ARGV[2] listener id, ARGV[3] attempt the caller holds ('': not checked),
-- ARGV[4] now, ARGV[5] eta ('': pending at once), ARGV[6] error to record ('': none),
-- ARGV[7] wake-up channel, ARGV[8] 'front' (taken next in its priority) or 'back' (end of
-- its priority), ARGV[9] priority change ('': none), ARGV[10] '1' when this attempt does
-- not count as a failed one (a task that delays itself), ARGV[11] key prefix of task
-- hashes, ARGV[12] queue name, ARGV[13] default result ttl, ARGV[14] default failure ttl,
-- ARGV[15] name prefix of the utube lists, ARGV[16] the keys of the queue's groups
-- (keys.KeySpace.group_layout), ARGV[17] the peak memory of the process that ran the
-- attempt, in bytes ('': not known), noted as `peak_rss`
-- A task whose cancel was asked while it ran is filed as canceled instead (the cancel
-- came first), and hands its utube key on.
-- Counted in the statistics as a 'release' when the attempt is not counted, else as a
-- 'requeue'.
-- The priority stays a whole number within the bounds of _line.lua.
-- Returns {1} when requeued, {2} when filed as canceled, {0, status, node, attempt} when
-- refused, {-1} when missing.
local refused = refuse_misfit({{KEYS[1], 'hash'}, {KEYS[2], 'list'}, {KEYS[3], 'set'},
    {KEYS[4], 'list'}, {KEYS[5], 'zset'}, {KEYS[6], 'zset'}, {KEYS[7], 'zset'},
    {KEYS[8], 'hash'}, {KEYS[9], 'hash'}, {KEYS[11], 'list'}, {KEYS[15], 'hash'},
    {KEYS[16], 'zset'}})  -- KEYS[10], KEYS[12] to KEYS[14]: indexes, see _finished.lua
if refused then return refused end
refused = refuse_unless_held(KEYS[1], {reserved = true, started = true}, ARGV[2],
    ARGV[3])
if refused then return refused end
local id = ARGV[1]
local u = utube_keys(KEYS[15], KEYS[16], ARGV[15], ARGV[11], ARGV[12], KEYS[4], KEYS[7], ARGV[16])
let_go(KEYS[1], KEYS[2], KEYS[3], KEYS[6], id, ARGV[2], KEYS[10], u.g)
local noted = {}
if ARGV[6] ~= '' then noted = {'error', ARGV[6]} end
if (ARGV[17] or '') ~= '' then
    table.insert(noted, 'peak_rss')
    table.insert(noted, ARGV[17])
end
if #noted > 0 then redis.call('HSET', KEYS[1], unpack(noted)) end
if canceling(KEYS[1]) then
    file_canceled(KEYS[1], id, KEYS[11], KEYS[9], ARGV[4], {retention = KEYS[13],
        settings = KEYS[12], throughput = KEYS[14], stats = KEYS[9], result_ttl = ARGV[13],
        failure_ttl = ARGV[14]})
    if utube_leave(u, id, KEYS[1]) then redis.call('PUBLISH', ARGV[7], 1) end
    return {2}
end
if ARGV[10] == '1' then
    redis.call('HINCRBY', KEYS[1], 'uncounted', 1)
    redis.call('HINCRBY', KEYS[9], 'calls.release', 1)
else
    redis.call('HINCRBY', KEYS[9], 'calls.requeue', 1)
end
local priority = priority_of(KEYS[1])
if ARGV[9] ~= '' then
    priority = math.max(-MAX_PRIORITY, math.min(MAX_PRIORITY,
        priority + math.floor(tonumber(ARGV[9]))))
    if priority == 0 then
        redis.call('HDEL', KEYS[1], 'priority')
    else
        redis.call('HSET', KEYS[1], 'priority', priority)
    end
end
if ARGV[5] == '' then
    redis.call('HSET', KEYS[1], 'status', 'pending', 'updated', ARGV[4])
    line_put(u, id, KEYS[1], priority, ARGV[8] == 'front')
    redis.call('PUBLISH', ARGV[7], 1)
else
    redis.call('HSET', KEYS[1], 'status', 'scheduled', 'eta', ARGV[5], 'updated', ARGV[4])
    redis.call('ZADD', KEYS[5], ARGV[5], id)
end
identifier_claim(KEYS[8], ARGV[11], KEYS[1], id, ARGV[12])
return {1}
