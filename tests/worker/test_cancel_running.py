"""Cancelling a running task (issue 12, item 4), on real worker processes: `job.cancel()`
reaches the task's worker within about a second; a forked task's process group gets
SIGTERM, then SIGKILL after `cancel_grace`; in-process, cancelling is cooperative. The
task is filed `canceled` (never failed, never retried), `on_canceled` and `job_canceled`
are called. A task whose holder is dead is canceled by whoever takes it back. A cancel
racing the task's own completion has exactly one winner, and the task side is told.

The tests print (past pytest's capture) the time from `cancel()` to the status `canceled`,
and how many cancels won the race.
"""

from __future__ import annotations

import logging
import os
import random
import time

import pytest
from helpers import kill, take, wait_for
from jobs import events
from operating_jobs import (
    MODES,
    HookedWorker,
    OperatingJob,
    names,
    task_pid,
    wait_status,
)

from limpyd_blueque import Error, Queue
from limpyd_blueque.protocol.liveness import process_alive

pytestmark = pytest.mark.timeout(60)

FINISHED = ("complete", "failed", "canceled", "expired", "buried")


def report(capsys, text):
    with capsys.disabled():
        print(text)


def cancel_and_time(job, workers):
    """Cancel `job` (asserting the call says it was asked) and return the seconds until its
    status is `canceled`."""
    started = time.monotonic()
    assert job.cancel() is True
    wait_status(job, "canceled", workers, timeout=10)
    return time.monotonic() - started


def wait_for_events(conn, job, *wanted, timeout=5):
    """The events of `job` once each event of `wanted` was recorded."""
    return wait_for(lambda: (entries := names(events(conn, job.task_id)))
                    and all(name in entries for name in wanted) and entries, timeout=timeout)


def assert_canceled_once_and_not_retried(conn, job):
    time.sleep(0.6)  # room for a retry that must not happen
    assert job.status.hget() == "canceled"
    assert job.attempt.hget() == "1"
    entries = wait_for_events(conn, job, "on_canceled", "job_canceled")
    assert entries.count("running") <= 1
    assert entries.count("on_canceled") == 1 and entries.count("job_canceled") == 1
    assert "on_error" not in entries and "on_requeued" not in entries
    assert "on_success" not in entries and "finished" not in entries
    assert not Error.collection(job_pk=job.task_id)  # not a failure: no error stored
    counts = Queue.named(job.queue.hget()).counts()
    assert (counts["canceled"], counts["failed"], counts["running"]) == (1, 0, 0)


# -- forked: signals to the task's process group ------------------------------------------------
def test_a_running_forked_task_and_its_children_get_sigterm_within_a_second(
        workers, conn, capsys):
    job = Queue.named("k").enqueue({"spawn": True, "record_term": True, "seconds": 30})
    # a long grace: ending within it proves SIGTERM stopped the task, not SIGKILL
    workers.start("--queues=k", "--requeue-times=3", "--max-loops=2", "--cancel-grace=5")
    child = wait_for(lambda: task_pid(events(conn, job.task_id), "child"), timeout=10)
    pid = task_pid(events(conn, job.task_id))
    assert pid != workers.started[0].pid
    assert job.status.hget() == "started"
    elapsed = cancel_and_time(job, workers)
    report(capsys, f"\nforked task, SIGTERM: canceled {elapsed:.2f} s after cancel()")
    assert elapsed < 2.0
    # the task heard SIGTERM, and so did the child it spawned, in its process group
    wait_for_events(conn, job, "sigterm", timeout=2)
    assert [line for line in workers.logs().splitlines()
            if job.task_id in line and "cancel" in line]  # the worker logs it
    wait_for(lambda: not process_alive(pid) and not process_alive(child), timeout=2)
    assert_canceled_once_and_not_retried(conn, job)


