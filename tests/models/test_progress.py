"""Progress of running tasks (issue 12, item 1), on real workers in both modes: told from a
Job subclass's `run` and from a callback's job, coalesced (a tight loop costs a handful of
writes, counted on the wire with MONITOR), the last value always written, read back with
`job.progress()` while the task runs and after, and `Canceled` once a cancel was asked."""

from __future__ import annotations

import json
import time
from collections import Counter
from datetime import datetime, timedelta, timezone

import pytest
from helpers import wait_for
from jobs import events
from operating_jobs import (
    MODES,
    OperatingJob,
    ProgressJob,
    names,
    progress_callback,
    task_pid,
    tight_progress,
    wait_status,
)

from limpyd_blueque import Queue, Worker
from limpyd_blueque.protocol.liveness import process_alive

pytestmark = pytest.mark.timeout(60)

INTERVAL = 0.2  # progress_interval of every worker here


def utc_now():
    return datetime.now(timezone.utc)


@MODES
def test_progress_reads_back_while_a_job_subclass_runs_and_after_it_ends(
        workers, conn, fork):
    queue = Queue.named("p")
    job = queue.enqueue({"total": 12, "step": 0.1})
    assert job.progress() is None  # nothing told yet
    workers.start("--queues=p", "--job-model=operating_jobs.ProgressJob", "--max-loops=1",
                  fork=fork)
    readings = []

    def midway():
        reading = job.progress()
        if reading is not None:
            readings.append((reading, utc_now()))
        return reading is not None and 4 <= reading.done <= 9 and reading

    seen = wait_for(midway, timeout=10, interval=0.01)
    read_at = utc_now()
    assert job.status.hget() == "started"
    assert seen.total == 12
    assert seen.fraction == pytest.approx(seen.done / 12)
    assert seen.message == f"item {seen.done:g} of 12"
    assert seen.attempt == 1
    assert seen.moved_at.tzinfo is not None and seen.moved_at.utcoffset() == timedelta(0)
    # written at most a progress interval (and one item) after it moved
    assert timedelta(0) <= read_at - seen.moved_at < timedelta(seconds=1)
    assert seen.first_at <= seen.moved_at
    # 0.1 s per item: the estimate follows the rate seen so far
    expected = (12 - seen.done) * 0.1
    assert seen.time_left is not None
    assert 0.4 * expected <= seen.time_left.total_seconds() <= 2.5 * expected + 0.2
    as_dict = seen.as_dict()
    assert set(as_dict) == {"done", "total", "fraction", "message", "moved_at", "time_left",
                            "attempt"}
    assert json.loads(json.dumps(as_dict)) == as_dict
    assert datetime.fromisoformat(as_dict["moved_at"]) == seen.moved_at
    assert as_dict["time_left"] == pytest.approx(seen.time_left.total_seconds())
    assert (as_dict["done"], as_dict["total"], as_dict["fraction"], as_dict["attempt"]) == (
        seen.done, 12, seen.fraction, 1)

    wait_status(job, "complete", workers, timeout=10)
    final = job.progress()
    assert (final.done, final.total, final.fraction) == (12, 12, 1.0)
    assert final.message == "item 12 of 12"
    assert final.time_left == timedelta(0)
    assert final.as_dict()["time_left"] == 0
    # what was read along the way only ever moved forward
    dones = [reading.done for reading, _ in readings]
    assert dones == sorted(dones)
    moved = [reading.moved_at for reading, _ in readings]
    assert moved == sorted(moved)
    assert (task_pid(events(conn, job.task_id)) != workers.started[0].pid) is fork


@MODES
def test_progress_is_told_on_the_job_a_callback_is_given(database, conn, fork):
    job = Queue.named("p").enqueue({"total": 5, "step": 0.01})
    Worker("p", callback=progress_callback, fork=fork, max_loops=1, timeout=0.2,
           progress_interval=INTERVAL).run()
    assert job.status.hget() == "complete"
    final = job.progress()
    assert (final.done, final.total, final.message) == (5, 5, "item 5 of 5")
    assert final.attempt == 1


@MODES
def test_the_last_value_is_written_when_the_task_ends_even_inside_the_interval(
        database, conn, fork):
    # five calls in 50 ms, with an interval of an hour: only the first is due when made
    job = Queue.named("p").enqueue({"total": 5, "step": 0.01})
    Worker("p", job_model=ProgressJob, fork=fork, max_loops=1, timeout=0.2,
           progress_interval=3600).run()
    assert job.status.hget() == "complete"
    final = job.progress()
    assert (final.done, final.total, final.message) == (5, 5, "item 5 of 5")


