-- Bury a task its holder gives up on: status 'buried', out of line until a kick puts it
-- back; not a failure, not retried.
-- KEYS[1] blueque_task_<id>, KEYS[2] blueque_reserved_tasks_<queue>_<listener>,
-- KEYS[3] blueque_started_tasks_<queue>, KEYS[4] <prefix>:leases:<queue>,
-- KEYS[5] <prefix>:buried:<queue>, KEYS[6] <prefix>:stats:<queue>,
-- KEYS[7] <prefix>:utubes:<queue>, KEYS[8] <prefix>:utube_waiting:<queue>,
-- KEYS[9] blueque_pending_tasks_<queue>, KEYS[10] <prefix>:prioritized:<queue>,
-- KEYS[11] <prefix>:stalled:<queue>, KEYS[12] <prefix>:canceled:<queue>,
-- KEYS[13] <prefix>:queue:<queue> (settings), KEYS[14] <prefix>:retention:<queue>,
-- KEYS[15] <prefix>:stats:<queue>:m:<minute>
-- ARGV[1] task id, ARGV[2] listener id, ARGV[3] attempt the caller holds ('': not
-- checked), ARGV[4] now, ARGV[5] why ('': nothing recorded in the error field),
-- ARGV[6] name prefix of the utube lists, ARGV[7] key prefix of task hashes, ARGV[8] queue
-- name, ARGV[9] wake-up channel, ARGV[10] default result ttl, ARGV[11] default failure ttl
-- A task whose cancel was asked while it ran is filed as canceled instead.
-- A buried task with a utube key hands it to the next task of that key.
-- Returns {1} when buried, {2} when filed as canceled, {0, status, node, attempt} when
-- refused, {-1} when missing.
local refused = refuse_misfit({{KEYS[1], 'hash'}, {KEYS[2], 'list'}, {KEYS[3], 'set'},
    {KEYS[4], 'zset'}, {KEYS[5], 'list'}, {KEYS[6], 'hash'}, {KEYS[7], 'hash'},
    {KEYS[8], 'zset'}, {KEYS[9], 'list'}, {KEYS[10], 'zset'}, {KEYS[12], 'list'}})
-- KEYS[11], KEYS[13] to KEYS[15]: indexes beside the task, see _finished.lua
if refused then return refused end
refused = refuse_unless_held(KEYS[1], {reserved = true, started = true}, ARGV[2], ARGV[3])
if refused then return refused end
local id = ARGV[1]
local u = utube_keys(KEYS[7], KEYS[8], ARGV[6], ARGV[7], ARGV[8], KEYS[9], KEYS[10], ARGV[12])
let_go(KEYS[1], KEYS[2], KEYS[3], KEYS[4], id, ARGV[2], KEYS[11], u.g)
if ARGV[5] ~= '' then redis.call('HSET', KEYS[1], 'error', ARGV[5]) end
local reply = {1}
if canceling(KEYS[1]) then
    file_canceled(KEYS[1], id, KEYS[12], KEYS[6], ARGV[4], {retention = KEYS[14],
        settings = KEYS[13], throughput = KEYS[15], stats = KEYS[6], result_ttl = ARGV[10],
        failure_ttl = ARGV[11]})
    reply = {2}
else
    redis.call('HSET', KEYS[1], 'status', 'buried', 'updated', ARGV[4])
    redis.call('LPUSH', KEYS[5], id)
    redis.call('HINCRBY', KEYS[6], 'calls.bury', 1)
end
if utube_leave(u, id, KEYS[1]) then redis.call('PUBLISH', ARGV[9], 1) end
return reply
