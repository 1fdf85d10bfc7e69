-- Shared by the scripts acting for the holder of a task; prepended to them when loaded.
-- refuse_unless_held(key, statuses, listener, attempt) returns nil when the task at `key`
-- has one of `statuses` (a set), is held by `listener` and, unless `attempt` is '', is
-- in that attempt; else the reply to refuse with: {-1} when there is no such task,
-- {0, status, node, attempt} otherwise.
local function refuse_unless_held(key, statuses, listener, attempt)
    local held = redis.call('HMGET', key, 'status', 'node', 'attempt')
    local status = held[1]
    if not status then return {-1} end
    local node, current = held[2] or '', held[3] or ''
    if not statuses[status] or node ~= listener or (attempt ~= '' and current ~= attempt) then
        return {0, status, node, current}
    end
    return nil
end

-- let_go(task key, reserved list, started set, lease set, id, listener, stalled set, g):
-- the holder lets the task go: out of its reserved list, the started set, the lease set,
-- its group's slots (`g`: the keys of the queue's groups) and the stalled set, its holder
-- fields cleared (the caller then files it where it goes)
local function let_go(task, reserved, started, leases, id, listener, stalled, g)
    local held = redis.call('HMGET', task, 'pid', 'group')
    local pid = held[1] or ''
    redis.call('LREM', reserved, 1, id)
    redis.call('SREM', started, listener .. ' ' .. pid .. ' ' .. id)
    redis.call('ZREM', leases, id)
    if held[2] then groups().slot_free(g, held[2], id) end
    unflag_stalled(task, stalled, id)
    redis.call('HDEL', task, 'node', 'pid', 'pstart', 'alive_until')
end
