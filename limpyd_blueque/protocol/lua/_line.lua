-- Shared by the scripts that put a task in line or take it out of line: where a pending
-- task waits, by its priority (higher runs sooner), and the identifier of a waiting task.
-- * Priority 0: the Blueque pending list, which every Blueque worker pops from its right
--   end: the back of the line is its left end (LPUSH), the front its right end (RPUSH).
-- * Any other priority: the prioritized sorted set of the queue, scored
--   `-priority * RANK_SPAN + rank`, so that the lowest score is the highest priority and,
--   within it, the front of its line. A rank joining the back is one above the highest
--   rank of its priority, one joining the front one below the lowest (0 for the first).
-- Scores are whole numbers below 2^53 (see rank_score in _groups.lua).
-- * A task with a group: its group's line (see _groups.lua).
local MAX_PRIORITY = 1000000

-- the priority a task hash records (0 when unset, or not a whole number in range)
local function priority_of(task)
    local value = tonumber(redis.call('HGET', task, 'priority'))
    if value and value == math.floor(value) and value >= -MAX_PRIORITY
            and value <= MAX_PRIORITY then
        return value
    end
    return 0
end

-- the priority a score of the prioritized sorted set stands for
local function score_priority(score)
    return -math.floor(tonumber(score) / RANK_SPAN + 0.5)
end

-- put task `id` in line at `priority`, at the back (or the `front`) of that priority
local function line_push(pending, prioritized, id, priority, front)
    if priority == 0 then
        if front then redis.call('RPUSH', pending, id) else redis.call('LPUSH', pending, id) end
        return
    end
    redis.call('ZADD', prioritized, rank_score(prioritized, priority, front), id)
end

-- the group a task hash records, when it is a group's name (else nil: a value that is
-- none quarantines its task when it is taken, see reserve.lua)
local function group_of(text)
    if text and #text <= 200 and string.match(text, '^[%w%._:%-]+$') then return text end
    return nil
end

-- put the pending task `id` (hash `key`) in line at `priority`, at the back (or the
-- `front`): in its group's line when it has a group (`u.g`: the keys of the queue's
-- groups), else in the queue's
-- (a task of a group that cannot join its group's line, a key of the group being of
-- another type, waits in the prioritized set: only this library's workers take it, as a
-- task of no group, until an operator sets the key aside)
local function line_put(u, id, key, priority, front)
    local group = group_of(redis.call('HGET', key, 'group'))
    if not group then
        line_push(u.pending, u.prioritized, id, priority, front)
    elseif not groups().push(u.g, id, group, priority, front) then
        redis.call('ZADD', u.prioritized, rank_score(u.prioritized, priority, front), id)
    end
end

-- `line_put` at the priority the task records
local function place(u, id, key, front)
    line_put(u, id, key, priority_of(key), front)
end

-- take task `id` (hash `key`) out of line, wherever it waits; true when it was there
-- (`u`: see utube_keys)
local function line_remove(u, id, key)
    local group = group_of(redis.call('HGET', key, 'group'))
    if group and groups().remove(u.g, id, group) then return true end  -- else maybe in the
    -- queue's line (it could not join its group's)
    if redis.call('ZREM', u.prioritized, id) == 1 then return true end
    return redis.call('LREM', u.pending, 0, id) > 0
end

-- the priority of the next task of a queue, and where it waits ('list' or 'zset'); nil
-- when none waits. A task of priority 0 (the list) comes before those of a lower one.
local function line_head(pending, prioritized)
    local top = redis.call('ZRANGE', prioritized, 0, 0, 'WITHSCORES')
    local best, source = nil, nil
    if top[2] then best, source = score_priority(top[2]), 'zset' end
    if (best == nil or best < 0) and redis.call('LLEN', pending) > 0 then
        best, source = 0, 'list'
    end
    return best, source
end

-- the status of the task at `key` if it is a task of `queue` with one of `statuses` (a
-- set); else nil and the reply refusing the step: {-1} when there is no such task,
-- {0, status, its queue} otherwise
local function status_among(key, queue, statuses)
    local status = redis.call('HGET', key, 'status')
    if not status then return nil, {-1} end
    local own = redis.call('HGET', key, 'queue') or ''
    if own ~= queue or not statuses[status] then return nil, {0, status, own} end
    return status, nil
end

-- the waiting task an identifier maps to, if that task still waits in this queue with
-- this identifier (else the entry is stale: nil)
local function identified(identifiers, prefix, identifier, queue)
    local id = redis.call('HGET', identifiers, identifier)
    if not id then return nil end
    local key = prefix .. id
    if redis.call('TYPE', key)['ok'] ~= 'hash' then return nil end
    local fields = redis.call('HMGET', key, 'status', 'identifier', 'queue')
    if (fields[1] == 'pending' or fields[1] == 'scheduled') and fields[2] == identifier
            and fields[3] == queue then
        return id
    end
    return nil
end

-- a task leaves the waiting line: its identifier no longer maps to it
local function identifier_release(identifiers, task, id)
    local identifier = redis.call('HGET', task, 'identifier')
    if identifier and redis.call('HGET', identifiers, identifier) == id then
        redis.call('HDEL', identifiers, identifier)
    end
end

-- a task is back in line: its identifier maps to it again, unless another waiting task
-- of the queue has taken it meanwhile
local function identifier_claim(identifiers, prefix, task, id, queue)
    local identifier = redis.call('HGET', task, 'identifier')
    if identifier and not identified(identifiers, prefix, identifier, queue) then
        redis.call('HSET', identifiers, identifier, id)
    end
