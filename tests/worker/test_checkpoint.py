"""Checkpoints and resume (issue 12, item 2): a task stores where it is with
`checkpoint(state)`, and its next attempt reads it back with `last_checkpoint()`, after a
requeue on error, a release, its process killed with SIGKILL, or its whole worker killed
and the task taken back by another; a superseded attempt can never overwrite the newer
attempt's checkpoint.

The resume tests run `ItemsJob`: items 0..49, a checkpoint `{"next": i + 1}` after every
10th item, and on its first attempt a stop right after item 27 (fail, release, or a pause
during which the test kills it). The second attempt must start exactly at item 20: every
item processed, the items past the last checkpoint (20..27) twice, each of the others once.
"""

from __future__ import annotations

import os
import time
from datetime import datetime, timedelta, timezone

import pytest
from helpers import LISTENER, OTHER, kill, take, wait_for
from jobs import events
from operating_jobs import (
    ItemsJob,
    names,
    processed,
    task_pid,
    wait_status,
)

from limpyd_blueque import Job, LimpydBluequeError, Queue, Worker
from limpyd_blueque.upkeep.cleaning import light_clean

pytestmark = pytest.mark.timeout(60)

N, EVERY, STOP_AT = 50, 10, 27
RESUME_AT = 20  # the last checkpoint before the stop: {"next": 20}


def items_task(queue_name, stop):
    return Queue.named(queue_name).enqueue({"n": N, "every": EVERY, "stop_at": STOP_AT,
                                            "stop": stop})


def assert_resumed_at_the_last_checkpoint(conn, job):
    """Attempt 1 did items 0..27, attempt 2 exactly 20..49: each item after the last
    checkpoint of attempt 1 at most twice, and once after that checkpoint."""
    pairs = processed(conn, job)
    first = [item for attempt, item in pairs if attempt == 1]
    second = [item for attempt, item in pairs if attempt == 2]
    assert first == list(range(STOP_AT + 1))
    assert second == list(range(RESUME_AT, N))
    assert {attempt for attempt, _ in pairs} == {1, 2}
    counts = {item: sum(1 for _, seen in pairs if seen == item) for item in range(N)}
    assert all(counts[item] == 1 for item in range(RESUME_AT))
    assert all(counts[item] == 2 for item in range(RESUME_AT, STOP_AT + 1))
    assert all(counts[item] == 1 for item in range(STOP_AT + 1, N))
    resumed = [(e["attempt"], e["first"]) for e in events(conn, job.task_id)
               if e["event"] == "resumed"]
    assert resumed == [(1, 0), (2, RESUME_AT)]
    stored = [e["stored"] for e in events(conn, job.task_id) if e["event"] == "checkpoint"]
    assert stored and all(stored)  # every checkpoint of the holding attempt is stored
    assert job.status.hget() == "complete"
    assert job.last_checkpoint() == {"next": N}
    assert job.checkpoint_record().attempt == 2


# -- storing and reading ----------------------------------------------------------------------
def test_a_checkpoint_is_stored_at_once_and_read_back_with_its_record(database, conn):
    queue = Queue.named("c")
    queue.enqueue("x")
    job = take("c", pid=os.getpid())
    assert job.last_checkpoint() is None and job.checkpoint_record() is None
    before = datetime.now(timezone.utc)
    state = {"next": 1200, "cursor": "abc", "seen": [1, 2, 3], "nested": {"ok": True}}
    assert job.checkpoint(state) is True
    reader = Job.load(job.task_id)  # another instance reads it
    assert reader.last_checkpoint() == state
    record = reader.checkpoint_record()
    assert record.state == state and record.attempt == 1
    assert record.at.tzinfo is not None and record.at.utcoffset() == timedelta(0)
    assert before - timedelta(seconds=1) <= record.at <= datetime.now(timezone.utc)
    assert record.size == len(conn.hget(job.key, "checkpoint").encode())
    assert record.size > len('{"next":1200,"cursor":"abc"}')
    assert job.checkpoint([1, "two", None]) is True  # any JSON value, the last one wins
    assert reader.last_checkpoint() == [1, "two", None]


def test_a_state_json_cannot_encode_is_refused_and_the_last_checkpoint_kept(database):
    Queue.named("c").enqueue("x")
    job = take("c", pid=os.getpid())
    assert job.checkpoint({"next": 3})
    for bad in ({1, 2}, object(), {"when": datetime.now()}, float("nan")):
        with pytest.raises(LimpydBluequeError):
            job.checkpoint(bad)
    assert job.last_checkpoint() == {"next": 3}


