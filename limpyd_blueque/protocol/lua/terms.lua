-- Read a task with its lease terms, resolved as reserve resolves them (see _terms.lua):
-- for a worker that takes over a task it did not reserve (adoption).
-- KEYS[1] blueque_task_<id>, KEYS[2] <prefix>:queue:<queue> (queue settings)
-- ARGV[1] default lease length, ARGV[2] default maximum run time,
-- ARGV[3] default maximum attempts ('': none)
-- Returns {task hash as a flat list (empty when gone), ttr, max run time, max attempts,
-- stall timeout}.
if misfit({{KEYS[1], 'hash'}, {KEYS[2], 'hash'}}) then return {{}, '', '', '', ''} end
local ttr, max_run_time, max_attempts, stall = lease_terms(KEYS[1], KEYS[2], ARGV[1], ARGV[2],
    ARGV[3])
return {redis.call('HGETALL', KEYS[1]), term_text(ttr), term_text(max_run_time),
    term_text(max_attempts), term_text(stall)}
