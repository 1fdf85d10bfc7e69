-- Touch: the holder of a running task extends its lease by some seconds, beyond what the
-- heartbeat gives (a lease with no expiry stays so).
-- KEYS[1] blueque_task_<id>, KEYS[2] <prefix>:leases:<queue>, KEYS[3] <prefix>:stats:<queue>
-- ARGV[1] task id, ARGV[2] listener id, ARGV[3] attempt the caller holds ('': not
-- checked), ARGV[4] seconds to add
-- The lease is extended from its current end, or from the server's now when it ended.
-- Returns {1, new end ('+inf' for none)} when touched, {0, status, node, attempt} when
-- refused, {-1} when missing.
local refused = refuse_misfit({{KEYS[1], 'hash'}, {KEYS[2], 'zset'}, {KEYS[3], 'hash'}})
if refused then return refused end
refused = refuse_unless_held(KEYS[1], {reserved = true, started = true}, ARGV[2], ARGV[3])
if refused then return refused end
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local current = redis.call('ZSCORE', KEYS[2], ARGV[1])
redis.call('HINCRBY', KEYS[3], 'calls.touch', 1)
if current == 'inf' or current == '+inf' then return {1, '+inf'} end
local base = math.max(tonumber(current) or now, now)
local deadline = base + tonumber(ARGV[4])
redis.call('ZADD', KEYS[2], string.format('%.6f', deadline), ARGV[1])
return {1, string.format('%.6f', deadline)}
