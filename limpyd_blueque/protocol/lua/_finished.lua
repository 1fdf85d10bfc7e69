-- Shared by the scripts that file a task as finished (complete, failed, canceled,
-- expired); prepended to them when loaded.
-- retention_ttl(task, settings, name, default, own, queue_ttl): the task's own
-- `result_ttl` or `failure_ttl` (`name`; `own` when the caller read it already, false when
-- unset), else its queue's setting (`queue_ttl` when the caller read it already), else
-- the caller's default; -1 keeps the task forever, and a value that is neither -1 nor a
-- finite number at least 0 counts as unset.
local function retention_ttl(task, settings, name, default, own, queue_ttl)
    if own == nil then own = redis.call('HGET', task, name) end
    local sources = {own, default}
    if queue_ttl == nil and settings then queue_ttl = redis.pcall('HGET', settings, name) end
    if queue_ttl and type(queue_ttl) ~= 'table' then table.insert(sources, 2, queue_ttl) end
    for _, text in ipairs(sources) do
        local value = tonumber(text)
        if value and (value == -1 or (value >= 0 and value < math.huge)) then return value end
    end
    return -1
end

-- the ended list of the queue whose retention set is `retention`: the same key with
-- `ended` for `retention` (keys.KeySpace.ended; a task's `follow` field must name it, so
-- that a field another client wrote never makes a step write elsewhere)
local function ended_of(retention)
    local key = string.gsub(retention, ':retention:', ':ended:', 1)
    return key
end

-- retain(r, task, id, status, now): give a finished task its deletion time in the
-- retention set `r.retention` (nothing for a task kept forever), and count it in the
-- minute's throughput hash `r.throughput` and in the queue's counters `r.stats`
-- (`finished.<status>`, never reset), each when given. `r.settings` is the queue's
-- settings hash (or nil), `r.result_ttl` and `r.failure_ttl` the caller's defaults,
-- `r.own_ttl` the task's own ttl field of that status when the caller read it already,
-- `r.queue_ttl` its queue's when the caller knows it.
-- A task others wait for, or a node of a workflow, has a `follow` field: the list of
-- its queue's ended tasks, where its id is pushed for its followers to be told (see
-- models/dependencies.py); a node of a workflow (its `workflow` field) is kept until its
-- workflow is done, which then files it in the retention set. `r.follow` and
-- `r.workflow` when the caller read them already (false: unset). Returns true when the
-- task was pushed for its followers.
-- These are indexes beside the task, not the task: a key of another type there is passed
-- over (redis.pcall), never a reason to refuse the step, so the callers need not check
-- their types first.
local function retain(r, task, id, status, now)
    local waited, follow, workflow = r.waited, r.follow, r.workflow
    if waited == nil then
        local got = redis.pcall('HMGET', task, 'waited', 'follow', 'workflow')
        if type(got) == 'table' and not got.err then
            waited, follow, workflow = got[1], got[2], got[3]
        end
    end
    local name, default = 'failure_ttl', r.failure_ttl
    if status == 'complete' then name, default = 'result_ttl', r.result_ttl end
    local ttl = retention_ttl(task, r.settings, name, default, r.own_ttl, r.queue_ttl)
    if type(workflow) == 'string' then
        redis.pcall('ZREM', r.retention, id)  -- kept until its workflow is done
    elseif ttl >= 0 then
        redis.pcall('ZADD', r.retention, tonumber(now) + ttl, id)
    else
        redis.pcall('ZREM', r.retention, id)
    end
    -- the minute's hash expires THROUGHPUT_TTL seconds after the first count of each
    -- status (statistics.THROUGHPUT_TTL, set when the script is loaded)
    if r.throughput and redis.pcall('HINCRBY', r.throughput, status, 1) == 1 then
        redis.pcall('EXPIRE', r.throughput, {THROUGHPUT_TTL})
    end
    if r.stats then redis.pcall('HINCRBY', r.stats, 'finished.' .. status, 1) end
    -- a producer waiting for the task (its `waited` field: the channel to tell, see
    -- watch.lua) is told its status; `r.waited` when the caller read the field already
    -- (false: unset)
    if type(waited) == 'string' then redis.call('PUBLISH', waited, status) end
    if type(follow) == 'string' and follow == ended_of(r.retention) then
        local pushed = redis.pcall('LPUSH', follow, id)
        return type(pushed) == 'number'
    end
    return false
end

-- the upper bounds of the duration histograms, in seconds (statistics.DURATION_BOUNDS)
local DURATION_BOUNDS = {DURATION_BOUNDS}

-- observe(stats, name, since, now): count `now - since` seconds (clamped at 0; nothing
-- when either is not a number) in the histogram `name` of the queue's counters `stats`:
-- `<name>.le.<bound>` counts the durations of that bucket and no lower one ('inf' past
-- the last bound), `<name>.sum_us` adds them up in microseconds (HINCRBY: cheaper than a
-- float sum). An index beside the task: redis.pcall.
local function observe(stats, name, since, now)
    local seconds = (tonumber(now) or 0) - (tonumber(since) or math.huge)
    if seconds ~= seconds or seconds == -math.huge or seconds == math.huge then return end
    if seconds < 0 then seconds = 0 end
    local bucket = 'inf'
    for _, bound in ipairs(DURATION_BOUNDS) do
        if seconds <= bound then bucket = string.format('%g', bound) break end
    end
    redis.pcall('HINCRBY', stats, name .. '.le.' .. bucket, 1)
    redis.pcall('HINCRBY', stats, name .. '.sum_us', math.floor(seconds * 1000000 + 0.5))
end

-- unflag_stalled(task, stalled set, id): a task that stops running is no longer stalled
local function unflag_stalled(task, stalled, id)
    if redis.call('HEXISTS', task, 'stalled_at') == 1 then
        redis.pcall('ZREM', stalled, id)
        redis.call('HDEL', task, 'stalled_at')
    end
end

-- canceling(task): true when a cancel of the running task was asked
local function canceling(task)
    return redis.call('HEXISTS', task, 'cancel_requested') == 1
end

-- file_canceled(task, id, canceled list, stats, now, r): a task whose running was canceled
-- at its owner's request, let go already, filed as canceled and kept as `r` says (see
-- `retain`); counted as a 'cancel' in the queue's counters `stats` when given
local function file_canceled(task, id, canceled, stats, now, r)
    redis.call('HSET', task, 'status', 'canceled', 'updated', now)
    redis.call('LPUSH', canceled, id)
    if stats then redis.call('HINCRBY', stats, 'calls.cancel', 1) end
    retain(r, task, id, 'canceled', now)
end
