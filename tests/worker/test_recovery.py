"""A dead worker's tasks come back in seconds; a slow one keeps them. Measured on real
`blueque-worker` processes killed with SIGKILL; each test prints its figure.

"Another machine" is a worker whose machine identity differs (`LIMPYD_BLUEQUE_MACHINE_ID`,
as a worker in another pid namespace or on another host has): it cannot look at the dead
worker's processes and must rely on the missed heartbeats.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
from helpers import kill, kill_task_processes, start_worker, wait_for
from jobs import events
from relay_workers import HERE

from limpyd_blueque import Error, Queue

pytestmark = [pytest.mark.timeout(120), pytest.mark.recovery]
SAME_MACHINE_BOUND = 2.0
OTHER_MACHINE_BOUND = 20.0


@pytest.fixture
def workers(redis_url):
    started = []

    def start(*options, machine=None):
        env = {**os.environ}
        if machine:
            env["LIMPYD_BLUEQUE_MACHINE_ID"] = machine
        worker = start_worker(redis_url, "--queues=long", "--callback=jobs.slow_callback",
                              "--timeout=5", *options, env=env)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        kill(worker.pid, signal.SIGCONT)
        kill(worker.pid)
        worker.wait()


@pytest.fixture(autouse=True)
def no_leftover_task_processes(conn):
    yield
    kill_task_processes(conn)


def begins(conn, job):
    return [e for e in events(conn, job.pk.get()) if e["event"] == "begin"]


def running_elsewhere(conn, job, first):
    """The task started again, by another process than `first`."""
    runs = begins(conn, job)
    return len(runs) > 1 and runs[-1]["pid"] != first and job.status.hget() == "started"


def beating(conn, worker):
    return wait_for(lambda: any(member.endswith(f"_{worker.pid}")
                                for member in conn.zrange("blueque:workers", 0, -1)))


def kill_worker_and_task(conn, worker, job):
    child = begins(conn, job)[0]["pid"]
    kill(worker.pid)
    kill(child)
    worker.wait()
    return child, time.monotonic()


def report(capsys, text):
    """Print a measured figure past pytest's capture, so that every run shows it."""
    with capsys.disabled():
        print(text)


def test_a_killed_worker_task_restarts_within_2_seconds_on_the_same_machine(workers, conn,
                                                                            capsys):
    job = Queue.named("long").enqueue("60")
    first = workers()
    wait_for(lambda: begins(conn, job))
    beating(conn, workers())
    child, killed = kill_worker_and_task(conn, first, job)
    wait_for(lambda: running_elsewhere(conn, job, child), timeout=30, interval=0.01)
    elapsed = time.monotonic() - killed
    report(capsys, f"\nsame machine: task started again {elapsed:.2f} s after SIGKILL "
          f"(bound {SAME_MACHINE_BOUND} s)")
    assert elapsed <= SAME_MACHINE_BOUND
    assert job.attempt.hget() == "2"
    # the dead worker's listener and its count are gone
    assert not any(m.endswith(f"_{first.pid}") for m in conn.smembers("blueque_listeners_long"))
    assert conn.zscore("blueque_queues", "long") == 1


def test_a_killed_worker_task_restarts_within_20_seconds_from_another_machine(workers, conn,
                                                                            capsys):
    job = Queue.named("long").enqueue("60")
    first = workers()
    wait_for(lambda: begins(conn, job))
    beating(conn, workers(machine="another-machine"))
    child, killed = kill_worker_and_task(conn, first, job)
    wait_for(lambda: running_elsewhere(conn, job, child), timeout=60, interval=0.05)
    elapsed = time.monotonic() - killed
    report(capsys, f"\nanother machine: task started again {elapsed:.2f} s after SIGKILL "
          f"(bound {OTHER_MACHINE_BOUND} s, liveness_timeout 10 s)")
    assert elapsed <= OTHER_MACHINE_BOUND
    assert job.attempt.hget() == "2"


def test_a_worker_restarted_with_the_same_listener_id_takes_its_tasks_back_at_once(
        workers, conn, capsys):
    """As a container restarted in place: same host name, same pid, so the same listener
    id; the worker that starts finds the record of the one that died, and takes its tasks
    back before it takes any, instead of waiting for their leases (ttr 60 s) to end."""
    job = Queue.named("long").enqueue("60")
    first = workers("--listener-id=box_1", "--ttr=60")
    wait_for(lambda: begins(conn, job))
    child, killed = kill_worker_and_task(conn, first, job)
    workers("--listener-id=box_1", "--ttr=60")
    wait_for(lambda: len(begins(conn, job)) > 1, timeout=50, interval=0.01)
    elapsed = time.monotonic() - killed
    report(capsys, f"\nsame listener id: task started again {elapsed:.2f} s after SIGKILL "
          f"(bound {SAME_MACHINE_BOUND} s; ttr 60 s)")
    assert elapsed <= SAME_MACHINE_BOUND
    assert begins(conn, job)[-1]["pid"] != child and job.attempt.hget() == "2"
    # the new worker is listed and beating under the id it shares with the dead one
    assert "box_1" in conn.smembers("blueque_listeners_long")
    assert conn.zscore("blueque:workers", "box_1") is not None


