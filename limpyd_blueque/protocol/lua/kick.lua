-- Kick: put up to a number of buried tasks back in line, oldest first.
-- KEYS[1] <prefix>:buried:<queue>, KEYS[2] blueque_pending_tasks_<queue>,
-- KEYS[3] <prefix>:prioritized:<queue>, KEYS[4] <prefix>:identifiers:<queue>,
-- KEYS[5] <prefix>:stats:<queue>, KEYS[6] <prefix>:utubes:<queue>,
-- KEYS[7] <prefix>:utube_waiting:<queue>
-- ARGV[1] most tasks to kick, ARGV[2] now, ARGV[3] wake-up channel, ARGV[4] key prefix of
-- task hashes, ARGV[5] queue name, ARGV[6] name prefix of the utube lists
-- An entry whose task is not buried in this queue is dropped. Each kicked task joins the
-- back of its priority (or waits behind the task of its utube key), pending, its attempts
-- so far no longer counted.
-- Returns the ids kicked.
local refused = refuse_misfit({{KEYS[1], 'list'}, {KEYS[2], 'list'}, {KEYS[3], 'zset'},
    {KEYS[4], 'hash'}, {KEYS[5], 'hash'}, {KEYS[6], 'hash'}, {KEYS[7], 'zset'}})
if refused then return refused end
local u = utube_keys(KEYS[6], KEYS[7], ARGV[6], ARGV[4], ARGV[5], KEYS[2], KEYS[3], ARGV[7])
local out = {}
while #out < tonumber(ARGV[1]) do
    local id = redis.call('RPOP', KEYS[1])
    if not id then break end
    local key = ARGV[4] .. id
    if redis.call('TYPE', key)['ok'] == 'hash'
            and redis.call('HGET', key, 'status') == 'buried'
            and redis.call('HGET', key, 'queue') == ARGV[5] then
        redis.call('HSET', key, 'status', 'pending', 'updated', ARGV[2], 'uncounted',
            redis.call('HGET', key, 'attempt') or 0)
        line_join(u, id, key, ARGV[2], false)
        identifier_claim(KEYS[4], ARGV[4], key, id, ARGV[5])
        out[#out + 1] = id
    end
end
if #out > 0 then
    redis.call('HINCRBY', KEYS[5], 'calls.kick', #out)
    redis.call('PUBLISH', ARGV[3], #out)
end
return out
