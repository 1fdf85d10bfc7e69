-- Collection filtering: gather into a temporary set the ids of a queue's tasks that
-- have a given status, reading the Blueque structures that hold them and checking
-- each id against the status in its hash (the hash is the truth).
-- KEYS[1] the temporary set to fill (it expires after ARGV[2] seconds)
-- KEYS[2..] source keys, one per (queue, status) pair
-- ARGV[1] key prefix of task hashes, ARGV[2] expiry of the temporary set
-- ARGV[2 + i] '<kind> <status>' for source i; kind is list, zset or started
--   (started: members are '<listener> <pid> <id>', the id is the last word)
-- Returns the size of the temporary set.
local prefix = ARGV[1]
local refused = refuse_misfit({{KEYS[1], 'set'}})
if refused then return refused end
for i = 2, #KEYS do
    local kind, status = string.match(ARGV[1 + i], '^(%S+) (%S+)$')
    local members = {}
    local expected = ({list = 'list', zset = 'zset', started = 'set'})[kind]
    if misfit({{KEYS[i], expected}}) then
        members = {}  -- a source of another type holds no task: passed over
    elseif kind == 'list' then
        members = redis.call('LRANGE', KEYS[i], 0, -1)
    elseif kind == 'zset' then
        members = redis.call('ZRANGE', KEYS[i], 0, -1)
    else
        members = redis.call('SMEMBERS', KEYS[i])
    end
    for _, member in ipairs(members) do
        local id = member
        if kind == 'started' then id = string.match(member, '(%S+)$') end
        if id and redis.call('TYPE', prefix .. id)['ok'] == 'hash'
                and redis.call('HGET', prefix .. id, 'status') == status then
            redis.call('SADD', KEYS[1], id)
        end
    end
end
redis.call('EXPIRE', KEYS[1], ARGV[2])
return redis.call('SCARD', KEYS[1])
