-- Blueque "Submission", for one task or many without options, in one atomic step: the
-- common case, kept as light as the protocol step (enqueue_options.lua makes tasks with
-- options; both write the same for a task without).
-- KEYS[1]  blueque_queues, KEYS[2] blueque_pending_tasks_<queue>,
-- KEYS[3]  <prefix>:queue:<queue> (its settings: the default ttl),
-- KEYS[4]  <prefix>:expiry:<queue>, KEYS[5] <prefix>:stats:<queue>
-- KEYS[6..] blueque_task_<id>, one per task, in the order of the tasks in ARGV
-- ARGV[1]  queue name, ARGV[2] now (float seconds), ARGV[3] wake-up channel of the queue,
-- then per task: id, parameters
-- A task expires when not started within its queue's ttl, if the queue has one.
-- Returns the number of tasks created (all of them). Refuses the whole call, writing
-- nothing, if a task id exists or a key it writes holds another type.
-- No type check runs before the writes (they would cost as much as the writes): the
-- writes that may meet a key of another type come first, and Redis refuses such a write
-- (WRONGTYPE) before changing anything; one refused undoes those before it, and only
-- then are the types asked, to name the key as the checks of _types.lua do.
local queue, now, channel = ARGV[1], ARGV[2], ARGV[3]
local count = #KEYS - 5
-- a queue settings hash of another type gives no default ttl (reads never abort)
local ttl = redis.pcall('HGET', KEYS[3], 'ttl')
ttl = type(ttl) == 'string' and tonumber(ttl) or nil
if ttl and not (ttl > 0 and ttl < math.huge) then ttl = nil end
-- a refusal: the first key this call writes that holds another type, named (as the
-- checks before a write would have named it), else `reply`
local function refused(reply)
    local writes = {{KEYS[2], 'list'}}
    if ttl then writes[2] = {KEYS[4], 'zset'} end
    return refuse_misfit(writes) or reply
end
for i = 1, count do
    if redis.call('EXISTS', KEYS[5 + i]) == 1 then
        return refused(redis.error_reply('TASKEXISTS ' .. ARGV[2 + 2 * i]))
    end
end
if count == 0 then  -- no write to be refused: refused as the writes would have been
    local refusal = refused(nil)
    if refusal then return refusal end
end

-- the ids of the tasks `first` to `last`, each after `score` if given: the arguments of
-- one command (one takes at most BATCH tasks: Lua's unpack has a limit)
local BATCH = 1000
local function ids(first, last, score)
    if first == last and not score then return ARGV[2 + 2 * first] end
    local items = {}
    for i = first, last do
        if score then items[#items + 1] = score end
        items[#items + 1] = ARGV[2 + 2 * i]
    end
    return unpack(items)
end
-- `command key <ids...>` for every task; only the first command may be refused (a key of
-- another type, a full server): then nothing was written, and its refusal is returned
local function write_ids(command, key, score)
    if count == 0 then return nil end
    local reply = redis.pcall(command, key, ids(1, math.min(count, BATCH), score))
    if type(reply) == 'table' and reply.err then return reply end
    for first = BATCH + 1, count, BATCH do
        redis.call(command, key, ids(first, math.min(count, first + BATCH - 1), score))
    end
    return nil
end

-- the writes that may be refused come first: the pending list, then the expiry set
local refusal = write_ids('LPUSH', KEYS[2])
if refusal then return refused(refusal) end
local limit = nil
if ttl then
    limit = string.format('%.6f', tonumber(now) + ttl)
    refusal = write_ids('ZADD', KEYS[4], limit)
    if refusal then
        redis.call('LTRIM', KEYS[2], count, -1)  -- the ids just pushed, taken back
        return refused(refusal)
    end
end
for i = 1, count do
    if limit then
        redis.call('HSET', KEYS[5 + i], 'status', 'pending', 'queue', queue,
            'parameters', ARGV[3 + 2 * i], 'created', now, 'updated', now, 'expires_at', limit)
    else
        redis.call('HSET', KEYS[5 + i], 'status', 'pending', 'queue', queue,
            'parameters', ARGV[3 + 2 * i], 'created', now, 'updated', now)
    end
end
-- a queue index of another type is left alone: the tasks are made all the same
redis.pcall('ZINCRBY', KEYS[1], 0, queue)
redis.call('PUBLISH', channel, count)
-- a counters hash of another type only loses the count
redis.pcall('HINCRBY', KEYS[5], 'calls.put', count)
return count
