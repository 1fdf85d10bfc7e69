-- Deep clean, one fix at a time, re-checked here so that a task changing between the
-- cleaner's read and its fix is never filed twice nor lost.
-- KEYS[1] blueque_task_<id>, KEYS[2] the structure to fix (list, sorted set or set)
-- ARGV[1] 'relist': file the task in KEYS[2] if its status is still ARGV[5] and it is
--         not there yet; 'unlist': remove the member if the task is gone or its status
--         is none of the space-separated ARGV[5]
-- ARGV[2] kind of KEYS[2]: 'list', 'zset' or 'set'
-- ARGV[3] task id, ARGV[4] member (set) or score (zset) to use
-- Returns 1 when it changed something, else 0.
local action, kind, id, member, statuses = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
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