def test_a_forked_task_ignoring_sigterm_is_killed_after_cancel_grace(workers, conn, capsys):
    job = Queue.named("k").enqueue({"ignore_term": True, "seconds": 30})
    workers.start("--queues=k", "--requeue-times=3", "--max-loops=2", "--cancel-grace=1")
    wait_for(lambda: task_pid(events(conn, job.task_id)), timeout=10)
    pid = task_pid(events(conn, job.task_id))
    elapsed = cancel_and_time(job, workers)
    report(capsys, f"\nforked task ignoring SIGTERM, cancel_grace 1 s: canceled {elapsed:.2f} s "
           "after cancel()")
    assert 0.9 <= elapsed < 3.0
    assert not process_alive(pid)
    assert_canceled_once_and_not_retried(conn, job)


# -- in-process: cooperative ---------------------------------------------------------------------
def test_an_in_process_task_sees_its_cancel_and_its_next_progress_raises_canceled(
        workers, conn, capsys):
    queue = Queue.named("k")
    job = queue.enqueue({"cooperative": True, "seconds": 30})
    worker = workers.start("--queues=k", "--requeue-times=3", "--max-loops=3", fork=False)
    wait_for(lambda: task_pid(events(conn, job.task_id)), timeout=10)
    assert task_pid(events(conn, job.task_id)) == worker.pid
    elapsed = cancel_and_time(job, workers)
    report(capsys, f"\nin-process task, cooperative: canceled {elapsed:.2f} s after cancel()")
    assert elapsed < 2.0
    entries = names(events(conn, job.task_id))
    assert entries.index("cancel_seen") < entries.index("canceled_raised")
    assert "no_canceled_raised" not in entries
    assert_canceled_once_and_not_retried(conn, job)
    # the worker goes on with the next task
    after = queue.enqueue({"seconds": 0})
    wait_status(after, "complete", workers, timeout=5)
    assert worker.poll() is None


# -- a dead holder ---------------------------------------------------------------------------------
def test_a_task_whose_worker_died_is_canceled_by_the_worker_that_takes_it_back(
        workers, conn, capsys):
    job = Queue.named("k").enqueue({"seconds": 30})
    first = workers.start("--queues=k", "--requeue-times=3")
    wait_for(lambda: task_pid(events(conn, job.task_id)), timeout=10)
    kill(first.pid)
    kill(task_pid(events(conn, job.task_id)))
    first.wait()
    assert job.cancel() is True  # asked: nobody is there to act on it yet
    assert job.status.hget() == "started"
    assert job.cancel_requested() is True
    started = time.monotonic()
    workers.start("--queues=k", "--requeue-times=3", "--max-loops=1")
    wait_status(job, "canceled", workers, timeout=15)
    report(capsys, f"\ndead holder: canceled {time.monotonic() - started:.2f} s after another "
           "worker started")
    time.sleep(0.6)
    assert job.status.hget() == "canceled"
    assert job.attempt.hget() == "1"
    assert names(events(conn, job.task_id)).count("running") == 1  # never run again


def test_a_task_whose_lease_expired_is_canceled_by_the_worker_that_takes_it_back(database,
                                                                                  conn, caplog):
    caplog.set_level(logging.INFO, logger="limpyd-blueque")
    queue = Queue.named("k")
    job = queue.enqueue({"seconds": 0})
    far = "far.example.com_7"  # another machine's listener: only its lease tells
    queue.add_listener(far)
    take("k", far, pid=4242, ttr=0.3)
    assert job.cancel() is True
    assert job.status.hget() == "started"
    HookedWorker("k", job_model=OperatingJob, fork=False, max_duration=1.5, timeout=0.2,
                 clean_interval=0.2, liveness_interval=0.2).run()
    assert job.status.hget() == "canceled"
    assert job.attempt.hget() == "1"
    assert "running" not in names(events(conn, job.task_id))
    # what the worker logs of it says what became of it
    lines = [record.getMessage() for record in caplog.records if job.task_id in record.getMessage()]
    assert lines and any("cancel" in line for line in lines), lines
    assert not any("failed" in line for line in lines), lines


