-- Set or remove a limit of a queue (see _groups.lua), then let every group held back by a
-- limit look again at its next turn: a limit raised or removed applies at once.
-- KEYS[1] <prefix>:limits:<queue>, KEYS[2] <prefix>:held:<queue>,
-- KEYS[3] <prefix>:groups:<queue>, KEYS[4] <prefix>:fair:<queue> (the fair share's turns),
-- KEYS[5] <prefix>:leases:<queue>
-- ARGV[1] 'set' or 'remove', ARGV[2] whose limit: '' (the queue as a whole), '*' (the
-- default of its groups) or a group, ARGV[3] the limit as stored ('set'), ARGV[4] the keys
-- of the queue's groups (keys.KeySpace.group_layout), ARGV[5] key prefix of task hashes
-- Returns 1 when something changed, else 0.
local refused = refuse_misfit({{KEYS[1], 'hash'}, {KEYS[2], 'zset'}, {KEYS[3], 'zset'}})
if refused then return refused end
local g = groups_of(ARGV[4])
local changed
if ARGV[1] == 'set' then
    changed = redis.call('HGET', KEYS[1], ARGV[2]) ~= ARGV[3]
    redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
else
    changed = redis.call('HDEL', KEYS[1], ARGV[2]) == 1
end
-- a window of starts made longer: the windows it governs are kept that long from now on
-- (each is kept as long as its window when a start is counted; a key of another type
-- is left to the reserve step to report)
local function keep_window(key, ms)
    local left = redis.pcall('PTTL', key)
    if type(left) == 'number' and left >= 0 and left < ms then
        redis.call('PEXPIRE', key, ms)
    end
end
-- the groups the default governs that may have counted starts: waiting, held back or
-- running, without a limit of their own
local function defaulted_groups()
    local found, own = {}, {}  -- own: the groups whose own limit sets their window
    local stored = redis.call('HGETALL', KEYS[1])
    for j = 1, #stored, 2 do
        if groups().parse_limit(stored[j + 1]).starts then own[stored[j]] = true end
    end
    local function add(group)
        if group and not own[group] then found[group] = true end
    end
    for _, set in ipairs({KEYS[3], KEYS[2]}) do
        for _, group in ipairs(redis.call('ZRANGE', set, 0, -1)) do add(group) end
    end
    local running = redis.pcall('ZRANGE', KEYS[5], 0, -1)
    if not running.err then
        for _, id in ipairs(running) do
            local group = redis.pcall('HGET', ARGV[5] .. id, 'group')
            if type(group) == 'string' then add(group) end
        end
    end
    return found
end
local whose, window = ARGV[2], nil
if ARGV[1] == 'set' then
    window = groups().parse_limit(ARGV[3])
elseif whose ~= '' and whose ~= '*' then  -- a group's own limit removed: the default's
    window = groups().parse_limit(redis.call('HGET', KEYS[1], '*'))
end
if window and window.starts and window.per then
    local ms = math.ceil((window.per + 1) * 1000)
    if whose == '' then
        keep_window(g.queue_starts, ms)
    elseif whose ~= '*' then
        keep_window(g.starts .. whose, ms)
    else
        for group in pairs(defaulted_groups()) do keep_window(g.starts .. group, ms) end
    end
end
for _, group in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do groups().release(g, group) end
if changed then return 1 end
return 0
