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
for _, group in ipairs(redis.call('ZRANGE', KEYS[2], 0, -1)) do groups().release(g, group) end
if changed then return 1 end
return 0
