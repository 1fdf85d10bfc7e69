-- Empty a queue, one chunk per call: 'truncate' deletes its waiting tasks (pending and
-- scheduled); 'drop' deletes every task it files and, once none is left, the queue
-- itself. A drop refuses (QUEUEBUSY) while the queue has listeners or holds running tasks.
-- KEYS[1] blueque_pending_tasks_<queue>, KEYS[2] <prefix>:prioritized:<queue>,
-- KEYS[3] blueque_scheduled_tasks_<queue>, KEYS[4] <prefix>:identifiers:<queue>,
-- KEYS[5] <prefix>:expiry:<queue>, KEYS[6] <prefix>:stats:<queue>,
-- KEYS[7] blueque_listeners_<queue>, KEYS[8] <prefix>:leases:<queue>,
-- KEYS[9] blueque_started_tasks_<queue>, KEYS[10] blueque_complete_tasks_<queue>,
-- KEYS[11] blueque_failed_tasks_<queue>, KEYS[12] <prefix>:canceled:<queue>,
-- KEYS[13] <prefix>:expired:<queue>, KEYS[14] <prefix>:buried:<queue>,
-- KEYS[15] <prefix>:queue:<queue>, KEYS[16] blueque_queues,
-- KEYS[17] <prefix>:periodic:<queue>, KEYS[18] <prefix>:periodic_due:<queue>,
-- KEYS[19] <prefix>:utubes:<queue>, KEYS[20] <prefix>:utube_waiting:<queue>,
-- KEYS[21] <prefix>:retention:<queue>, KEYS[22] <prefix>:stalled:<queue>,
-- KEYS[23] <prefix>:canceling:<queue>, KEYS[24] <prefix>:paused:<queue>,
-- KEYS[25] <prefix>:waiting:<queue>
-- ARGV[1] 'truncate' or 'drop', ARGV[2] key prefix of task hashes, ARGV[3] queue name,
-- ARGV[4] most entries to take in this call, ARGV[5] name prefix of the utube lists,
-- ARGV[6] the keys of the queue's groups (keys.KeySpace.group_layout): their waiting tasks
-- are deleted with the others, then their lines; a drop deletes their limits too;
-- ARGV[7] the keys of its dependencies (keys.KeySpace.dependency_layout): a task others
-- wait for, truncated before it finished, is pushed on the queue's ended list for them to
-- be told (as delete.lua does); a drop deletes every dependency key of the queue, the
-- tasks waiting for its tasks in other queues finding them gone when checked
-- A task hash is deleted only if it still belongs to this queue with a status the mode
-- deletes; other entries are only removed.
-- Returns {tasks deleted, 1 when nothing is left to do}.
local mode, prefix, queue, limit = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local refused = refuse_misfit({{KEYS[1], 'list'}, {KEYS[2], 'zset'}, {KEYS[3], 'zset'},
    {KEYS[4], 'hash'}, {KEYS[5], 'zset'}, {KEYS[6], 'hash'}, {KEYS[19], 'hash'},
    {KEYS[20], 'zset'}})
if refused then return refused end
local g = groups_of(ARGV[6])
refused = refuse_misfit({{g.grouped, 'zset'}, {g.groups, 'zset'}, {g.held, 'zset'}})
if refused then return refused end
local layout = cjson.decode(ARGV[7])
local d = {waiting = layout[1], after = layout[2], ended = layout[3], children = layout[4]}
refused = refuse_misfit({{d.waiting, 'zset'}})
if refused then return refused end
local sources = {{KEYS[20], 'zset'}, {KEYS[1], 'list'}, {KEYS[2], 'zset'}, {KEYS[3], 'zset'},
    {g.grouped, 'zset'}, {d.waiting, 'zset'}}
local deletes = {pending = true, scheduled = true, waiting = true}
if mode == 'drop' then
    refused = refuse_misfit({{KEYS[7], 'set'}, {KEYS[8], 'zset'}, {KEYS[9], 'set'},
        {KEYS[10], 'list'}, {KEYS[11], 'list'}, {KEYS[12], 'list'}, {KEYS[13], 'list'},
        {KEYS[14], 'list'}})
    if refused then return refused end
    if redis.call('SCARD', KEYS[7]) > 0 or redis.call('ZCARD', KEYS[8]) > 0
            or redis.call('SCARD', KEYS[9]) > 0 then
        return redis.error_reply('QUEUEBUSY queue ' .. queue .. ' has listeners or running tasks')
    end
    for i = 10, 14 do sources[#sources + 1] = {KEYS[i], 'list'} end
    for _, status in ipairs({'complete', 'failed', 'canceled', 'expired', 'buried'}) do
        deletes[status] = true
    end
end
local deleted, taken = 0, 0
for _, source in ipairs(sources) do
    while taken < limit do
        local id
        if source[2] == 'list' then
            id = redis.call('RPOP', source[1])
        else
            id = redis.call('ZPOPMIN', source[1])[1]
        end
        if not id then break end
        taken = taken + 1
        local key = prefix .. id
        if redis.call('TYPE', key)['ok'] == 'hash' and redis.call('HGET', key, 'queue') == queue
                and deletes[redis.call('HGET', key, 'status')] then
            identifier_release(KEYS[4], key, id)
            local name = redis.call('HGET', key, 'utube')
            -- its key is free again (the tasks waiting behind are deleted too)
            if name and redis.call('HGET', KEYS[19], name) == id then
                redis.call('HDEL', KEYS[19], name)
                redis.call('DEL', ARGV[5] .. name)
            end
            redis.call('ZREM', KEYS[5], id)
            local followed = redis.call('HMGET', key, 'follow', 'workflow', 'status')
            if mode == 'truncate' and followed[1] then
                local entry = id
                if followed[2] then entry = id .. ' ' .. followed[2] end
                redis.pcall('LPUSH', d.ended, entry)
            else
                redis.pcall('DEL', d.children .. id)
            end
            if followed[3] == 'waiting' then redis.pcall('ZREM', d.waiting, id) end
            redis.pcall('DEL', d.after .. id)
            redis.call('DEL', key)
            deleted = deleted + 1
        end
    end
end
if deleted > 0 then redis.call('HINCRBY', KEYS[6], 'calls.delete', deleted) end
if taken >= limit then return {deleted, 0} end
-- every waiting task of the groups is gone: their lines and turns go too
local waiting_groups = {}
for _, set in ipairs({g.groups, g.held}) do
    for _, group in ipairs(redis.call('ZRANGE', set, 0, -1)) do
        redis.call('DEL', g.lines .. group)
        waiting_groups[#waiting_groups + 1] = group
    end
end
redis.call('DEL', g.groups, g.held, g.fair)
if mode == 'drop' then  -- no task runs: the slots and windows of those groups go too
    for _, group in ipairs(waiting_groups) do
        redis.call('DEL', g.slots .. group, g.starts .. group)
    end
    redis.call('DEL', g.limits, g.queue_starts)
    for _, name in ipairs(redis.call('HKEYS', KEYS[19])) do
        redis.call('DEL', ARGV[5] .. name)
    end
    for _, key in ipairs({KEYS[4], KEYS[5], KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[15],
            KEYS[17], KEYS[18], KEYS[19], KEYS[21], KEYS[22], KEYS[23], KEYS[24], d.waiting,
            d.ended}) do
        redis.call('DEL', key)
    end
    if not misfit({{KEYS[16], 'zset'}}) then redis.call('ZREM', KEYS[16], queue) end
end
return {deleted, 1}
