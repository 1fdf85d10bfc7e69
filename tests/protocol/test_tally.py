"""A worker counts the steps it runs in memory (`statistics.Tally`) and writes them once a
second at most: the counters read the same as when each step counts itself, and the
steps it runs write no counter."""

import time

import pytest
import redis

from limpyd_blueque import Job, Queue
from limpyd_blueque.exceptions import RedisUnavailable
from limpyd_blueque.protocol.statistics import (
    DURATION_BOUNDS,
    THROUGHPUT_TTL,
    Tally,
    bucket_of,
    read_counters,
)

LISTENER = "t_1"


def _counters(conn, name):
    """The counters hash of queue `name`, without the fields that differ by nature
    (the durations' sums, measured)."""
    return {field: value for field, value in conn.hgetall(f"blueque:stats:{name}").items()
            if not field.endswith(".sum_us")}


def _minute_counts(conn, name):
    total = {}
    for key in conn.scan_iter(f"blueque:stats:{name}:m:*"):
        assert 0 < conn.ttl(key) <= THROUGHPUT_TTL
        for field, count in conn.hgetall(key).items():
            total[field] = total.get(field, 0) + int(count)
    return total


def _run_steps(name, tally):
    """Three tasks of queue `name`, each reserved and started, then completed, failed or
    canceled (its cancel asked while it ran) by their holder, counted in `tally`."""
    queue = Queue.named(name)
    for n in range(3):
        queue.enqueue({"n": n})
    outcomes = []
    for kind in ("complete", "fail", "cancel"):
        job, _ = Queue.reserve_from([name], LISTENER, pid=4242, tally=tally)
        assert job is not None
        if kind == "complete":
            outcomes.append(job.complete("ok", listener_id=LISTENER, tally=tally))
        elif kind == "fail":
            outcomes.append(job.fail("boom", listener_id=LISTENER, tally=tally))
        else:
            job.cancel()
            outcomes.append(job.complete("late", listener_id=LISTENER, tally=tally))
    assert outcomes == [True, True, True]


def test_counted_by_a_tally_the_counters_read_as_counted_by_the_steps(conn):
    _run_steps("inline", None)
    tally = Tally()
    _run_steps("tallied", tally)
    assert conn.hgetall("blueque:stats:tallied") == {"calls.put": "3"}  # not written yet
    assert Queue.write_tally(tally) > 0
    assert not tally and Queue.write_tally(tally) == 0  # written once
    inline, tallied = _counters(conn, "inline"), _counters(conn, "tallied")
    assert tallied == inline
    assert {field: inline[field] for field in ("calls.take", "calls.ack", "calls.fail",
                                               "calls.cancel", "finished.canceled")} == {
        "calls.take": "3", "calls.ack": "1", "calls.fail": "1", "calls.cancel": "1",
        "finished.canceled": "1"}
    assert _minute_counts(conn, "tallied") == _minute_counts(conn, "inline") == {
        "complete": 1, "failed": 1, "canceled": 1}
    keys = Job.keys()
    for kind in ("wait", "run"):
        histograms = read_counters(conn, keys, ["inline", "tallied"])
        assert histograms["tallied"].durations[kind].count == 3
        assert histograms["inline"].durations[kind].count == 3


def test_a_step_given_a_tally_writes_no_counter(conn, count_commands):
    queue = Queue.named("quiet")
    queue.enqueue("x")
    queue.scripts()
    tally = Tally()
    with count_commands() as counter:
        job, _ = Queue.reserve_from(["quiet"], LISTENER, pid=4242, tally=tally)
        assert job.complete("ok", listener_id=LISTENER, tally=tally)
    assert counter.commands == ["EVALSHA", "EVALSHA"]
    assert conn.hgetall("blueque:stats:quiet") == {"calls.put": "1"}
    assert list(conn.scan_iter("blueque:stats:quiet:m:*")) == []


def test_histogram_buckets_are_named_as_the_scripts_name_them(conn):
    """The scripts write `<name>.le.<bound>` with Lua's %g: the tally's names are the same,
    bound by bound, and a duration on a bound counts in that bound's bucket."""
    queue = Queue.named("b")
    for bound in DURATION_BOUNDS:
        job = queue.enqueue("x")
        conn.hset(job.key, "updated", time.time() - bound)
        Queue.reserve_from(["b"], LISTENER)  # counted by the step itself
    written = {field for field in conn.hgetall("blueque:stats:b") if ".le." in field}
    assert written <= {f"wait.le.{bucket_of(bound)}" for bound in DURATION_BOUNDS} | {
        "wait.le.inf"}
    assert bucket_of(DURATION_BOUNDS[-1] + 1) == "inf"
    assert [bucket_of(bound) for bound in (0.1, 1, 3600, 604800)] == [
        "0.1", "1", "3600", "604800"]


