-- Shared by the scripts that need a task's lease terms; prepended to them when loaded.
-- Each term is the task's own field, else its queue's setting, else the caller's default;
-- a value that is not a finite number, at least 0, counts as unset. One place resolves the precedence.
local function usable(text)
    -- a finite number, not below 0 (NaN, infinities, negatives and text count as unset)
    local value = tonumber(text)
    if value and value == value and value >= 0 and value < math.huge then return value end
    return nil
end

local function first_number(task, settings, name, default)
    return usable(redis.call('HGET', task, name))
        or usable(redis.call('HGET', settings, name)) or usable(default)
end

-- lease_terms(task key, queue settings key, ttr, max run time, max attempts defaults)
-- returns ttr (or 'never', kept as given), max_run_time, max_attempts, and the task's or
-- its queue's stall_timeout (nil: none; the worker's own applies)
local function lease_terms(task, settings, ttr, max_run_time, max_attempts)
    local own_ttr = ttr
    if ttr ~= 'never' then own_ttr = first_number(task, settings, 'ttr', ttr) end
    return own_ttr, first_number(task, settings, 'max_run_time', max_run_time),
        first_number(task, settings, 'max_attempts', max_attempts),
        first_number(task, settings, 'stall_timeout', nil)
end

local function term_text(value)
    if value == nil or value == 'never' then return '' end
    if type(value) == 'number' and value <= 0 then return '' end
    return tostring(value)
end
