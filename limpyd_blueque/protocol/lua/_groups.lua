-- Shared by the scripts that put a task of a group in line, take it out of line, start
-- it or let it go: the groups of a queue, their fair turns and their limits.
-- * A pending task with a group waits in its group's line (a sorted set scored as the
--   prioritized set is: see `rank_score`) and in the queue's `grouped` set (where pending
--   tasks of groups are counted and listed), never in the Blueque pending list.
-- * The groups whose tasks wait and may start are in `groups`, scored by their turn: a
--   start-time fair queue. The clock (the `fair` hash's '' field) is the turn of the last
--   start; a group's next turn is one stride (1 / its weight) after its last. A group
--   that empties keeps its place in `groups` until its turn comes round (then it leaves,
--   as nothing waits in it): one that fills again meanwhile keeps its turn, so it gets
--   its share and no more; a group that joins anew takes the clock, and so starts at the
--   next free slot. Equal turns go by the group's name. Once no group waits, the clock
--   starts again from 0. `groups` thus holds the groups with tasks waiting and the ones
--   emptied within about one round of turns.
-- * A group whose limit is reached waits in `held` instead (its turn saved in the `fair`
--   hash's field of its name, taken back when it takes a turn again), scored by
--   when to look again: the end of its window of starts, or, when its running tasks fill
--   its slots, when one of them frees (`slot_free`), RECHECK seconds at the latest (a
--   slot freed by a hand other than this library's steps). A limit changed looks again
--   at once. A group taking a turn again wakes the idle workers.
-- * A limit is the group's own, field by field, else the default of the queue's groups
--   ('*'): a weight given to one group keeps the default's max_running.
-- * A running task of a group (reserved or started: holding its lease) is in its group's
--   slots set from its take to the moment its lease ends (`slot_free`).
-- g: the keys of one queue's groups, from keys.KeySpace.group_layout (see `groups_of`).
-- The steps that put a task in line, start it or let it go are never cut short by a key
-- of a group of another type: its reads count as unset (redis.pcall), a task that cannot
-- join its group's line joins the queue's (see `line_put` in _line.lua), and a slot that
-- cannot be let go is left to the check of `slots_taken`. The reserve step reports such
-- a key (a queue broken, as its other keys).
local RANK_SPAN = 4294967296  -- 2^32: ranks stay within half of it either way
-- the keys of a queue's groups, from their layout (one argument, a JSON array)
local function groups_of(layout)
    local p = cjson.decode(layout)
    return {grouped = p[1], groups = p[2], held = p[3], fair = p[4], limits = p[5],
        queue_starts = p[6], lines = p[7], slots = p[8], starts = p[9], channel = p[10]}
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

-- The functions below are defined when a step first needs them (`groups()`): Redis runs
-- a script's whole text at each call, and a step on a task of no group defines none.
local group_functions = nil
local function groups()
    if group_functions then return group_functions end
    local NO_LIMIT = {weight = 1}
    local RECHECK = 60
    -- most held groups taken back, and most groups looked at, by one reserve step (the step
    -- says when it stopped there: its worker tries again at once)
    local RELEASES_PER_TAKE, LOOKS_PER_TAKE = 10, 20

    -- a limit as stored ('max_running max_starts per weight', '-' for each unset): a table
    -- of the numbers set (nil each unset)
    local function parse_limit(text)
        local values, names = {}, {'running', 'starts', 'per', 'weight'}
        if not text then return values end
        local n = 0
        for part in string.gmatch(text, '%S+') do
            n = n + 1
            if names[n] then values[names[n]] = tonumber(part) end
        end
        if values.weight and values.weight <= 0 then values.weight = nil end
        return values
    end

    -- the limit of `group` of a queue: its own, field by field, else the default of its
    -- groups ('*'); weight 1 when neither sets one
    local function group_limit(g, group)
        local found = redis.pcall('HMGET', g.limits, group, '*')
        if found.err then return NO_LIMIT end
        local own, default = parse_limit(found[1]), parse_limit(found[2])
        local limit = {running = own.running or default.running,
            weight = own.weight or default.weight or 1}
        if own.starts then
            limit.starts, limit.per = own.starts, own.per
        else
            limit.starts, limit.per = default.starts, default.per
        end
        return limit
    end

    local function turn_text(turn)
        return string.format('%.17g', turn)
    end

    -- the turn `group` takes as it joins: the later of the clock and the turn it saved when
    -- it was held back (forgotten now)
    local function joining_turn(g, group)
        local read = redis.pcall('HMGET', g.fair, '', group)
        if read.err then return '0' end
        local clock, saved = tonumber(read[1]) or 0, tonumber(read[2])
        if saved then redis.call('HDEL', g.fair, group) end
        if saved and saved > clock then return turn_text(saved) end
        return turn_text(clock)
    end

    -- `group`, held back, leaves its turn, saving it (`turn`) for when it takes one again
    local function leave_turn(g, group, turn)
        redis.pcall('ZREM', g.groups, group)
        redis.pcall('HSET', g.fair, group, turn)
    end

    -- a group whose tasks wait takes a turn, unless it has one or is held back
    local function group_join(g, group)
        local active, held = redis.pcall('ZSCORE', g.groups, group),
            redis.pcall('ZSCORE', g.held, group)
        if type(active) == 'string' or type(held) == 'string' then return end
        redis.pcall('ZADD', g.groups, joining_turn(g, group), group)
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

    -- `group`, found with nothing waiting when its turn came round, leaves `groups`; the
    -- last to leave starts the clock again from 0 when no group is held back either
    local function group_forget(g, group)
        redis.call('ZREM', g.groups, group)
        if redis.call('ZCARD', g.groups) == 0 and redis.call('EXISTS', g.held) == 0 then
            redis.call('DEL', g.fair)
        end
    end

    -- a group held back takes a turn again (a slot freed, its window opened, a limit
    -- changed, its line emptied), and the idle workers are told when tasks wait in it
    local function group_release(g, group)
        if redis.pcall('ZREM', g.held, group) ~= 1 then return end
        redis.pcall('ZADD', g.groups, joining_turn(g, group), group)
        if redis.call('EXISTS', g.lines .. group) == 1 then
            redis.pcall('PUBLISH', g.channel, 1)
        end
    end

    -- take task `id` out of the line of `group`; true when it was there. A group left with
    -- nothing waiting keeps its turn (see `groups` above), even when it was held back,
    -- unless no other group waits
    local function group_remove(g, id, group)
        if redis.pcall('ZREM', g.grouped, id) ~= 1 then return false end
        local line = g.lines .. group
        redis.pcall('ZREM', line, id)  -- (of another type: the reserve step drops the entry)
        if redis.call('EXISTS', line) == 0 then
            group_release(g, group)
            if redis.pcall('ZCARD', g.groups) == 1 then group_forget(g, group) end
        end
        return true
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
        redis.call('ZREMRANGEBYSCORE', key, '-inf', '(' .. turn_text(now - per))
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
        redis.call('ZADD', key, turn_text(now), member)
        redis.call('PEXPIRE', key, math.ceil(((limit.per or 0) + 1) * 1000))
    end

    -- why the queue as a whole may start no task now (its own limit, `limit`): 'running' or
    -- 'starts', else nil
    local function queue_closed(g, limit, leases, now)
        if limit.running and redis.call('ZCARD', leases) >= limit.running then return 'running' end
        if window_closed(g.queue_starts, limit, now) then return 'starts' end
        return nil
    end

    -- the keys of one group that its take reads or its start writes with redis.call, with
    -- their types, checked first: its slots, and its window of starts when it has one (its
    -- line, the `grouped` set and the `fair` hash are checked by their first write)
    local function group_keys(g, group, limit)
        local keys = {{g.slots .. group, 'set'}}
        if limit.starts then keys[2] = {g.starts .. group, 'zset'} end
        return keys
    end

    -- the reason a take of `group` was refused: the key of another type, its type and the
    -- type it must hold
    local function refusal(key, kind)
        return {key, redis.call('TYPE', key)['ok'], kind}
    end

    -- the next task of a queue's groups that may start: {id, score, group, its limit, its
    -- turn} taken out of its line (the caller puts it in its holder's reserved list), or nil
    -- and why: 'more' when it stopped at its bound before finding one (some groups held back
    -- on the way), {key, type found, type it must hold} when a key of the group it came to
    -- holds another type (nothing written for that group). A group whose limit is reached is
    -- held back on the way; groups held until their window opened take their turn first.
    local function group_take(g, leases, now)
        local due = redis.call('ZRANGEBYSCORE', g.held, '-inf', turn_text(now), 'LIMIT', 0,
            RELEASES_PER_TAKE)
        for _, group in ipairs(due) do group_release(g, group) end
        for _ = 1, LOOKS_PER_TAKE do
            local top = redis.call('ZRANGE', g.groups, 0, 0, 'WITHSCORES')
            local group, turn = top[1], top[2]
            if not group then return nil end
            local limit = group_limit(g, group)
            local bad, found, kind = misfit(group_keys(g, group, limit))
            if bad then return nil, {bad, found, kind} end
            local reopens = window_closed(g.starts .. group, limit, now)
            if limit.running and slots_taken(g, group, leases) >= limit.running then
                reopens = math.max(reopens or 0, now + RECHECK)
            end
            if reopens and redis.call('EXISTS', g.lines .. group) == 0 then
                group_forget(g, group)  -- its turn came round, nothing waits
            elseif reopens then
                leave_turn(g, group, turn)
                redis.call('ZADD', g.held, turn_text(reopens), group)
            else
                local line = g.lines .. group
                local popped = redis.pcall('ZPOPMIN', line)
                if popped.err then return nil, refusal(line, 'zset') end
                if popped[1] then
                    -- each write refused undoes the ones before it
                    if type(redis.pcall('ZREM', g.grouped, popped[1])) ~= 'number' then
                        redis.call('ZADD', line, popped[2], popped[1])
                        return nil, refusal(g.grouped, 'zset')
                    end
                    if type(redis.pcall('HSET', g.fair, '', turn)) ~= 'number' then
                        redis.call('ZADD', line, popped[2], popped[1])
                        redis.call('ZADD', g.grouped, popped[2], popped[1])
                        return nil, refusal(g.fair, 'hash')
                    end
                    local after = turn_text(tonumber(turn) + 1 / limit.weight)
                    if redis.call('EXISTS', g.lines .. group) == 1
                            or redis.call('ZCARD', g.groups) > 1
                            or redis.call('EXISTS', g.held) == 1 then
                        -- its next turn (emptied, it keeps it until its turn comes round)
                        redis.call('ZADD', g.groups, after, group)
                    else  -- no group waits any more: the clock starts again from 0
                        redis.call('ZREM', g.groups, group)
                        redis.call('DEL', g.fair)
                    end
                    return {popped[1], popped[2], group, limit, turn}
                end
                group_forget(g, group)  -- nothing waits in it after all
            end
        end
        return nil, 'more'
    end

    -- put a task just taken by `group_take` back where it waited (`taken`), its group's turn
    -- as it was
    local function group_untake(g, taken)
        local id, score, group, turn = taken[1], taken[2], taken[3], taken[5]
        redis.call('ZADD', g.lines .. group, score, id)
        redis.call('ZADD', g.grouped, score, id)
        redis.call('HDEL', g.fair, group)
        redis.call('ZADD', g.groups, turn, group)
    end

    -- a task of `group` taken by `group_take` starts (attempt `attempt`): it holds a slot of
    -- its group, and counts in the windows of its group's limit and its queue's (`queue`,
    -- nil when the queue has no limit of its own); their types were checked by the take
    local function group_started(g, taken, attempt, queue, now)
        local id, group, limit = taken[1], taken[3], taken[4]
        redis.call('SADD', g.slots .. group, id)
        count_start(g.starts .. group, limit, id .. ':' .. attempt, now)
        if queue then count_start(g.queue_starts, queue, id .. ':' .. attempt, now) end
    end

    group_functions = {push = group_push, remove = group_remove, release = group_release,
        slot_free = slot_free, take = group_take, untake = group_untake,
        started = group_started, count_start = count_start, queue_closed = queue_closed,
        parse_limit = parse_limit}
    return group_functions
end
