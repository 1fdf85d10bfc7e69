-- Reseal: values of an encrypted task sealed again with the current key (`blueque
-- reencrypt`), each written only if it is still what was read (a running task may have
-- written a newer one meanwhile: that one stands, sealed with the current key already).
-- KEYS[1] blueque_task_<id>
-- ARGV: triples of field, the value read, the value resealed
-- Returns how many values were written.
if redis.call('TYPE', KEYS[1]).ok ~= 'hash' then return 0 end
local written = 0
for i = 1, #ARGV, 3 do
    if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i + 1] then
        redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 2])
        written = written + 1
    end
end
return written
