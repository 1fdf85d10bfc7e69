-- Blueque "Node Task Pop", made atomic: take the oldest pending task of the first
-- queue that has one, and mark it reserved (or started, when a pid is given) at once.
-- KEYS, five per queue, queues in the order they are tried:
--   blueque_pending_tasks_<queue>, blueque_reserved_tasks_<queue>_<listener>,
--   <prefix>:leases:<queue>, blueque_started_tasks_<queue>, <prefix>:queue:<queue>
-- ARGV[1] key prefix of task hashes (ids are only known inside)
-- ARGV[2] listener id, ARGV[3] now
-- ARGV[4] pid: '' to reserve only; a pid to reserve and start in the same step
-- ARGV[5] start time of that process (kept to tell it from a later one with its pid)
-- ARGV[6] default maximum run time, ARGV[7] default maximum attempts ('': none)
-- ARGV[7 + i] default lease length in seconds for queue i ('' or '0': no expiry;
--   'never': no expiry whatever the task or queue say, for a caller that does not
--   renew leases)
-- Each term is the task's own, else its queue's, else the default (see _terms.lua).
-- Lease ends are timed by the server's clock, so clients' clocks need not agree.
-- Returns {queue index (0: nothing), task id, task hash as a flat list, dropped ids,
--   ttr, max run time, max attempts ('' for none)}.
-- Dropped ids are list entries with no task hash, or a hash that is not pending.
local prefix, listener, now, pid = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local clock = redis.call('TIME')
local server_now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local dropped = {}
for i = 1, #KEYS / 5 do
    local pending, reserved = KEYS[5 * i - 4], KEYS[5 * i - 3]
    local leases, started, settings = KEYS[5 * i - 2], KEYS[5 * i - 1], KEYS[5 * i]
    while true do
        local id = redis.call('RPOPLPUSH', pending, reserved)
        if not id then break end
        local key = prefix .. id
        local status = redis.call('HGET', key, 'status')
        if status ~= 'pending' then
            redis.call('LREM', reserved, -1, id)
            dropped[#dropped + 1] = id
        else
            -- the terms, read before anything is written
            local ttr, max_run_time, max_attempts = lease_terms(key, settings, ARGV[7 + i],
                ARGV[6], ARGV[7])
            local deadline = '+inf'
            if ttr ~= 'never' and ttr and ttr > 0 then deadline = server_now + ttr end
            redis.call('HINCRBY', key, 'attempt', 1)
            if pid == '' then
                redis.call('HSET', key, 'status', 'reserved', 'node', listener, 'updated', now)
            else
                redis.call('HSET', key, 'status', 'started', 'node', listener, 'pid', pid,
                    'pstart', ARGV[5], 'updated', now)
                redis.call('SADD', started, listener .. ' ' .. pid .. ' ' .. id)
            end
            redis.call('ZADD', leases, deadline, id)
            return {i, id, redis.call('HGETALL', key), dropped, term_text(ttr),
                term_text(max_run_time), term_text(max_attempts)}
        end
    end
end
return {0, '', {}, dropped, '', '', ''}