# -- waiting and finished tasks --------------------------------------------------------------------
def test_cancelling_a_waiting_task_is_instant_and_a_finished_one_returns_false(database, conn):
    queue = Queue.named("k")
    pending = queue.enqueue({"seconds": 0})
    scheduled = queue.enqueue({"seconds": 0}, delay=600)
    for job in (pending, scheduled):
        assert job.cancel() is True
        assert job.status.hget() == "canceled"  # at once, no worker involved
        assert job.cancel() is False
    done = queue.enqueue({"seconds": 0})
    HookedWorker("k", job_model=OperatingJob, fork=False, max_loops=1, timeout=0.2).run()
    assert done.status.hget() == "complete"
    assert done.cancel() is False
    assert done.status.hget() == "complete"
    assert not done.cancel_requested()
    failed = queue.enqueue("x")
    held = take("k", pid=os.getpid())
    assert held.task_id == failed.task_id and held.fail("broken")
    assert failed.cancel() is False
    assert failed.status.hget() == "failed"
    expired = queue.enqueue({"seconds": 0}, ttl=0.1)
    time.sleep(0.2)
    assert queue.expire_due() == [expired.task_id]
    assert expired.cancel() is False
    assert expired.status.hget() == "expired"
    assert "on_canceled" not in names(events(conn))


# -- the race ----------------------------------------------------------------------------------
RACE_TASKS = 30


@MODES
def test_a_cancel_racing_the_task_completion_has_exactly_one_winner(workers, conn, fork,
                                                                     capsys):
    rng = random.Random(2026)
    durations = [0.05, 0.0] + [rng.uniform(0, 0.05) for _ in range(RACE_TASKS - 2)]
    # seconds after the task is seen taken: at once (the cancel must win), long after its
    # end (the cancel must lose), and for the others around its own end
    delays = [0.0, 1.0] + [max(0.0, d + rng.uniform(-0.02, 0.02)) for d in durations[2:]]
    queue = Queue.named("race")
    jobs = [queue.enqueue({"seconds": d}) for d in durations]
    workers.start("--queues=race", f"--concurrency={4 if fork else 1}", "--requeue-times=3",
                  f"--max-loops={RACE_TASKS * 2}", fork=fork)
    cancel_at, returned = {}, {}
    deadline = time.monotonic() + 30
    while len(returned) < RACE_TASKS:
        assert time.monotonic() < deadline, "the tasks were not all taken"
        with conn.pipeline(transaction=False) as pipe:
            for job in jobs:
                pipe.hget(job.key, "status")
            statuses = pipe.execute()
        now = time.monotonic()
        for index, status in enumerate(statuses):
            if index not in cancel_at and status != "pending":
                cancel_at[index] = now + delays[index]
        for index, when in list(cancel_at.items()):
            if index not in returned and now >= when:
                returned[index] = jobs[index].cancel()
        time.sleep(0.001)
    wait_for(lambda: all(job.status.hget() in FINISHED for job in jobs), timeout=15)
    wins = sum(returned.values())
    report(capsys, f"\n{'forked' if fork else 'in-process'} race: {wins} of {RACE_TASKS} "
           "cancels won, the others found the task complete")
    time.sleep(0.6)  # room for a retry or a late hook that must not happen
    for index, job in enumerate(jobs):
        status = job.status.hget()
        if returned[index]:
            assert status == "canceled", (index, status, names(events(conn, job.task_id)))
            entries = wait_for_events(conn, job, "on_canceled", "job_canceled", timeout=3)
            assert entries.count("on_canceled") == 1 and entries.count("job_canceled") == 1
            assert "on_success" not in entries
        else:
            entries = names(events(conn, job.task_id))
            assert status == "complete", (index, status, entries)
            assert entries.count("on_success") == 1
            assert "on_canceled" not in entries and "job_canceled" not in entries
        assert "on_error" not in entries and "on_requeued" not in entries
        assert not Error.collection(job_pk=job.task_id)
        assert job.attempt.hget() == "1"
    counts = queue.counts()
    assert (counts["canceled"], counts["complete"]) == (wins, RACE_TASKS - wins)
    assert counts["running"] == counts["failed"] == counts["pending"] == 0
    assert returned[0] is True and returned[1] is False  # both outcomes were met
