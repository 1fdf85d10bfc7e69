-- Set or remove a limit of a queue (see _groups.lua), then let every group held back by a
-- limit look again at its next turn: a limit raised or removed applies at once.
-- KEYS[1] <prefix>:limits:<queue>, KEYS[2] <prefix>:held:<queue>,
-- KEYS[3] <prefix>:groups:<queue>, KEYS[4] <prefix>:fair:<queue> (the fair share's turns)
-- ARGV[1] 'set' or 'remove', ARGV[2] whose limit: '' (the queue as a whole), '*' (the
-- default of its groups) or a group, ARGV[3] the limit as stored ('set'), ARGV[4] the keys
-- of the queue's groups (keys.KeySpace.group_layout)
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
local limit = ARGV[1] == 'set' and groups().parse_limit(ARGV[3]) or {}
if limit.starts and limit.per then
    local ms = math.ceil((limit.per + 1) * 1000)
    if ARGV[2] == '' then
        keep_window(g.queue_starts, ms)
    elseif ARGV[2] ~= '*' then
        keep_window(g.starts .. ARGV[2], ms)
    else  -- the groups waiting or held back (a group with nothing waiting starts nothing)
        for _, set in ipairs({KEYS[3], KEYS[2]}) do
            for _, group in ipairs(redis.call('ZRANGE', set, 0, -1)) do
                keep_window(g.starts .. group, ms)
            end
        end
    end
end
for _, group in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do groups().release(g, group) end
if changed then return 1 end
return 0
