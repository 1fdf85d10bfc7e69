-- Bury a task its holder gives up on: status 'buried', out of line until a kick puts it
-- back; not a failure, not retried.
-- KEYS[1] blueque_task_<id>, KEYS[2] blueque_reserved_tasks_<queue>_<listener>,
-- KEYS[3] blueque_started_tasks_<queue>, KEYS[4] <prefix>:leases:<queue>,
-- KEYS[5] <prefix>:buried:<queue>, KEYS[6] <prefix>:stats:<queue>,
-- KEYS[7] <prefix>:utubes:<queue>, KEYS[8] <prefix>:utube_waiting:<queue>,
-- KEYS[9] blueque_pending_tasks_<queue>, KEYS[10] <prefix>:prioritized:<queue>
-- ARGV[1] task id, ARGV[2] listener id, ARGV[3] attempt the caller holds ('': not
-- checked), ARGV[4] now, ARGV[5] why ('': nothing recorded in the error field),
-- ARGV[6] name prefix of the utube lists, ARGV[7] key prefix of task hashes, ARGV[8] queue
-- name, ARGV[9] wake-up channel
-- A buried task with a utube key hands it to the next task of that key.
-- Returns {1} when buried, {0, status, node, attempt} when refused, {-1} when missing.
local refused = refuse_misfit({{KEYS[1], 'hash'}, {KEYS[2], 'list'}, {KEYS[3], 'set'},
    {KEYS[4], 'zset'}, {KEYS[5], 'list'}, {KEYS[6], 'hash'}, {KEYS[7], 'hash'},
    {KEYS[8], 'zset'}, {KEYS[9], 'list'}, {KEYS[10], 'zset'}})
if refused then return refused end
refused = refuse_unless_held(KEYS[1], {reserved = true, started = true}, ARGV[2], ARGV[3])
if refused then return refused end
local id = ARGV[1]
let_go(KEYS[1], KEYS[2], KEYS[3], KEYS[4], id, ARGV[2])
redis.call('HSET', KEYS[1], 'status', 'buried', 'updated', ARGV[4])
if ARGV[5] ~= '' then redis.call('HSET', KEYS[1], 'error', ARGV[5]) end
redis.call('LPUSH', KEYS[5], id)
redis.call('HINCRBY', KEYS[6], 'calls.bury', 1)
local u = utube_keys(KEYS[7], KEYS[8], ARGV[6], ARGV[7], ARGV[8], KEYS[9], KEYS[10])
if utube_leave(u, id, KEYS[1]) then redis.call('PUBLISH', ARGV[9], 1) end
return {1}