def test_a_task_whose_own_process_lives_is_never_taken_from_another_machine(workers, conn):
    job = Queue.named("long").enqueue("14")
    first = workers()
    wait_for(lambda: begins(conn, job))
    beating(conn, workers(machine="another-machine"))
    kill(first.pid)  # the worker alone: its task process lives on and says so
    first.wait()
    wait_for(lambda: job.status.hget() == "complete", timeout=40)
    assert len(begins(conn, job)) == 1
    assert job.attempt.hget() == "1"


def test_a_worker_stopped_for_a_few_seconds_keeps_its_task(workers, conn):
    job = Queue.named("long").enqueue("6")
    first = workers("--max-loops=1")
    wait_for(lambda: begins(conn, job))
    beating(conn, workers(machine="another-machine"))
    beating(conn, workers())
    kill(first.pid, signal.SIGSTOP)
    time.sleep(4)
    kill(first.pid, signal.SIGCONT)
    wait_for(lambda: job.status.hget() == "complete", timeout=30)
    assert len(begins(conn, job)) == 1
    assert job.attempt.hget() == "1"


# -- a worker killed during the exchange with its task process ------------------------------
#: the worker classes of relay_workers.py, by the point where they die of SIGKILL
KILL_POINTS = {"before writing": "relay_workers.KilledBeforeWriting",
               "between writing and answering": "relay_workers.KilledBeforeAnswering"}
#: a RecordingJob's parameters, the worker's options, then the status and the last hooks
OUTCOMES = {
    "complete": ('{"n": 1}', (), "complete", ["ran", "on_success"]),
    "failed": ('{"fail": "no"}', ("--requeue-times=0",), "failed", ["on_error"]),
    "requeued": ('{"fail": "no"}', ("--requeue-times=1", "--requeue-delay-delta=0"),
                 "pending", ["on_error", "on_requeued"]),
}


@pytest.mark.parametrize("outcome", list(OUTCOMES))
@pytest.mark.parametrize("point", list(KILL_POINTS))
def test_a_worker_killed_during_the_exchange_loses_no_outcome_and_records_none_twice(
        redis_url, conn, tmp_path, capsys, point, outcome):
    """The task process sent its outcome; its worker dies of SIGKILL before writing it (the
    task process, orphaned, records it itself), or once it wrote it but before answering
    (the task process's own step is refused: it finds its attempt's outcome stored and
    goes on to its hooks as recorded). Either way: that outcome, once; the hooks that
    follow it, in the task process, once; nothing skipped, nothing failed in its stead."""
    parameters, options, status, hooks = OUTCOMES[outcome]
    job = Queue.named("relay").enqueue(parameters)
    log = tmp_path / "worker.log"
    with open(log, "w") as output:
        worker = start_worker(redis_url, f"--pythonpath={HERE}", "--queues=relay",
                              "--job-model=jobs.RecordingJob", "--timeout=0.2", "--no-title",
                              f"--worker-class={KILL_POINTS[point]}", *options,
                              stdout=output, stderr=subprocess.STDOUT)
    assert worker.wait(timeout=30) == -signal.SIGKILL  # it died at that point
    wait_for(lambda: hooks[-1] in [e["event"] for e in events(conn, job.task_id)], timeout=20)
    seen = events(conn, job.task_id)
    task_process = {e["pid"] for e in seen if e["event"] == "run"}
    assert [e["event"] for e in seen] == ["on_started", "run", *hooks]
    assert {e["pid"] for e in seen} == task_process and worker.pid not in task_process
    assert (job.status.hget(), job.attempt.hget()) == (status, "1")
    assert "the task process records its outcome itself" in log.read_text()
    if outcome == "complete":
        assert job.result.hget() == '{"done":1}'
        assert conn.lrange("blueque_complete_tasks_relay", 0, -1) == [job.task_id]
        assert Error.collection(job_pk=job.task_id).instances() == []
    else:
        assert job.error.hget() == "ValueError: no"
        errors = Error.collection(job_pk=job.task_id).instances()
        assert [(e.type.hget(), e.attempt.hget()) for e in errors] == [("ValueError", "1")]
    if outcome == "requeued":  # in line: the next reserve takes it, in its next attempt
        taken, _ = Queue.reserve_from(["relay"], "next.host_1", pid=1)
        assert (taken.task_id, taken.task.attempt) == (job.task_id, 2)
    who = "the task process" if point == "before writing" else "the worker, then recognized"
    report(capsys, f"\nworker killed {point}, {outcome}: recorded once (by {who}), "
           f"{', '.join(hooks)} in the task process")