end

-- Micro-queues (utube): among the pending and held tasks of a queue that share a utube
-- key, one at a time is in line or held: the key's holder, in the utubes hash. The others
-- wait in order in the key's list (pushed left, taken right) and in the utube-waiting set.
-- u: {utubes = hash, waiting = sorted set, lists = list name prefix, prefix = task key
-- prefix, queue = name, pending = Blueque list, prioritized = sorted set, g = the keys of
-- its groups}: see utube_keys

-- the line keys of a queue (its utube keys among them), from the script's KEYS and ARGV
-- (`layout`: keys.KeySpace.group_layout)
-- (`u.g` is read from the layout the first time it is used: most steps never need it)
local LINE_KEYS = {__index = function(keys, name)
    if name ~= 'g' then return nil end
    local g = groups_of(rawget(keys, 'layout'))
    rawset(keys, 'g', g)
    return g
end}
local function utube_keys(utubes, waiting, lists, prefix, queue, pending, prioritized, layout)
    return setmetatable({utubes = utubes, waiting = waiting, lists = lists, prefix = prefix,
        queue = queue, pending = pending, prioritized = prioritized, layout = layout},
        LINE_KEYS)
end

-- true when task `id` may hold utube `name`: it does, nobody does, or its holder no
-- longer is a pending, scheduled or held task of that key
local function utube_free(u, name, id)
    local holder = redis.call('HGET', u.utubes, name)
    if not holder or holder == id then return true end
    local key = u.prefix .. holder
    if redis.call('TYPE', key)['ok'] ~= 'hash' then return true end
    local fields = redis.call('HMGET', key, 'status', 'utube', 'queue')
    local active = {pending = true, scheduled = true, reserved = true, started = true}
    return not (active[fields[1]] and fields[2] == name and fields[3] == u.queue)
end

-- hand utube `name` to the next task waiting behind it, which joins the line; true when
-- one did (a wake-up is due), else the key is free
local function utube_pass(u, name)
    while true do
        local next_id = redis.call('RPOP', u.lists .. name)
        if not next_id then
            redis.call('HDEL', u.utubes, name)
            return false
        end
        redis.call('ZREM', u.waiting, next_id)
        local next_key = u.prefix .. next_id
        if redis.call('TYPE', next_key)['ok'] == 'hash'
                and redis.call('HGET', next_key, 'status') == 'pending'
                and redis.call('HGET', next_key, 'utube') == name then
            redis.call('HSET', u.utubes, name, next_id)
            place(u, next_id, next_key, false)
            return true
        end
    end
end

-- put pending task `id` (hash `key`) of utube `name` where it goes: in line at its
-- priority when it may hold the key, else behind the key's holder. A key whose holder
-- ended without handing it on (a Blueque client finished it) goes first to the tasks
-- already waiting behind. True when a task joined the line (a wake-up is due).
local function utube_join(u, id, key, name, now, front)
    local free, woke = utube_free(u, name, id), false
    if free and redis.call('HGET', u.utubes, name) ~= id
            and redis.call('LLEN', u.lists .. name) > 0 then
        woke = utube_pass(u, name)
        free = not woke  -- none of them was still waiting: the key is free after all
    end
    if free then
        redis.call('HSET', u.utubes, name, id)
        place(u, id, key, front)
        return true
    end
    redis.call('LPUSH', u.lists .. name, id)
    redis.call('ZADD', u.waiting, now, id)
    return woke
end

-- a task leaves its utube for good (finished, buried, canceled, expired or deleted): one
-- waiting behind leaves the key's list; the holder hands the key to the next waiting
-- task, which joins the line. True when one did (a wake-up is due).
local function utube_leave(u, id, key)
    local name = redis.call('HGET', key, 'utube')
    if not name then return false end
    if redis.call('ZREM', u.waiting, id) == 1 then
        redis.call('LREM', u.lists .. name, 0, id)
        return false
    end
    if redis.call('HGET', u.utubes, name) ~= id then return false end
    return utube_pass(u, name)
end

-- put a task that was out of line (due, kicked, requeued by hand) in line, or behind
-- the holder of its utube key; true when in line
local function line_join(u, id, key, now, front)
    local name = redis.call('HGET', key, 'utube')
    if name then return utube_join(u, id, key, name, now, front) end
    place(u, id, key, front)
    return true
end

-- a waiting task whose ttl ran out leaves every waiting structure: status 'expired',
-- filed in the expired list (k: pending, prioritized, scheduled, identifiers, expiry,
-- expired, stats, u the utube keys); `in_line` false when the caller already took it out
-- of line. True when a task of its utube key joined the line (a wake-up is due).
local function expire_task(k, key, id, now, in_line)
    if in_line then
        line_remove(k.u, id, key)
        redis.call('ZREM', k.scheduled, id)
    end
    local woken = utube_leave(k.u, id, key)
    redis.call('ZREM', k.expiry, id)
    identifier_release(k.identifiers, key, id)
    redis.call('HSET', key, 'status', 'expired', 'updated', now)
    redis.call('LPUSH', k.expired, id)
    redis.call('HINCRBY', k.stats, 'calls.expire', 1)
    retain({retention = k.retention, settings = k.settings, failure_ttl = k.failure_ttl,
        stats = k.stats},
        key, id, 'expired', now)
    return woken
end

-- true when the task at `key` has an expiry that is past at `now` (the server's clock)
local function is_expired(key, now)
    local limit = tonumber(redis.call('HGET', key, 'expires_at'))
    return limit ~= nil and limit <= now
end
