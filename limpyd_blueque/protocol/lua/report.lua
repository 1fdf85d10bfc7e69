-- What a running task reports about itself: its progress, its checkpoint, or both, fenced
-- by its attempt (a superseded attempt writes nothing); and whether its cancel was asked.
-- KEYS[1] blueque_task_<id>, KEYS[2] <prefix>:stalled:<queue>
-- ARGV[1] task id, ARGV[2] listener id holding it, ARGV[3] attempt ('': not checked),
-- ARGV[4] progress (JSON, '': none), ARGV[5] checkpoint (JSON, '': none)
-- Progress that moves clears the task's stalled flag.
-- Returns {1, cancel_requested ('' when not asked)} when written, {0, status, node,
-- attempt} when refused, {-1} when missing.
local refused = refuse_misfit({{KEYS[1], 'hash'}})  -- KEYS[2]: an index, passed over
if refused then return refused end
refused = refuse_unless_held(KEYS[1], {reserved = true, started = true}, ARGV[2], ARGV[3])
if refused then return refused end
if ARGV[4] ~= '' then
    redis.call('HSET', KEYS[1], 'progress', ARGV[4])
    if redis.call('HDEL', KEYS[1], 'stalled_at') == 1 then redis.pcall('ZREM', KEYS[2], ARGV[1]) end
end
if ARGV[5] ~= '' then redis.call('HSET', KEYS[1], 'checkpoint', ARGV[5]) end
return {1, redis.call('HGET', KEYS[1], 'cancel_requested') or ''}
