-- Measured: the worker of a forked task notes the peak memory of its process, once that
-- process ended, on the attempt it ran (a task deleted, or run again since, is left as it is).
-- KEYS[1] blueque_task_<id>
-- ARGV[1] the attempt the process ran, ARGV[2] its peak memory (bytes)
-- Returns 1 when noted, 0 when not.
if redis.call('TYPE', KEYS[1]).ok ~= 'hash' then return 0 end
if redis.call('HGET', KEYS[1], 'attempt') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'peak_rss', ARGV[2])
return 1
