-- Take back tasks whose holder is gone: their lease expired (any host), or the process
-- running them is dead (same host). Each goes back to pending at the front of its queue,
-- or fails once it has used its attempts; one whose cancel was asked is filed as canceled.
-- KEYS, fifteen per task: blueque_task_<id>, <prefix>:leases:<queue>,
--   blueque_pending_tasks_<queue>, blueque_failed_tasks_<queue>,
--   blueque_started_tasks_<queue>, <prefix>:queue:<queue> (queue settings),
--   <prefix>:prioritized:<queue>, <prefix>:identifiers:<queue>, <prefix>:utubes:<queue>,
--   <prefix>:utube_waiting:<queue>, <prefix>:canceled:<queue>, <prefix>:retention:<queue>,
--   <prefix>:stalled:<queue>, <prefix>:stats:<queue>:m:<minute>, <prefix>:stats:<queue>
--   (counts each task taken back as `recovered`, and the finished ones; see _finished.lua)
-- ARGV[1] now (for the `updated` field), ARGV[2] 'expired' (only if the lease ended,
-- by the server's clock), 'dead' (its holder is dead: unless the task's own process says
-- it still lives, its `alive_until` field being ahead of the server's clock) or 'gone'
-- (its process is known to be gone: always), ARGV[3] default maximum attempts ('': no
-- maximum), ARGV[4] why, for the error field, ARGV[5] key prefix of task hashes, ARGV[6]
-- default result ttl, ARGV[7] default failure ttl (see _finished.lua); then eight
-- per task: task id, reserved-list key prefix of the queue (the listener id read from the
-- hash completes it), wake-up channel, attempt expected ('': any), holder expected ('':
-- any), queue name, name prefix of the queue's utube lists, the keys of the queue's
-- groups (keys.KeySpace.group_layout; a task of a group lets its slot go). A task put back keeps its
-- utube key; one failed hands it to the next task of that key. A task held by another holder or attempt than expected is skipped: it
-- changed hands meanwhile. Attempts a task did not fail (it delayed itself: its
-- `uncounted` field) do not count toward the maximum.
-- Returns, flat, per task: id, outcome ('pending', 'failed', 'canceled' or 'skipped').
local mode, default_max, why = ARGV[2], ARGV[3], ARGV[4]
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local out = {}
local prefix = ARGV[5]
for i = 1, #KEYS / 15 do
    local b = 15 * (i - 1)
    local task, leases, pending, failed, started, settings, prioritized, identifiers =
        KEYS[b + 1], KEYS[b + 2], KEYS[b + 3], KEYS[b + 4], KEYS[b + 5], KEYS[b + 6],
        KEYS[b + 7], KEYS[b + 8]
    local a = 8 * (i - 1) + 8
    local canceled, stalled = KEYS[b + 11], KEYS[b + 13]
    local stats = KEYS[b + 15]
    local r = {retention = KEYS[b + 12], settings = settings, throughput = KEYS[b + 14],
        stats = stats, result_ttl = ARGV[6], failure_ttl = ARGV[7]}
    local id, reserved_prefix, channel, expected, holder, queue = ARGV[a], ARGV[a + 1],
        ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5]
    local u = utube_keys(KEYS[b + 9], KEYS[b + 10], ARGV[a + 6], prefix, queue, pending,
        prioritized, ARGV[a + 7])
    local status = nil
    local bad = misfit({{task, 'hash'}, {leases, 'zset'}, {pending, 'list'}, {failed, 'list'},
        {started, 'set'}, {settings, 'hash'}, {prioritized, 'zset'}, {identifiers, 'hash'},
        {u.utubes, 'hash'}, {u.waiting, 'zset'}, {canceled, 'list'},
        {reserved_prefix .. (redis.call('TYPE', task)['ok'] == 'hash'
            and (redis.call('HGET', task, 'node') or '') or ''), 'list'}})
    if not bad then status = redis.call('HGET', task, 'status') end
    local attempt, node, score = '', '', nil
    if not bad then
        attempt = redis.call('HGET', task, 'attempt') or ''
        node = redis.call('HGET', task, 'node') or ''
        score = redis.call('ZSCORE', leases, id)
    end
    -- checked before anything is written (see _terms.lua)
    local max = nil
    if not bad then max = first_number(task, settings, 'max_attempts', default_max) end
    local outcome = 'skipped'
    if bad then
        -- a key of another type: the task is left for the deep clean to report; a lease
        -- entry pointing at something that is no task hash is removed, so that it never
        -- hides the real expired leases behind it
        outcome = 'broken'
        local kind = redis.call('TYPE', task)['ok']
        if kind ~= 'hash' and redis.call('TYPE', leases)['ok'] == 'zset' then
            redis.call('ZREM', leases, id)
        end
    elseif status ~= 'reserved' and status ~= 'started' then
        -- finished or gone: only a stale lease entry (and slot) is left to remove
        redis.call('ZREM', leases, id)
        local group = redis.call('HGET', task, 'group')
        if group then groups().slot_free(u.g, group, id) end
    elseif (expected == '' or expected == attempt) and (holder == '' or holder == node)
            and (mode == 'gone' or (mode == 'dead' and not ((tonumber(
                redis.call('HGET', task, 'alive_until')) or 0) > now))
                or (mode == 'expired' and score and tonumber(score) <= now)) then
        local held = redis.call('HMGET', task, 'pid', 'group')
        local pid = held[1] or ''
        redis.call('LREM', reserved_prefix .. node, 1, id)
        redis.call('SREM', started, node .. ' ' .. pid .. ' ' .. id)
        redis.call('ZREM', leases, id)
        if held[2] then groups().slot_free(u.g, held[2], id) end
        unflag_stalled(task, stalled, id)  -- an index: see _finished.lua
        redis.call('HDEL', task, 'node', 'pid', 'pstart', 'alive_until')
        local used = (tonumber(attempt) or 0)
            - (tonumber(redis.call('HGET', task, 'uncounted')) or 0)
        if canceling(task) then
            file_canceled(task, id, canceled, nil, ARGV[1], r)
            if utube_leave(u, id, task) then redis.call('PUBLISH', channel, 1) end
            outcome = 'canceled'
        elseif max and used >= max then
            redis.call('HSET', task, 'status', 'failed', 'updated', ARGV[1], 'error',
                'LeaseExpired: ' .. why .. ' after ' .. used .. ' attempt(s)')
            redis.call('LPUSH', failed, id)
            retain(r, task, id, 'failed', ARGV[1])
            if utube_leave(u, id, task) then redis.call('PUBLISH', channel, 1) end
            outcome = 'failed'
        else
            redis.call('HSET', task, 'status', 'pending', 'updated', ARGV[1])
            place(u, id, task, true)
            identifier_claim(identifiers, prefix, task, id, queue)
            redis.call('PUBLISH', channel, 1)
            outcome = 'pending'
        end
    end
    if outcome == 'pending' or outcome == 'failed' or outcome == 'canceled' then
        redis.pcall('HINCRBY', stats, 'recovered', 1)  -- an index beside the task
    end
    out[#out + 1] = id
    out[#out + 1] = outcome
end
return out
