"""A dead worker's tasks come back in seconds; a slow one keeps them. Measured on real
`blueque-worker` processes killed with SIGKILL; each test prints its figure.

"Another machine" is a worker whose machine identity differs (`LIMPYD_BLUEQUE_MACHINE_ID`,
as a worker in another pid namespace or on another host has): it cannot look at the dead
worker's processes and must rely on the missed heartbeats.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from helpers import kill, kill_task_processes, start_worker, wait_for
from jobs import events

from limpyd_blueque import Queue

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
