-- Tell waiting tasks of a queue that a task they wait for finished, and release those
-- that wait for nothing more: each then joins its line (or the scheduled set, when its
-- eta is still to come) with the options it was enqueued with (its `deferred` field), as
-- the enqueue step would have put it. A parent that failed for good, was canceled or
-- expired (or was deleted before it finished: 'gone') ends its waiting tasks as their
-- `on_parent_failure` says: 'cancel' (unset)
-- cancels them, 'fail' fails them with an error naming it, 'run' counts it as finished.
-- KEYS[1] blueque_pending_tasks_<queue>, KEYS[2] <prefix>:prioritized:<queue>,
-- KEYS[3] blueque_scheduled_tasks_<queue>, KEYS[4] <prefix>:expiry:<queue>,
-- KEYS[5] <prefix>:stats:<queue>, KEYS[6] <prefix>:utubes:<queue>,
-- KEYS[7] <prefix>:utube_waiting:<queue>, KEYS[8] <prefix>:canceled:<queue>,
-- KEYS[9] blueque_failed_tasks_<queue>, KEYS[10] <prefix>:queue:<queue> (settings),
-- KEYS[11] <prefix>:retention:<queue>, KEYS[12] <prefix>:stats:<queue>:m:<minute>
-- ARGV[1] queue name, ARGV[2] now, ARGV[3] wake-up channel, ARGV[4] name prefix of the
-- utube lists, ARGV[5] key prefix of task hashes, ARGV[6] the keys of the queue's groups
-- (keys.KeySpace.group_layout), ARGV[7] the keys of its dependencies
-- (keys.KeySpace.dependency_layout), ARGV[8] default result ttl, ARGV[9] default failure
-- ttl, then per waiting task: its id, the id of the parent that finished ('': none, the
-- task is released if it waits for nothing), the parent's status ('gone': deleted
-- before it finished, as a canceled one)
-- Each is idempotent: a parent counts once per task, a task not waiting is passed over.
-- Returns {released, ended}: how many tasks joined a line or the scheduled set, how many
-- were canceled or failed (their own followers are then told through their queue's
-- ended list).
local queue, now, prefix = ARGV[1], ARGV[2], ARGV[5]
local layout = cjson.decode(ARGV[7])
local d = {waiting = layout[1], after = layout[2]}
local refused = refuse_misfit({{KEYS[1], 'list'}, {KEYS[2], 'zset'}, {KEYS[3], 'zset'},
    {KEYS[4], 'zset'}, {KEYS[6], 'hash'}, {KEYS[7], 'zset'}, {KEYS[8], 'list'},
    {KEYS[9], 'list'}, {d.waiting, 'zset'}})
if refused then return refused end
local u = utube_keys(KEYS[6], KEYS[7], ARGV[4], prefix, queue, KEYS[1], KEYS[2], ARGV[6])
local FAILURES = {failed = true, canceled = true, expired = true, gone = true}
local r = {retention = KEYS[11], settings = KEYS[10], throughput = KEYS[12], stats = KEYS[5],
    result_ttl = ARGV[8], failure_ttl = ARGV[9]}
-- the queue's default ttl, read when first needed (a settings hash of another type: none)
local queue_ttl = nil
local function default_ttl()
    if queue_ttl == nil then
        local setting = redis.pcall('HGET', KEYS[10], 'ttl')
        queue_ttl = (type(setting) == 'string' and usable(setting)) or false
    end
    return queue_ttl
end

-- a waiting task ends without running: canceled, or failed with `why`
local function finish_waiting(key, id, status, why)
    redis.call('ZREM', d.waiting, id)
    redis.pcall('DEL', d.after .. id)
    redis.call('HSET', key, 'status', status, 'updated', now)
    if why then redis.call('HSET', key, 'error', why) end
    if status == 'canceled' then
        redis.call('LPUSH', KEYS[8], id)
        redis.pcall('HINCRBY', KEYS[5], 'calls.cancel', 1)
    else
        redis.call('LPUSH', KEYS[9], id)
        redis.pcall('HINCRBY', KEYS[5], 'calls.fail', 1)
    end
    retain(r, key, id, status, now)
end

-- a task that waits for nothing more joins its line, or the scheduled set; true when it
-- joined a line (a wake-up is due)
local function release(key, id)
    redis.call('ZREM', d.waiting, id)
    redis.pcall('DEL', d.after .. id)
    local o = {}
    local packed = redis.call('HGET', key, 'deferred')
    if packed then
        local ok, decoded = pcall(cjson.decode, packed)
        if ok and type(decoded) == 'table' then o = decoded end
        redis.call('HDEL', key, 'deferred')
    end
    -- (a value that is no finite number, as another client may have written, is unset)
    local ttl = usable(o.t) or default_ttl()
    if ttl == 0 then ttl = nil end
    local eta = usable(o.e)
    local start = now
    if eta and eta > tonumber(now) then start = o.e end
    if ttl then
        local limit = string.format('%.6f', tonumber(start) + ttl)
        redis.call('HSET', key, 'expires_at', limit)
        redis.call('ZADD', KEYS[4], limit, id)
    end
    if start ~= now then
        redis.call('HSET', key, 'status', 'scheduled', 'updated', now)
        redis.call('ZADD', KEYS[3], start, id)
        return false
    end
    redis.call('HSET', key, 'status', 'pending', 'updated', now)
    return line_join(u, id, key, now, o.f == 1)
end

local released, ended, woken = 0, 0, 0
for i = 10, #ARGV, 3 do
    local id, parent, status = ARGV[i], ARGV[i + 1], ARGV[i + 2]
    local key = prefix .. id
    local after = d.after .. id
    local current = redis.pcall('HGET', key, 'status')
    if current == 'waiting' and redis.call('HGET', key, 'queue') == queue then
        local go = true
        if parent ~= '' then
            go = redis.pcall('SREM', after, parent) == 1
            if go and FAILURES[status] then
                local policy = redis.call('HGET', key, 'on_parent_failure')
                if policy == 'fail' then
                    finish_waiting(key, id, 'failed', 'parent task ' .. parent .. ' ' .. status)
                    ended, go = ended + 1, false
                elseif policy ~= 'run' then
                    finish_waiting(key, id, 'canceled', nil)
                    ended, go = ended + 1, false
                end
            end
        end
        local left = redis.pcall('SCARD', after)  -- (another type: it waits for nothing)
        if go and (left == 0 or type(left) == 'table') then
            if release(key, id) then woken = woken + 1 end
            released = released + 1
        end
    end
end
if woken > 0 then redis.call('PUBLISH', ARGV[3], woken) end
return {released, ended}
