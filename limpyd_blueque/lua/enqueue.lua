-- Blueque "Submission" and "Schedule Task", for one task or many, in one atomic step, with
-- this library's options: priority, eta, front of the line, identifier, extra fields.
-- KEYS[1]  blueque_queues
-- KEYS[2]  blueque_pending_tasks_<queue>
-- KEYS[3]  <prefix>:prioritized:<queue>
-- KEYS[4]  blueque_scheduled_tasks_<queue>
-- KEYS[5]  <prefix>:identifiers:<queue>
-- KEYS[6]  <prefix>:queue:<queue> (its settings: the default ttl)
-- KEYS[7]  <prefix>:expiry:<queue>
-- KEYS[8]  <prefix>:stats:<queue>
-- KEYS[9]  <prefix>:utubes:<queue>, KEYS[10] <prefix>:utube_waiting:<queue>
-- KEYS[11..] blueque_task_<id>, one per task, in the order of the tasks in ARGV
-- ARGV[1]  queue name, ARGV[2] now (float seconds), ARGV[3] wake-up channel of the queue,
-- ARGV[4]  key prefix of task hashes (to read the task an identifier maps to)
-- ARGV[5]  name prefix of the utube lists of the queue
-- then per task: id, parameters, priority (a whole number), eta ('': pending now),
--   front ('1': at the front of its priority), identifier ('': none), ttl in seconds
--   ('': the queue's, if any), utube key ('': none), the number N of extra fields, then N
--   pairs: field, value
-- A pending task with a utube key joins the line only when no other task of that key is
-- in line or held; else it waits behind, in order (see _line.lua).
-- A task with a ttl (its own, else its queue's) expires when not started within it of
-- being enqueued, or of its eta: its `expires_at` field, and an entry in the expiry set.
-- A task whose identifier maps to a waiting task of the queue is not created: that task
-- is returned instead, its priority raised to the new one if higher, and moved to the
-- front of its priority if asked (when pending).
-- Returns, per task: the id of its task, 1 when created (0: an existing one). Refuses the
-- whole call, writing nothing, if a task id exists or a key holds another type.
local queue, now, channel, prefix = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local refused = refuse_misfit({{KEYS[2], 'list'}, {KEYS[3], 'zset'}, {KEYS[4], 'zset'},
    {KEYS[5], 'hash'}, {KEYS[6], 'hash'}, {KEYS[7], 'zset'}, {KEYS[8], 'hash'},
    {KEYS[9], 'hash'}, {KEYS[10], 'zset'}})
if refused then return refused end
local default_ttl = usable(redis.call('HGET', KEYS[6], 'ttl'))
local u = utube_keys(KEYS[9], KEYS[10], ARGV[5], prefix, queue, KEYS[2], KEYS[3])
local tasks, cursor = {}, 6
for i = 1, #KEYS - 10 do
    local task = {key = KEYS[10 + i], id = ARGV[cursor], parameters = ARGV[cursor + 1],
        priority = tonumber(ARGV[cursor + 2]), eta = ARGV[cursor + 3],
        front = ARGV[cursor + 4] == '1', identifier = ARGV[cursor + 5],
        ttl = tonumber(ARGV[cursor + 6]) or default_ttl, utube = ARGV[cursor + 7], extra = {}}
    local count = tonumber(ARGV[cursor + 8])
    for j = 1, 2 * count do task.extra[j] = ARGV[cursor + 8 + j] end
    cursor = cursor + 9 + 2 * count
    if redis.call('EXISTS', task.key) == 1 then
        return redis.error_reply('TASKEXISTS ' .. task.id)
    end
    tasks[i] = task
end

-- an identifier of a waiting task: that task, its priority raised, maybe moved ahead
local function join(task, existing)
    local key = prefix .. existing
    local status = redis.call('HGET', key, 'status')
    local priority = priority_of(key)
    local moved = task.priority > priority
    if moved then
        redis.call('HSET', key, 'priority', task.priority, 'updated', now)
        priority = task.priority
    end
    -- only a task in line moves (one waiting behind its utube key keeps its place there)
    if status == 'pending' and (moved or task.front)
            and line_remove(KEYS[2], KEYS[3], existing) then
        line_push(KEYS[2], KEYS[3], existing, priority, task.front)
        return 1
    end
    return 0
end

local out, woken, created = {}, 0, 0
for _, task in ipairs(tasks) do
    local existing = nil
    if task.identifier ~= '' then
        existing = identified(KEYS[5], prefix, task.identifier, queue)
    end
    if existing then
        woken = woken + join(task, existing)
        out[#out + 1] = existing
        out[#out + 1] = 0
    else
        local status = 'pending'
        if task.eta ~= '' then status = 'scheduled' end
        redis.call('HSET', task.key, 'status', status, 'queue', queue,
            'parameters', task.parameters, 'created', now, 'updated', now)
        if task.eta ~= '' then redis.call('HSET', task.key, 'eta', task.eta) end
        if task.priority ~= 0 then redis.call('HSET', task.key, 'priority', task.priority) end
        if task.identifier ~= '' then
            redis.call('HSET', task.key, 'identifier', task.identifier)
            redis.call('HSET', KEYS[5], task.identifier, task.id)
        end
        if #task.extra > 0 then redis.call('HSET', task.key, unpack(task.extra)) end
        if task.utube ~= '' then redis.call('HSET', task.key, 'utube', task.utube) end
        if task.ttl then
            local limit = string.format('%.6f', (tonumber(task.eta) or tonumber(now)) + task.ttl)
            redis.call('HSET', task.key, 'expires_at', limit)
            redis.call('ZADD', KEYS[7], limit, task.id)
        end
        created = created + 1
        if task.eta ~= '' then
            redis.call('ZADD', KEYS[4], task.eta, task.id)
        elseif task.utube ~= '' then
            if utube_join(u, task.id, task.key, task.utube, now, task.front) then
                woken = woken + 1
            end
        else
            line_push(KEYS[2], KEYS[3], task.id, task.priority, task.front)
            woken = woken + 1
        end
        out[#out + 1] = task.id
        out[#out + 1] = 1
    end
end
-- a queue index of another type is left alone: the tasks are made all the same
if not misfit({{KEYS[1], 'zset'}}) then redis.call('ZINCRBY', KEYS[1], 0, queue) end
if woken > 0 then redis.call('PUBLISH', channel, woken) end
if created > 0 then redis.call('HINCRBY', KEYS[8], 'calls.put', created) end
return out
