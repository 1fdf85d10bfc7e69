"""Stall detection (issue 12, item 3), on real worker processes: a running task whose
progress does not move for its `stall_timeout` (per task, else per queue, else per worker;
off by default) is flagged (its `stalled_at` field, `statistics()["tasks"]["stalled"]`)
and its `on_stalled` and `job_stalled` hooks are called once per stall; the flag goes when
its progress moves again. A `job_stalled` override may release or fail the task: its
process is then stopped.

Tasks are `ControlledJob`s: they tell progress 0 at once, then move or stall as the test
says through their control key.
"""

from __future__ import annotations

import time

import pytest
from helpers import wait_for
from jobs import events
from operating_jobs import (
    MODES,
    HookedWorker,
    control,
    names,
    stuck_progress,
    task_pid,
    wait_status,
)

from limpyd_blueque import ConfigurationError, Queue, Worker
from limpyd_blueque.protocol.liveness import process_alive

pytestmark = pytest.mark.timeout(60)

CONTROLLED = "--job-model=operating_jobs.ControlledJob"
STALL = 0.5  # the short stall timeout of these tests
FLAG_WITHIN = 4.0  # seconds within which a stalled task must be flagged


def stalled_at(job):
    value = job.stalled_at.hget()
    return float(value) if value else None


def stalled_count(queue):
    return queue.statistics()["tasks"]["stalled"]


def hook_counts(conn, job):
    entries = names(events(conn, job.task_id))
    return entries.count("on_stalled"), entries.count("job_stalled")


def wait_flagged(queue, job, timeout=FLAG_WITHIN):
    return wait_for(lambda: stalled_at(job), timeout=timeout, interval=0.02)


