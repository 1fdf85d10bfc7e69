-- Expire the waiting tasks of a queue whose ttl ran out (by the server's clock): each
-- leaves every waiting structure, status 'expired', filed in the expired list.
-- KEYS[1] <prefix>:expiry:<queue>, KEYS[2] blueque_pending_tasks_<queue>,
-- KEYS[3] <prefix>:prioritized:<queue>, KEYS[4] blueque_scheduled_tasks_<queue>,
-- KEYS[5] <prefix>:identifiers:<queue>, KEYS[6] <prefix>:expired:<queue>,
-- KEYS[7] <prefix>:stats:<queue>, KEYS[8] <prefix>:utubes:<queue>,
-- KEYS[9] <prefix>:utube_waiting:<queue>, KEYS[10] <prefix>:retention:<queue>,
-- KEYS[11] <prefix>:queue:<queue> (settings)
-- ARGV[1] now (for the `updated` field), ARGV[2] key prefix of task hashes, ARGV[3] most
-- tasks to expire, ARGV[4] name prefix of the utube lists, ARGV[5] queue name, ARGV[6]
-- wake-up channel (a task of a utube key may join the line when the key's holder expires),
-- ARGV[7] default failure ttl (see _finished.lua)
-- An entry whose task no longer waits (it ran, or is gone) is only removed.
-- Returns the ids expired.
local clock = redis.call('TIME')
local server_now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local due = redis.pcall('ZRANGEBYSCORE', KEYS[1], '-inf', string.format('%.6f', server_now),
    'LIMIT', 0, tonumber(ARGV[3]))
-- nothing due: done, in two commands (the type checks are for the steps that write)
if type(due) == 'table' and not due.err and #due == 0 then return {} end
local refused = refuse_misfit({{KEYS[1], 'zset'}, {KEYS[2], 'list'}, {KEYS[3], 'zset'},
    {KEYS[4], 'zset'}, {KEYS[5], 'hash'}, {KEYS[6], 'list'}, {KEYS[7], 'hash'},
    {KEYS[8], 'hash'}, {KEYS[9], 'zset'}})  -- KEYS[10], KEYS[11]: see _finished.lua
if refused then return refused end
local k = {expiry = KEYS[1], pending = KEYS[2], prioritized = KEYS[3], scheduled = KEYS[4],
    identifiers = KEYS[5], expired = KEYS[6], stats = KEYS[7], retention = KEYS[10],
    settings = KEYS[11], failure_ttl = ARGV[7],
    u = utube_keys(KEYS[8], KEYS[9], ARGV[4], ARGV[2], ARGV[5], KEYS[2], KEYS[3], ARGV[8])}
local out, woken = {}, 0
for _, id in ipairs(due) do
    local key = ARGV[2] .. id
    local status = nil
    if redis.call('TYPE', key)['ok'] == 'hash' then status = redis.call('HGET', key, 'status') end
    if (status == 'pending' or status == 'scheduled') and is_expired(key, server_now) then
        if expire_task(k, key, id, ARGV[1], true) then woken = woken + 1 end
        out[#out + 1] = id
    else
        redis.call('ZREM', k.expiry, id)
    end
end
if woken > 0 then redis.call('PUBLISH', ARGV[6], woken) end
return out
