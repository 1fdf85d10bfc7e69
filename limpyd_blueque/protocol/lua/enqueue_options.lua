-- Blueque "Submission" and "Schedule Task", for one task or many, in one atomic step, with
-- this library's options: priority, eta, front of the line, identifier, ttl, utube, group,
-- extra fields (tasks without any are made by enqueue.lua, lighter).
-- KEYS[1]  blueque_queues, KEYS[2] blueque_pending_tasks_<queue>,
-- KEYS[3]  <prefix>:queue:<queue> (its settings: the default ttl),
-- KEYS[4]  <prefix>:expiry:<queue>, KEYS[5] <prefix>:stats:<queue>
-- then, when ARGV[4] is '1' (some task has options): <prefix>:prioritized:<queue>,
--   blueque_scheduled_tasks_<queue>, <prefix>:identifiers:<queue>,
--   <prefix>:utubes:<queue>, <prefix>:utube_waiting:<queue>
-- then blueque_task_<id>, one per task, in the order of the tasks in ARGV
-- ARGV[1]  queue name, ARGV[2] now (float seconds), ARGV[3] wake-up channel of the queue,
-- ARGV[4]  '1' when the option keys are given, ARGV[5] key prefix of task hashes (to read
-- the task an identifier maps to), ARGV[6] name prefix of the utube lists of the queue,
-- ARGV[7] the keys of the queue's groups (keys.KeySpace.group_layout), ARGV[8] the keys of
-- its dependencies (keys.KeySpace.dependency_layout)
-- then per task: id, parameters, options: '' for none, else a JSON object with any of
--   p (priority, a whole number), e (eta; none: pending now), f (1: at the front of its
--   priority), i (identifier), t (ttl in seconds; none: the queue's, if any), u (utube
--   key), g (group: the task waits in its group's line, see _groups.lua), x (extra
--   fields: a flat list of field, value), a (the ids of the tasks it waits for: the task
--   is made `waiting`, in the queue's waiting set and in no line, with its `after` set;
--   released by release.lua, which then applies its other options, kept in `deferred`),
--   w (its workflow: it then also waits for its workflow's submission, and its end is
--   followed, see models/dependencies.py)
-- A pending task with a utube key joins the line only when no other task of that key is
-- in line or held; else it waits behind, in order (see _line.lua).
-- A task with a ttl (its own, else its queue's) expires when not started within it of
-- being enqueued, or of its eta: its `expires_at` field, and an entry in the expiry set.
-- A task whose identifier maps to a waiting task of the queue is not created: that task
-- is returned instead, its priority raised to the new one if higher, and moved to the
-- front of its priority if asked (when pending).
-- Returns, per task: the id of its task, 1 when created (0: an existing one). Refuses the
-- whole call, writing nothing, if a task id exists or a key holds another type.
local queue, now, channel, prefix = ARGV[1], ARGV[2], ARGV[3], ARGV[5]
local k = {queues = KEYS[1], pending = KEYS[2], settings = KEYS[3], expiry = KEYS[4],
    stats = KEYS[5]}
local fixed = 5
if ARGV[4] == '1' then
    k.prioritized, k.scheduled, k.identifiers, k.utubes, k.waiting =
        KEYS[6], KEYS[7], KEYS[8], KEYS[9], KEYS[10]
    fixed = 10
end
-- a queue settings hash of another type gives no default ttl (reads never abort)
local setting = redis.pcall('HGET', k.settings, 'ttl')
local default_ttl = nil
if type(setting) ~= 'table' then default_ttl = usable(setting) end
local u = utube_keys(k.utubes, k.waiting, ARGV[6], prefix, queue, k.pending, k.prioritized,
    ARGV[7])
local first = 8  -- the ARGV before the tasks'
local dependencies = nil  -- the keys of the queue's dependencies, read when first needed
local function deps()
    if not dependencies then
        local layout = cjson.decode(ARGV[8])
        dependencies = {waiting = layout[1], after = layout[2], ended = layout[3]}
    end
    return dependencies
end
local count = #KEYS - fixed
-- every check before the first write: no task id exists, the options are read, and the
-- keys this call writes hold their type (only those: for a task without options the
-- type checks would cost as much as its writes)
local options = {}  -- the options of the tasks that have some, by index
local needed = {pending = true, expiry = default_ttl ~= nil}
for i = 1, count do
    local at = first + 3 * (i - 1)
    if redis.call('EXISTS', KEYS[fixed + i]) == 1 then
        return redis.error_reply('TASKEXISTS ' .. ARGV[at + 1])
    end
    if ARGV[at + 3] ~= '' then
        local o = cjson.decode(ARGV[at + 3])
        local task = {priority = tonumber(o.p) or 0, eta = o.e or '', front = o.f == 1,
            identifier = o.i or '', ttl = tonumber(o.t) or default_ttl, utube = o.u or '',
            group = o.g or '', extra = o.x or {}, after = o.a, workflow = o.w or '',
            packed = ARGV[at + 3]}
        options[i] = task
        if task.after then
            needed.waiting = true
            needed[deps().after .. ARGV[at + 1]] = 'set'
        end
        if task.priority ~= 0 then needed.prioritized = true end
        if task.eta ~= '' then needed.scheduled = true end
        if task.identifier ~= '' then needed.identifiers = true end
        if task.ttl then needed.expiry = true end
        if task.utube ~= '' then needed.utubes, needed.waiting = true, true end
        if task.group ~= '' then
            needed.grouped, needed.groups = true, true
            needed[u.g.lines .. task.group] = 'zset'
        end
    end
end
local kinds = {pending = 'list', prioritized = 'zset', scheduled = 'zset',
    identifiers = 'hash', expiry = 'zset', utubes = 'hash', waiting = 'zset'}
k.grouped, k.groups = u.g.grouped, u.g.groups
kinds.grouped, kinds.groups = 'zset', 'zset'
local writes = {}
for name, kind in pairs(kinds) do
    if needed[name] then writes[#writes + 1] = {k[name], kind} end
end
for name, kind in pairs(needed) do  -- the lines of the groups written
    if kind == 'zset' or kind == 'set' then writes[#writes + 1] = {name, kind} end
end
if needed.waiting then writes[#writes + 1] = {deps().waiting, 'zset'} end
local refused = refuse_misfit(writes)
if refused then return refused end

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
    if status == 'pending' and (moved or task.front) and line_remove(u, existing, key) then
        line_put(u, existing, key, priority, task.front)
        return 1
    end
    return 0
end

local function expires(key, id, start, ttl)
    local limit = string.format('%.6f', tonumber(start) + ttl)
    redis.call('HSET', key, 'expires_at', limit)
    redis.call('ZADD', k.expiry, limit, id)
end

-- a task with options: created (pending, scheduled or behind its utube key), or joined
-- to the waiting task of its identifier; returns its id, 1 if created, 1 if woken
local function put(key, id, parameters, task)
    local existing = nil
    if task.identifier ~= '' then
        existing = identified(k.identifiers, prefix, task.identifier, queue)
    end
    if existing then return existing, 0, join(task, existing) end
    local status = 'pending'
    if task.eta ~= '' then status = 'scheduled' end
    if task.after then status = 'waiting' end
    redis.call('HSET', key, 'status', status, 'queue', queue, 'parameters', parameters,
        'created', now, 'updated', now)
    if task.eta ~= '' then redis.call('HSET', key, 'eta', task.eta) end
    if task.priority ~= 0 then redis.call('HSET', key, 'priority', task.priority) end
    if task.identifier ~= '' then
        redis.call('HSET', key, 'identifier', task.identifier)
        redis.call('HSET', k.identifiers, task.identifier, id)
    end
    if #task.extra > 0 then redis.call('HSET', key, unpack(task.extra)) end
    if task.utube ~= '' then redis.call('HSET', key, 'utube', task.utube) end
    if task.group ~= '' then redis.call('HSET', key, 'group', task.group) end
    if task.after then  -- it waits: its other options apply when it is released
        local d = deps()
        redis.call('HSET', key, 'deferred', task.packed)
        redis.call('ZADD', d.waiting, now, id)
        if #task.after > 0 then
            for from = 1, #task.after, 1000 do  -- (Lua's unpack has a limit)
                redis.call('SADD', d.after .. id,
                    unpack(task.after, from, math.min(#task.after, from + 999)))
            end
            redis.call('HSET', key, 'parents', cjson.encode(task.after))
        end
        if task.workflow ~= '' then
            redis.call('HSET', key, 'workflow', task.workflow, 'follow', d.ended)
        end
        return id, 1, 0
    end
    if task.ttl then expires(key, id, task.eta ~= '' and task.eta or now, task.ttl) end
    if task.eta ~= '' then
        redis.call('ZADD', k.scheduled, task.eta, id)
        return id, 1, 0
    end
    if task.utube ~= '' then
        if utube_join(u, id, key, task.utube, now, task.front) then return id, 1, 1 end
        return id, 1, 0
    end
    if task.group ~= '' then  -- the keys of its group were found of their type above
        groups().push(u.g, id, task.group, task.priority, task.front)
    else
        line_push(k.pending, k.prioritized, id, task.priority, task.front)
    end
    return id, 1, 1
end

local out, woken, created = {}, 0, 0
for i = 1, count do
    local at = first + 3 * (i - 1)
    local key, id, parameters = KEYS[fixed + i], ARGV[at + 1], ARGV[at + 2]
    local made, woke = 1, 1
    if options[i] then
        id, made, woke = put(key, id, parameters, options[i])
    else  -- the common case: a plain pending task, as every Blueque client makes it
        redis.call('HSET', key, 'status', 'pending', 'queue', queue,
            'parameters', parameters, 'created', now, 'updated', now)
        if default_ttl then expires(key, id, now, default_ttl) end
        redis.call('LPUSH', k.pending, id)
    end
    created, woken = created + made, woken + woke
    out[#out + 1] = id
    out[#out + 1] = made
end
-- a queue index of another type is left alone: the tasks are made all the same
if not misfit({{k.queues, 'zset'}}) then redis.call('ZINCRBY', k.queues, 0, queue) end
if woken > 0 then redis.call('PUBLISH', channel, woken) end
-- a counters hash of another type only loses the count
if created > 0 then redis.pcall('HINCRBY', k.stats, 'calls.put', created) end
return out