def test_a_task_that_tells_no_progress_has_none(database):
    job = Queue.named("p").enqueue({"seconds": 0})
    Worker("p", job_model=OperatingJob, fork=False, max_loops=1, timeout=0.2,
           progress_interval=INTERVAL).run()
    assert job.status.hget() == "complete"
    assert job.progress() is None


def commands_of_one_task(queue, count_commands, fork, progress):
    """The commands sent while a worker takes and runs one `tight_progress` task (10,000
    calls over half a second), its periodic work done beforehand and not due again."""
    job = queue.enqueue({"calls": 10_000, "seconds": 0.5, "progress": progress})
    worker = Worker(queue.pk.get(), callback=tight_progress, fork=fork, max_loops=1,
                    timeout=0.2, schedule_interval=3600, clean_interval=3600,
                    heartbeat_interval=3600, ttr=36000, liveness_interval=3600,
                    liveness_timeout=7200, progress_interval=INTERVAL)
    worker.run_started()
    worker.move_due_tasks()
    worker.clean()
    try:
        started = time.monotonic()
        with count_commands() as counter:
            while not worker.must_stop():
                worker.run_once()
            while len(worker.tasks):
                time.sleep(0.005)
                worker.collect()
        elapsed = time.monotonic() - started
    finally:
        worker.run_ended()
    assert job.status.hget() == "complete"
    return job, counter.commands, elapsed


@MODES
def test_ten_thousand_progress_calls_in_half_a_second_cost_a_handful_of_writes(
        database, count_commands, fork, capsys):
    queue = Queue.named("tight")
    queue.scripts()
    _, without, _ = commands_of_one_task(queue, count_commands, fork, progress=False)
    job, with_progress, elapsed = commands_of_one_task(queue, count_commands, fork,
                                                       progress=True)
    added = Counter(with_progress) - Counter(without)
    # the task's own round trips are all still there, and only progress writes are added
    assert Counter(without) - Counter(with_progress) == Counter()
    writes = sum(added.values())
    with capsys.disabled():
        print(f"\n{'forked' if fork else 'in-process'}: 10,000 set_progress calls in "
              f"{elapsed:.2f} s cost {writes} round trip(s) {dict(added)}; the task alone "
              f"{len(without)} {dict(Counter(without))}")
    # at most one write per interval, plus the first and the last
    assert 1 <= writes <= 2 + int(elapsed / INTERVAL)
    assert writes <= 6
    final = job.progress()
    assert (final.done, final.total) == (10_000, 10_000)  # the last value is always written


@MODES
def test_set_progress_raises_canceled_once_a_cancel_was_asked(workers, conn, fork):
    # the task tells progress every 50 ms, and hears of the cancel through set_progress;
    # forked, it ignores SIGTERM (a grace of 5 s leaves it the time to hear it)
    job = Queue.named("p").enqueue({"progress": True, "ignore_term": fork, "seconds": 20})
    workers.start("--queues=p", "--max-loops=1", "--requeue-times=3", "--cancel-grace=5",
                  fork=fork)
    wait_for(lambda: (reading := job.progress()) is not None and reading.done >= 2,
             timeout=10)
    assert job.cancel() is True
    wait_status(job, "canceled", workers, timeout=8)
    entries = events(conn, job.task_id)
    assert "canceled_raised" in names(entries)
    assert "finished" not in names(entries)
    assert names(entries).count("running") == 1
    pid = task_pid(entries)
    if fork:
        wait_for(lambda: not process_alive(pid), timeout=3)
    time.sleep(0.5)
    assert job.status.hget() == "canceled"  # no retry
    assert job.attempt.hget() == "1"


@pytest.mark.parametrize("done, total", [(float("nan"), None), (10**400, None), ("5", None),
                                         (1, -1), (1, float("inf")), (2e15, None)])
def test_a_progress_that_is_no_number_within_bounds_is_refused(done, total):
    from limpyd_blueque import InvalidParameters
    from limpyd_blueque.models.progress import ProgressReporter

    writes = []
    reporter = ProgressReporter(lambda *texts: writes.append(texts) or False, 1, 0.0)
    with pytest.raises(InvalidParameters, match="progress"):
        reporter.set(done, total)
    assert writes == []
    reporter.set(1, 2)
    reporter.set(1, 2)  # the same again: written, but it did not move
    first, second = (json.loads(texts[0]) for texts in writes)
    assert first["at"] == second["at"]
