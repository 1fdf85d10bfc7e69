-- Deep clean, one fix at a time, re-checked here so that a task changing between the
-- cleaner's read and its fix is never filed twice nor lost.
-- KEYS[1] blueque_task_<id>, KEYS[2] the structure to fix (list, sorted set or set)
-- ARGV[1] 'relist': file the task in KEYS[2] if its status is still ARGV[5] and it is
--         not there yet; 'unlist': remove the member if the task is gone or its status
--         is none of the space-separated ARGV[5]; 'reline': put a pending task back in
--         line by its priority (KEYS[2] the Blueque pending list, KEYS[3] the prioritized
--         sorted set) if it is still pending, in neither, and not waiting behind the task
--         of its utube key (KEYS[4], the utube-waiting set), nor in its group's line
--         (ARGV[6]: the keys of the queue's groups); 'unmap': remove the entry
--         of identifier ARGV[4] from the identifiers hash KEYS[2] if it still maps to
--         the task and the task no longer waits with that identifier
-- ARGV[2] kind of KEYS[2]: 'list', 'zset' or 'set'
-- ARGV[3] task id, ARGV[4] member (set) or score (zset) to use
-- Returns 1 when it changed something, else 0.
local action, kind, id, member, statuses = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
if action == 'unmap' then
    local refused = refuse_misfit({{KEYS[2], 'hash'}})
    if refused then return refused end
    if redis.call('HGET', KEYS[2], member) ~= id then return 0 end
    if redis.call('TYPE', KEYS[1])['ok'] == 'hash' then
        local fields = redis.call('HMGET', KEYS[1], 'status', 'identifier')
        if (fields[1] == 'pending' or fields[1] == 'scheduled') and fields[2] == member then
            return 0
        end
    end
    redis.call('HDEL', KEYS[2], member)
    return 1
end
if action == 'reline' then
    local refused = refuse_misfit({{KEYS[1], 'hash'}, {KEYS[2], 'list'}, {KEYS[3], 'zset'},
        {KEYS[4], 'zset'}})
    if refused then return refused end
    local g = groups_of(ARGV[6])
    if redis.call('HGET', KEYS[1], 'status') ~= 'pending' or redis.call('LPOS', KEYS[2], id)
            or redis.call('ZSCORE', KEYS[3], id) or redis.call('ZSCORE', KEYS[4], id)
            or redis.call('ZSCORE', g.grouped, id) then
        return 0
    end
    place({pending = KEYS[2], prioritized = KEYS[3], g = g}, id, KEYS[1], false)
    return 1
end
local refused = refuse_misfit({{KEYS[1], 'hash'}, {KEYS[2], kind}})
if refused then return refused end
local status = redis.call('HGET', KEYS[1], 'status')
local present
if kind == 'list' then
    present = redis.call('LPOS', KEYS[2], id)
elseif kind == 'zset' then
    present = redis.call('ZSCORE', KEYS[2], id)
else
    present = redis.call('SISMEMBER', KEYS[2], member) == 1 or nil
end
if action == 'relist' then
    if status ~= statuses or present then return 0 end
    if kind == 'list' then
        redis.call('LPUSH', KEYS[2], id)
    elseif kind == 'zset' then
        redis.call('ZADD', KEYS[2], member, id)
    else
        redis.call('SADD', KEYS[2], member)
    end
    return 1
end
if not present then return 0 end
if status then
    for allowed in string.gmatch(statuses, '%S+') do
        if allowed == status then return 0 end
    end
end
if kind == 'list' then
    redis.call('LREM', KEYS[2], 0, id)
elseif kind == 'zset' then
    redis.call('ZREM', KEYS[2], id)
else
    redis.call('SREM', KEYS[2], member)
end
return 1
