-- A structure of a queue found holding another type of value (a reserve step reports it,
-- see reserve.lua): moved aside under a name of its own, so that its queue goes on.
-- KEYS[1] the key, KEYS[2] the name to move it to (see keys.KeySpace.set_aside)
-- ARGV[1] the type the key must hold
-- Returns the type it held when it was moved; false when it is missing or of its type
-- by now (nothing done).
local found = redis.call('TYPE', KEYS[1])['ok']
if found == 'none' or found == ARGV[1] then return false end
redis.call('RENAME', KEYS[1], KEYS[2])
return found