@pytest.mark.parametrize("how", ["release", "expired lease"])
def test_a_superseded_attempt_cannot_overwrite_the_newer_checkpoint(database, conn, how):
    queue = Queue.named("c")
    queue.enqueue("x")
    if how == "release":
        stale = take("c", LISTENER, pid=os.getpid())
        assert stale.checkpoint({"next": 10, "by": 1}) is True
        assert stale.release() is True
    else:
        stale = take("c", LISTENER, pid=os.getpid(), ttr=0.2)
        assert stale.checkpoint({"next": 10, "by": 1}) is True
        time.sleep(0.3)
        assert light_clean(Queue) == {stale.task_id: "pending"}
    newer = take("c", OTHER, pid=os.getpid())
    assert newer.last_checkpoint() == {"next": 10, "by": 1}  # the new attempt resumes
    assert newer.checkpoint({"next": 20, "by": 2}) is True
    assert stale.checkpoint({"next": 99, "by": 1}) is False
    assert newer.last_checkpoint() == {"next": 20, "by": 2}
    assert stale.last_checkpoint() == {"next": 20, "by": 2}
    assert newer.checkpoint_record().attempt == 2
    # the newer attempt goes on checkpointing
    assert newer.checkpoint({"next": 30, "by": 2}) is True
    assert newer.last_checkpoint() == {"next": 30, "by": 2}
    assert stale.checkpoint({"next": 0, "by": 1}) is False
    assert newer.last_checkpoint() == {"next": 30, "by": 2}


def test_a_stale_attempt_cannot_checkpoint_a_finished_task(database):
    queue = Queue.named("c")
    queue.enqueue("x")
    stale = take("c", LISTENER, pid=os.getpid())
    assert stale.release()
    newer = take("c", OTHER, pid=os.getpid())
    assert newer.checkpoint({"next": 5})
    assert newer.complete("done")
    assert stale.checkpoint({"next": 0}) is False
    assert newer.last_checkpoint() == {"next": 5}


# -- resuming on a real worker ------------------------------------------------------------------
@pytest.mark.parametrize("fork", [True, False], ids=["forked", "in-process"])
def test_an_attempt_requeued_on_error_resumes_from_its_checkpoint(database, conn, fork):
    job = items_task("c", "fail")
    Worker("c", job_model=ItemsJob, fork=fork, max_loops=2, timeout=0.2, requeue_times=1,
           requeue_delay_delta=0, progress_interval=0.2).run()
    assert names(e for e in events(conn, job.task_id) if e["event"].startswith("on_")) == [
        "on_started", "on_error", "on_requeued", "on_started", "on_success"]
    assert_resumed_at_the_last_checkpoint(conn, job)


@pytest.mark.parametrize("fork", [True, False], ids=["forked", "in-process"])
def test_a_released_task_resumes_from_its_checkpoint(database, conn, fork):
    job = items_task("c", "release")
    Worker("c", job_model=ItemsJob, fork=fork, max_loops=2, timeout=0.2,
           progress_interval=0.2).run()
    assert_resumed_at_the_last_checkpoint(conn, job)


def test_a_task_killed_with_sigkill_midway_resumes_at_its_last_checkpoint(
        workers, conn, capsys):
    job = items_task("c", "pause")
    workers.start("--queues=c", "--job-model=operating_jobs.ItemsJob", "--requeue-times=1",
                  "--requeue-delay-delta=0", "--max-loops=2")
    paused = wait_for(lambda: [e for e in events(conn, job.task_id) if e["event"] == "paused"],
                      timeout=15)
    assert job.last_checkpoint() == {"next": RESUME_AT}
    kill(paused[0]["pid"])  # the task's own process, its worker left alive
    wait_status(job, "complete", workers, timeout=15)
    assert job.attempt.hget() == "2"
    assert "TaskKilled" in [e.get("type") for e in events(conn, job.task_id)]
    assert_resumed_at_the_last_checkpoint(conn, job)
    with capsys.disabled():
        pairs = processed(conn, job)
        print(f"\nkilled after item {STOP_AT}, last checkpoint {RESUME_AT}: {len(pairs)} items "
              f"processed for {N}, {len(pairs) - N} twice")


@pytest.mark.parametrize("fork", [True, False], ids=["forked", "in-process"])
def test_a_task_whose_worker_is_killed_resumes_on_the_worker_that_takes_it_back(
        workers, conn, fork):
    job = items_task("c", "pause")
    first = workers.start("--queues=c", "--job-model=operating_jobs.ItemsJob", fork=fork)
    paused = wait_for(lambda: [e for e in events(conn, job.task_id) if e["event"] == "paused"],
                      timeout=15)
    assert (paused[0]["pid"] != first.pid) is fork
    kill(first.pid)
    kill(paused[0]["pid"])  # its task process too: nothing left running it
    first.wait()
    workers.start("--queues=c", "--job-model=operating_jobs.ItemsJob", "--max-loops=1",
                  fork=fork)
    wait_status(job, "complete", workers, timeout=20)
    assert job.attempt.hget() == "2"
    assert task_pid(events(conn, job.task_id), "resumed") == paused[0]["pid"]
    assert_resumed_at_the_last_checkpoint(conn, job)
