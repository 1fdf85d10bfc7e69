-- Make a waiting task also wait for more tasks (a running node of its workflow added
-- them): in its `after` set and its `parents` field (a JSON array of ids).
-- KEYS[1] blueque_task_<id>, KEYS[2] <prefix>:after:<queue>:<id>
-- ARGV: the ids of the new parents
-- Returns 1 when the task waits for them, 0 when it is not waiting (then nothing changed).
if redis.pcall('HGET', KEYS[1], 'status') ~= 'waiting' then return 0 end
local refused = refuse_misfit({{KEYS[2], 'set'}})
if refused then return refused end
local parents = {}
local known = redis.call('HGET', KEYS[1], 'parents')
if known then
    local ok, decoded = pcall(cjson.decode, known)
    if ok and type(decoded) == 'table' then parents = decoded end
end
local seen = {}
for _, id in ipairs(parents) do seen[id] = true end
for _, id in ipairs(ARGV) do
    if not seen[id] then parents[#parents + 1] = id; seen[id] = true end
end
redis.call('SADD', KEYS[2], unpack(ARGV))
redis.call('HSET', KEYS[1], 'parents', cjson.encode(parents))
return 1
