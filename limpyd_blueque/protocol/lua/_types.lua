-- Shared by every script that writes: the type checks made before the first write, so a
-- key holding another kind of value (written by another client, an operator, a bug) makes
-- a step refuse cleanly instead of stopping half-way.
-- misfit(pairs): for a list of {key, type}, the first key that exists with another type,
-- that type, and the type it must hold; nil when every key is missing or of its type.
local function misfit(pairs)
    for _, pair in ipairs(pairs) do
        local found = redis.call('TYPE', pair[1])['ok']
        if found ~= 'none' and found ~= pair[2] then return pair[1], found, pair[2] end
    end
    return nil
end

-- refuse_misfit(pairs): the error reply naming the misfit key, or nil
local function refuse_misfit(pairs)
    local key, found = misfit(pairs)
    if key then
        return redis.error_reply('BADKEY ' .. key .. ' holds a ' .. found)
    end
    return nil
end
