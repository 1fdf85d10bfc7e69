-- Blueque "Enqueue Scheduled Tasks": move the due scheduled tasks of a queue to pending.
-- KEYS[1] blueque_scheduled_tasks_<queue>
-- KEYS[2] blueque_pending_tasks_<queue>
-- KEYS[3] <prefix>:prioritized:<queue>
-- KEYS[4] <prefix>:utubes:<queue>, KEYS[5] <prefix>:utube_waiting:<queue>
-- ARGV[1] now, ARGV[2] key prefix of task hashes, ARGV[3] wake-up channel,
-- ARGV[4] most tasks to move (0: all), ARGV[5] name prefix of the utube lists,
-- ARGV[6] queue name
-- Task hash keys are the prefix plus an id read here: the ids are only known inside.
-- Each task joins the back of the line of its priority, or waits behind the task of its
-- utube key (see _line.lua).
-- Returns {the ids moved, in the order they were pushed; the ids removed from the schedule
-- without being pushed: their key holds no task hash (gone, or another type), or a task
-- that is not scheduled (a stray entry: a finished task never runs again)}.
-- A schedule or pending structure of another type refuses the step (BADKEY).
local now, prefix = ARGV[1], ARGV[2]
local limit = tonumber(ARGV[4])
local due
if limit > 0 then
    due = redis.pcall('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, limit)
else
    due = redis.pcall('ZRANGEBYSCORE', KEYS[1], '-inf', now)
end
-- nothing due: done in one command (the type checks are for the steps that write)
if type(due) == 'table' and not due.err and #due == 0 then return {{}, {}} end
local refused = refuse_misfit({{KEYS[1], 'zset'}, {KEYS[2], 'list'}, {KEYS[3], 'zset'},
    {KEYS[4], 'hash'}, {KEYS[5], 'zset'}})
if refused then return refused end
local u = utube_keys(KEYS[4], KEYS[5], ARGV[5], prefix, ARGV[6], KEYS[2], KEYS[3], ARGV[7])
local moved, dropped, woken = {}, {}, 0
for _, id in ipairs(due) do
    redis.call('ZREM', KEYS[1], id)
    local key = prefix .. id
    if redis.call('TYPE', key)['ok'] ~= 'hash'
            or redis.call('HGET', key, 'status') ~= 'scheduled' then
        dropped[#dropped + 1] = id
    else
        redis.call('HSET', key, 'status', 'pending', 'updated', now)
        if line_join(u, id, key, now, false) then woken = woken + 1 end
        moved[#moved + 1] = id
    end
end
if woken > 0 then
    redis.call('PUBLISH', ARGV[3], woken)
end
return {moved, dropped}
