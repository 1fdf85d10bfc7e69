-- Shared by the scripts that put a task of a group in line, take it out of line, start
-- it or let it go: the groups of a queue, their fair turns and their limits.
-- * A pending task with a group waits in its group's line (a sorted set scored as the
--   prioritized set is: see `rank_score`) and in the queue's `grouped` set (where pending
--   tasks of groups are counted and listed), never in the Blueque pending list.
-- * The groups whose tasks wait and may start are in `groups`, scored by their turn: the
--   fair share's virtual time of their next start. The clock is the turn of the last
--   start; a group's next turn is one stride (1 / its weight) after its last, and a group
--   that joins takes the clock plus its stride, a hair less (it goes before a group that
--   started a task at the clock's turn: the next free slot is its).
-- * A group whose limit is reached waits in `held` instead, scored by when to look again:
--   the end of its window of starts, or, when its running tasks fill its slots, when one
--   of them frees (`slot_free`), RECHECK seconds at the latest (a slot freed by a hand
--   other than this library's steps). A limit changed looks again at once.
-- * A running task of a group (reserved or started: holding its lease) is in its group's
--   slots set from its take to the moment its lease ends (`slot_free`).
-- g: the keys of one queue's groups, from keys.KeySpace.group_layout (see `groups_of`).
-- The steps that put a task in line, start it or let it go are never cut short by a key
-- of a group of another type: its reads count as unset (redis.pcall), a task that cannot
-- join its group's line joins the queue's (see `line_put` in _line.lua), and a slot that
-- cannot be let go is left to the check of `slots_taken`. The reserve step reports such
-- a key (a queue broken, as its other keys).
local RANK_SPAN = 4294967296  -- 2^32: ranks stay within half of it either way
local NO_LIMIT = {weight = 1}
local RECHECK = 10

-- the keys of a queue's groups, from their layout (one argument, space-separated)
local function groups_of(layout)
    local p = {}
    for part in string.gmatch(layout, '%S+') do p[#p + 1] = part end
    return {grouped = p[1], groups = p[2], held = p[3], clock = p[4], limits = p[5],
        queue_starts = p[6], lines = p[7], slots = p[8], starts = p[9]}
end

-- the score that puts a task at the back (or the `front`) of `priority` in the sorted
-- set `zset` (see keys.KeySpace.prioritized): a rank one above the highest rank of its
-- priority, or one below the lowest (0 for the first). Whole numbers below 2^53, written
-- with '%.0f' so that Redis gets them exactly.
local function rank_score(zset, priority, front)
    local base = -priority * RANK_SPAN
    local low = string.format('%.0f', base - RANK_SPAN / 2)
    local high = '(' .. string.format('%.0f', base + RANK_SPAN / 2)
    local score = base
    if front then
        local first = redis.call('ZRANGEBYSCORE', zset, low, high, 'WITHSCORES', 'LIMIT', 0, 1)
        if first[2] then score = tonumber(first[2]) - 1 end
    else
        local last = redis.call('ZREVRANGEBYSCORE', zset, high, low, 'WITHSCORES', 'LIMIT', 0, 1)
        if last[2] then score = tonumber(last[2]) + 1 end
    end
    return string.format('%.0f', score)
end

-- a limit as stored ('max_running max_starts per weight', '-' for each unset): a table
-- of its numbers (nil when unset; weight 1 when unset), or NO_LIMIT
local function parse_limit(text)
    if not text then return NO_LIMIT end
    local values, names = {}, {'running', 'starts', 'per', 'weight'}
    local n = 0
    for part in string.gmatch(text, '%S+') do
        n = n + 1
        if names[n] then values[names[n]] = tonumber(part) end
    end
    if not values.weight or values.weight <= 0 then values.weight = 1 end
    return values
end

-- the limit of `group` of a queue: its own, else the default of its groups ('*')
local function group_limit(g, group)
    local found = redis.pcall('HMGET', g.limits, group, '*')
    if found.err then return NO_LIMIT end
    return parse_limit(found[1] or found[2])
end

-- the turn a group joining the fair share now takes (see the top)
local function joining_turn(g, limit)
    local read = redis.pcall('GET', g.clock)
    local clock = (type(read) == 'string' and tonumber(read)) or 0
    local stride = 1 / limit.weight
    return string.format('%.17g', clock + stride - stride / 1000000)
end

-- a group whose tasks wait takes a turn, unless it has one or is held back
local function group_join(g, group)
    local active, held = redis.pcall('ZSCORE', g.groups, group),
        redis.pcall('ZSCORE', g.held, group)
    if active or held then return end  -- (an error reply is a table: no turn given)
    redis.pcall('ZADD', g.groups, joining_turn(g, group_limit(g, group)), group)
end

-- put task `id` in the line of `group` at `priority`, at the back (or the `front`); false
-- when a key of the group holds another type (nothing written)
local function group_push(g, id, group, priority, front)
    local line = g.lines .. group
    local ok, score = pcall(rank_score, line, priority, front)
    if not ok or type(redis.pcall('ZADD', g.grouped, score, id)) == 'table' then
        return false
    end
    if type(redis.pcall('ZADD', line, score, id)) == 'table' then
        redis.call('ZREM', g.grouped, id)
        return false
    end
    group_join(g, group)
    return true
end

-- take task `id` out of the line of `group`; true when it was there. A group left with
-- nothing waiting leaves its turn (or its hold).
local function group_remove(g, id, group)
    if redis.pcall('ZREM', g.grouped, id) ~= 1 then return false end
    local line = g.lines .. group
    redis.pcall('ZREM', line, id)  -- (of another type: the reserve step drops the entry)
    if redis.call('EXISTS', line) == 0 then
        redis.pcall('ZREM', g.groups, group)
        redis.pcall('ZREM', g.held, group)
    end
    return true
end

-- a group held back takes a turn again (a slot freed, its window opened, a limit changed)
local function group_release(g, group)
    if redis.pcall('ZREM', g.held, group) ~= 1 then return end
    if redis.call('EXISTS', g.lines .. group) == 1 then
        redis.pcall('ZADD', g.groups, joining_turn(g, group_limit(g, group)), group)
    end
end

-- the running task `id` of `group` lets its slot go (its lease ended); its group, if
-- held back, takes a turn again (its limit is looked at again when its turn comes)
local function slot_free(g, group, id)
    if not group or group == '' then return end
    if redis.pcall('SREM', g.slots .. group, id) == 1 then group_release(g, group) end
end

-- the slots of `group` still taken: its members whose lease is held (a member whose
-- lease is gone, its step cut short by another client, is let go here)
local function slots_taken(g, group, leases)
    local key = g.slots .. group
    local members = redis.call('SMEMBERS', key)
    local taken = 0
    for _, member in ipairs(members) do
        if redis.call('ZSCORE', leases, member) then
            taken = taken + 1
        else
            redis.call('SREM', key, member)
        end
    end
    return taken
end

-- the starts of a window (sorted set `key`) within its last `per` seconds at `now`
local function starts_within(key, per, now)
    redis.call('ZREMRANGEBYSCORE', key, '-inf', '(' .. string.format('%.17g', now - per))
    return redis.call('ZCARD', key)
end

-- when a start is allowed again by a window of `limit` (sorted set `key`), or nil when
-- one is allowed now
local function window_closed(key, limit, now)
    if not limit.starts then return nil end
    local per = limit.per or 0
    if starts_within(key, per, now) < limit.starts then return nil end
    local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
    return tonumber(oldest[2]) + per
end

-- count a start in a window of `limit` (sorted set `key`), kept as long as the window
local function count_start(key, limit, member, now)
    if not limit.starts then return end
    redis.call('ZADD', key, string.format('%.17g', now), member)
    redis.call('PEXPIRE', key, math.ceil(((limit.per or 0) + 1) * 1000))
end

-- why the queue as a whole may start no task now (its own limit, `limit`): 'running' or
-- 'starts', else nil
local function queue_closed(g, limit, leases, now)
    if limit.running and redis.call('ZCARD', leases) >= limit.running then return 'running' end
    if window_closed(g.queue_starts, limit, now) then return 'starts' end
    return nil
end

-- the next task of a queue's groups that may start: {id, score, group, its limit, its
-- turn} taken out of its line (the caller puts it in its holder's reserved list), or nil
-- when none may. A group whose limit is reached is held back on the way; the groups held
-- until their window opened are back first.
local function group_take(g, leases, now)
    local due = redis.call('ZRANGEBYSCORE', g.held, '-inf', string.format('%.17g', now))
    for _, group in ipairs(due) do group_release(g, group) end
    while true do
        local top = redis.call('ZRANGE', g.groups, 0, 0, 'WITHSCORES')
        local group, turn = top[1], top[2]
        if not group then return nil end
        local limit = group_limit(g, group)
        local reopens = window_closed(g.starts .. group, limit, now)
        if limit.running and slots_taken(g, group, leases) >= limit.running then
            reopens = math.max(reopens or 0, now + RECHECK)
        end
        if reopens then
            redis.call('ZREM', g.groups, group)
            redis.call('ZADD', g.held, string.format('%.17g', reopens), group)
        else
            local popped = redis.call('ZPOPMIN', g.lines .. group)
            if popped[1] then
                redis.call('ZREM', g.grouped, popped[1])
                redis.call('SET', g.clock, turn)
                if redis.call('EXISTS', g.lines .. group) == 1 then
                    redis.call('ZADD', g.groups,
                        string.format('%.17g', tonumber(turn) + 1 / limit.weight), group)
                else
                    redis.call('ZREM', g.groups, group)
                    -- no group waits any more: the clock starts again from 0
                    if redis.call('EXISTS', g.groups, g.held) == 0 then
                        redis.call('DEL', g.clock)
                    end
                end
                return {popped[1], popped[2], group, limit, turn}
            end
            redis.call('ZREM', g.groups, group)  -- nothing waits in it after all
        end
    end
end

-- put a task just taken by `group_take` back where it waited (`taken`), its group's turn
-- as it was
local function group_untake(g, taken)
    local id, score, group, turn = taken[1], taken[2], taken[3], taken[5]
    redis.call('ZADD', g.lines .. group, score, id)
    redis.call('ZADD', g.grouped, score, id)
    redis.call('ZADD', g.groups, turn, group)
end

-- a task of `group` taken by `group_take` starts (attempt `attempt`): it holds a slot of
-- its group, and counts in the windows of its group's limit and its queue's (`queue`,
-- nil when the queue has no limit of its own)
local function group_started(g, taken, attempt, queue, now)
    local id, group, limit = taken[1], taken[3], taken[4]
    redis.call('SADD', g.slots .. group, id)
    count_start(g.starts .. group, limit, id .. ':' .. attempt, now)
    if queue then count_start(g.queue_starts, queue, id .. ':' .. attempt, now) end
end