def assert_never_flagged(queue, job, seconds):
    """For `seconds`, the task is never flagged (polled every 20 ms)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert stalled_at(job) is None
        assert stalled_count(queue) == 0
        time.sleep(0.02)


def wait_running(conn, job):
    return wait_for(lambda: task_pid(events(conn, job.task_id)), timeout=10)


@MODES
def test_a_task_whose_progress_stops_is_flagged_once_per_stall_until_it_moves(
        workers, conn, fork):
    queue = Queue.named("s")
    job = queue.enqueue({})
    control(conn, job, "stall")
    workers.start("--queues=s", CONTROLLED, f"--stall-timeout={STALL}", "--max-loops=1",
                  fork=fork)
    wait_running(conn, job)
    flagged = wait_flagged(queue, job)
    # flagged no sooner than the stall timeout after the progress last moved
    assert flagged - job.progress().moved_at.timestamp() >= STALL - 0.05
    assert flagged == pytest.approx(time.time(), abs=FLAG_WITHIN)
    assert stalled_count(queue) == 1
    assert job.status.hget() == "started"
    wait_for(lambda: hook_counts(conn, job) == (1, 1), timeout=3)
    assert [line for line in workers.logs().splitlines()
            if job.task_id in line and "stall" in line]  # and logged
    time.sleep(1.0)  # still stalled: neither flagged again nor called again
    assert stalled_at(job) == flagged
    assert hook_counts(conn, job) == (1, 1)

    control(conn, job, "move")
    wait_for(lambda: stalled_at(job) is None and stalled_count(queue) == 0, timeout=3)
    assert_never_flagged(queue, job, 1.0)  # moving every 50 ms: never stalled
    assert hook_counts(conn, job) == (1, 1)

    control(conn, job, "stall")  # a second stall: flagged and called again
    wait_flagged(queue, job)
    assert stalled_count(queue) == 1
    wait_for(lambda: hook_counts(conn, job) == (2, 2), timeout=3)

    control(conn, job, "finish")
    wait_status(job, "complete", workers, timeout=5)
    assert stalled_at(job) is None
    assert stalled_count(queue) == 0
    assert hook_counts(conn, job) == (2, 2)


def test_stall_detection_is_off_by_default(workers, conn):
    queue = Queue.named("s")
    job = queue.enqueue({})
    control(conn, job, "stall")
    workers.start("--queues=s", CONTROLLED, "--max-loops=1")
    wait_running(conn, job)
    assert_never_flagged(queue, job, 2.0)
    control(conn, job, "finish")
    wait_status(job, "complete", workers, timeout=5)
    assert hook_counts(conn, job) == (0, 0)


def test_the_stall_timeout_of_a_task_overrides_its_queue_s_which_overrides_the_worker_s(
        workers, conn):
    by_queue, by_task, task_over_queue = (Queue.named(name) for name in ("sa", "sb", "sc"))
    by_queue.configure(stall_timeout=STALL)
    task_over_queue.configure(stall_timeout=STALL)
    jobs = {
        "queue over worker": by_queue.enqueue({}),
        "task over worker": by_task.enqueue({}, stall_timeout=STALL),
        "task over queue": task_over_queue.enqueue({}, stall_timeout=60),
        "worker": by_task.enqueue({}),
    }
    for job in jobs.values():
        control(conn, job, "stall")
    workers.start("--queues=sa,sb,sc", CONTROLLED, "--stall-timeout=60", "--concurrency=4",
                  "--max-loops=4")
    for job in jobs.values():
        wait_running(conn, job)
    wait_flagged(by_queue, jobs["queue over worker"])
    wait_flagged(by_task, jobs["task over worker"])
    time.sleep(1.0)
    assert stalled_at(jobs["task over queue"]) is None
    assert stalled_at(jobs["worker"]) is None
    assert (stalled_count(by_queue), stalled_count(by_task), stalled_count(task_over_queue)) == (
        1, 1, 0)
    for name, job in jobs.items():
        assert hook_counts(conn, job) == ((1, 1) if "over worker" in name else (0, 0)), name


@pytest.mark.parametrize("action", ["release", "fail"])
def test_a_job_stalled_override_may_release_or_fail_the_task_whose_process_then_stops(
        workers, conn, action):
    queue = Queue.named("s")
    job = queue.enqueue({"finish_from": 2})  # a second attempt ends at once
    control(conn, job, "stall")
    worker_class = {"release": "ReleasingWorker", "fail": "FailingWorker"}[action]
    workers.start("--queues=s", CONTROLLED, f"--stall-timeout={STALL}", "--max-loops=2",
                  f"--worker-class=operating_jobs.{worker_class}")
    pid = wait_running(conn, job)
    handled = wait_for(lambda: [e for e in events(conn, job.task_id)
                                if e["event"] == "stall_handled"], timeout=FLAG_WITHIN)
    assert handled[0]["done"] is True
    assert handled[0]["status"] == {"release": "pending", "fail": "failed"}[action]
    wait_for(lambda: not process_alive(pid), timeout=3)  # the stalled attempt is stopped
    if action == "release":  # back in line: the worker takes it again, and it ends
        wait_status(job, "complete", workers, timeout=5)
        assert job.attempt.hget() == "2"
    else:
        time.sleep(0.5)
        assert job.status.hget() == "failed"
        assert job.error.hget() == "stalled for too long"
        assert job.attempt.hget() == "1"
    finished = [e for e in events(conn, job.task_id) if e["event"] == "finished"]
    assert [e.get("attempt") for e in finished] == ([2] if action == "release" else [])
    assert stalled_at(job) is None
    assert stalled_count(queue) == 0


@pytest.mark.parametrize("bad", [-1, 0, float("nan"), True, "5"])
def test_a_bad_stall_timeout_is_refused_before_anything_is_written(database, conn, bad):
    queue = Queue.named("s")
    with pytest.raises(ConfigurationError, match="stall_timeout"):
        queue.enqueue({}, stall_timeout=bad)
    with pytest.raises(ConfigurationError, match="stall_timeout"):
        queue.configure(stall_timeout=bad)
    with pytest.raises(ConfigurationError, match="stall_timeout"):
        Worker("s", stall_timeout=bad)
    assert conn.keys("*") == []


def test_the_same_progress_reported_again_is_no_move_and_stalls(conn):
    queue = Queue.named("same")
    job = queue.enqueue({"seconds": 2.0})
    HookedWorker(queues=["same"], fork=False, callback=stuck_progress, stall_timeout=0.6,
                 progress_interval=0.1, liveness_interval=0.1, max_loops=1, timeout=0.5).run()
    assert job.status.hget() == "complete"
    assert names(events(conn, job.task_id)) == ["job_stalled"]
    assert job.progress().done == 1 and job.progress().message == "stuck"