def test_counts_are_kept_while_redis_is_away_and_written_later(conn):
    tally = Tally()
    _run_steps("away", tally)
    dead = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
    with pytest.raises(RedisUnavailable):
        tally.flush(dead, Job.keys())
    assert tally  # nothing lost
    assert Queue.write_tally(tally) > 0
    assert conn.hget("blueque:stats:away", "calls.take") == "3"


def test_a_running_worker_writes_its_counts_within_a_second_or_two(conn, workers):
    """While a worker runs, its counts reach Redis about a second after the steps; a worker
    that stops writes what it has left."""
    queue = Queue.named("live")
    for n in range(5):
        queue.enqueue(n)
    process = workers.start("--queues=live", "--max-loops=6", fork=False)
    deadline = time.monotonic() + 10
    while conn.hget("blueque:stats:live", "calls.take") != "5":
        assert time.monotonic() < deadline, conn.hgetall("blueque:stats:live")
        time.sleep(0.05)
    done_at = float(max(conn.hget(f"blueque_task_{task_id}", "updated")
                        for task_id in conn.lrange("blueque_failed_tasks_live", 0, -1)))
    print(f"counts written {time.time() - done_at:.2f} s after the last step")
    queue.enqueue("last")  # its counts are written as the worker stops, at its sixth task
    assert process.wait(10) == 0
    counts = conn.hgetall("blueque:stats:live")
    assert (counts["calls.take"], counts["calls.fail"], counts["finished.failed"]) == (
        "6", "6", "6")  # (these tasks' parameters are not those of its job model)


def test_a_plain_task_costs_at_most_twenty_commands_run_by_a_worker(conn):
    """Reserve-and-start, then complete, of a task with no options, as a worker runs them:
    every command the scripts run counted by Redis (`INFO commandstats`)."""
    queue = Queue.named("plain")
    queue.configure(result_ttl=600)
    ids = [queue.enqueue(n).task_id for n in range(10)]
    queue.scripts()
    tally = Tally()
    conn.config_resetstat()
    for _ in ids:
        job, _ = Queue.reserve_from(["plain"], LISTENER, pid=4242, tally=tally)
        assert job.complete("ok", listener_id=LISTENER, tally=tally)
    stats = conn.info("commandstats")
    calls = {name[8:]: value["calls"] for name, value in stats.items()
             if name not in ("cmdstat_config", "cmdstat_info")}
    print(f"{sum(calls.values()) / len(ids):.1f} commands per task: {calls}")
    assert sum(calls.values()) / len(ids) <= 20, calls
    assert "cmdstat_hincrby" not in stats  # counted by the tally
    assert "cmdstat_llen" not in stats  # one queue: its line is not measured first


def test_the_queue_retention_is_a_term_read_when_the_task_is_taken(conn):
    """The finish step files a task with its queue's `result_ttl` as the reserve step read
    it, as the other terms are fixed when a task is taken; a task taken by a step that did
    not read them (all its terms its own) gets its queue's at its end."""
    queue = Queue.named("kept")
    queue.configure(result_ttl=100)
    plain = queue.enqueue("x")
    own = queue.enqueue("y", ttr=60, max_run_time=60, max_attempts=2, stall_timeout=60)
    first, reservation = Queue.reserve_from(["kept"], LISTENER)
    assert first.task_id == plain.task_id and reservation.queue_ttls == ("100", "-")
    second, reservation = Queue.reserve_from(["kept"], LISTENER)
    assert second.task_id == own.task_id and reservation.queue_ttls is None
    queue.configure(result_ttl=5000)
    now = time.time()
    assert first.complete("ok", listener_id=LISTENER)
    assert second.complete("ok", listener_id=LISTENER)
    kept = dict(conn.zrange("blueque:retention:kept", 0, -1, withscores=True))
    assert now + 90 < kept[plain.task_id] < now + 110
    assert now + 4990 < kept[own.task_id] < now + 5010
