"""Hostile and corrupt records already in Redis, written as another client, an operator with
`redis-cli` or a bug would: for each key and field the package reads, a real
`blueque-worker` runs beside good tasks on several queues. Every good task of a sound queue
completes; a bad task is quarantined (failed, with a stored `Error` naming the problem,
never run); the worker, the cleaning and the other queues go on."""

from __future__ import annotations

import subprocess
import sys

import pytest
import redis
from helpers import start_worker, wait_for
from jobs import events

from limpyd_blueque import Error, Queue
from limpyd_blueque.upkeep.cleaning import deep_clean, light_clean

pytestmark = [pytest.mark.timeout(120), pytest.mark.hostile]
QUEUES = ("a", "b", "c")


def pending(raw, in_queue, task_id, **fields):
    """Push `task_id` on the pending list of `in_queue`, with a hash of `fields`."""
    raw.lpush(f"blueque_pending_tasks_{in_queue}", task_id)
    key = task_id if isinstance(task_id, bytes) else task_id.encode()
    raw.hset(b"blueque_task_" + key, mapping=fields)


# each case: (what it writes, the queue it breaks or None, the quarantined task id or None)
CASES = {
    "id that is not UTF-8": (lambda r: pending(r, "a", b"b\xff", status="pending", queue="a",
                                                parameters="0"), None, None),
    "pending list is a string": (lambda r: r.set("blueque_pending_tasks_a", "x"), "a", None),
    "lease set is a string": (lambda r: r.set("blueque:leases:a", "x"), "a", None),
    "started set is a string": (lambda r: r.set("blueque_started_tasks_a", "x"), "a", None),
    "failed list is a hash": (lambda r: r.hset("blueque_failed_tasks_a", "x", "y"), "a", None),
    "queue settings is a list": (lambda r: r.lpush("blueque:queue:a", "x"), "a", None),
    "task without a queue field": (lambda r: pending(r, "a", "noqueue", status="pending",
                                                     parameters="0"), None, "noqueue"),
    # a stray entry of another queue's task: dropped here, its own queue runs it
    "task with another queue field": (lambda r: pending(r, "a", "elsewhere", status="pending",
                                                        queue="z", parameters="0"),
                                      None, None),
    "task with an unknown status": (lambda r: pending(r, "a", "weird", status="weird",
                                                      queue="a", parameters="0"), None, "weird"),
    "task with a garbage attempt": (lambda r: pending(r, "a", "garbage", status="pending",
                                                      queue="a", parameters="0",
                                                      attempt="many"), None, "garbage"),
    "task key is a string": (lambda r: (r.lpush("blueque_pending_tasks_a", "str"),
                                        r.set("blueque_task_str", "x")), None, None),
    "absurd lease fields": (lambda r: pending(r, "a", "absurd", status="pending", queue="a",
                                              parameters="0", ttr="nan", max_run_time="-inf",
                                              max_attempts="1e400"), None, None),
    "many ids with no hash": (lambda r: r.lpush("blueque_pending_tasks_a",
                                                *[f"ghost{n}" for n in range(5000)]), None, None),
    "expired lease of a string": (lambda r: (r.zadd("blueque:leases:b", {"gone": 1}),
                                             r.set("blueque_task_gone", "x")), None, None),
    "expired lease that is not UTF-8": (lambda r: r.zadd("blueque:leases:b", {b"c\xff": 1}),
                                        None, None),
    "scheduled id of a string": (lambda r: (r.zadd("blueque_scheduled_tasks_c", {"sch": 1}),
                                            r.set("blueque_task_sch", "x")), None, None),
    "queue index is a string": (lambda r: r.set("blueque_queues", "x"), None, None),
    "worker records are a string": (lambda r: r.set("blueque:workers", "x"), None, None),
    "worker identities are a list": (lambda r: r.lpush("blueque:workers:info", "x"),
                                     None, None),
    "listeners set is a string": (lambda r: r.set("blueque_listeners_b", "x"), None, None),
}


@pytest.mark.parametrize("case", list(CASES))
def test_good_tasks_complete_beside_a_hostile_record(case, redis_url, database, conn):
    corrupt, broken, quarantined = CASES[case]
    raw = redis.Redis.from_url(redis_url)
    good = {name: [Queue.named(name).enqueue("0") for _ in range(3)] for name in QUEUES}
    corrupt(raw)
    worker = start_worker(redis_url, "--queues=a,b,c", "--callback=jobs.slow_callback",
                          "--timeout=0.2", "--max-duration=20", "--clean-interval=0.3",
                          "--schedule-interval=0.2", stderr=subprocess.PIPE, text=True)
    sound = [job for name, jobs in good.items() if name != broken for job in jobs]
    try:
        wait_for(lambda: all(job.status.hget() == "complete" for job in sound), timeout=30)
        if quarantined:
            wait_for(lambda: conn.hget(f"blueque_task_{quarantined}", "status") == "failed")
    finally:
        worker.terminate()
        _, errors = worker.communicate(timeout=30)
    assert worker.returncode == 0, errors[-3000:]
    assert "Traceback" not in errors, errors[-3000:]
    if quarantined:
        assert conn.hget(f"blueque_task_{quarantined}", "error").startswith("Quarantined: ")
        assert quarantined in conn.lrange("blueque_failed_tasks_a", 0, -1)
        assert not events(conn, quarantined)  # never run
        stored = Error.collection(job_pk=quarantined).instances()
        assert [e.type.hget() for e in stored] == ["QuarantinedTask"]
        assert "quarantined" in errors
    # the cleaning goes on past it too, and says what it left alone
    light_clean(Queue)
    report = deep_clean(Queue)
    assert report.lines()


def test_a_long_run_of_ids_with_no_hash_is_passed_over_in_bounded_steps(
        redis_url, database, conn, count_commands):
    conn.lpush("blueque_pending_tasks_a", *[f"ghost{n}" for n in range(1000)])
    job = Queue.named("a").enqueue("0")
    passed = []
    with count_commands() as counter:
        found = None
        while found is None:
            found, _ = Queue.reserve_from(["a"], "h_1", report=passed.append)
    assert found.pk.get() == job.pk.get()
    assert [len(p.dropped) for p in passed] == [100] * 10  # 10 steps of at most 100
    assert all(p.more for p in passed)
    assert counter.count == 11


def test_a_worker_logs_a_run_of_bad_ids_once_per_step_not_once_per_id(redis_url, database,
                                                                        conn):
    conn.lpush("blueque_pending_tasks_a", *[f"ghost{n}" for n in range(300)])
    job = Queue.named("a").enqueue("0")
    worker = subprocess.run(
        [sys.executable, "-m", "limpyd_blueque.cli", f"--redis-url={redis_url}",
         "--queues=a", "--callback=jobs.noop", "--max-loops=1", "--timeout=0.2",
         "--pythonpath=tests", "--no-fork"], capture_output=True, text=True, timeout=60)
    assert worker.returncode == 0, worker.stderr
    assert job.status.hget() == "complete"
    assert worker.stderr.count("dropped") == 3  # 300 ids, in 3 steps of 100
