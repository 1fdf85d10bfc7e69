"""`blueque-worker` as users run it: a real process, its options, its signals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import TESTS, alive, wait_for, worker_command
from jobs import events

from limpyd_blueque import Error, Queue

pytestmark = pytest.mark.timeout(60)

SCRIPT = TESTS.parent / "scripts" / "blueque-worker"


def run_worker(redis_url, *options, timeout=30):
    return subprocess.run(worker_command(redis_url, *options), capture_output=True, text=True,
                          timeout=timeout)


def test_every_option_reaches_the_worker(redis_url):
    result = run_worker(
        redis_url, "--queues=a,b", "--callback=jobs.callback",
        "--worker-class=limpyd_blueque.Worker",
        "--job-model=jobs.RecordingJob", "--queue-model=limpyd_blueque.Queue",
        "--job-models=jobs.FragileHookJob,jobs.DelayingJob",
        "--error-model=limpyd_blueque.Error", "--concurrency=3", "--fork", "--max-loops=7",
        "--max-duration=99.5", "--timeout=4", "--no-terminate-gracefully",
        "--on-terminate=detach", "--terminate-timeout=12", "--no-save-errors",
        "--no-save-tracebacks", "--requeue-times=2", "--requeue-delay-delta=15",
        "--requeue-priority-delta=-3", "--ttr=120", "--heartbeat-interval=10",
        "--schedule-interval=2", "--max-attempts=9", "--max-run-time=3600", "--clean-interval=5",
        "--outcome-retry-timeout=20", "--listener-id=box.example_17", "--logger-name=my-jobs",
        "--logger-level=DEBUG", "--no-title", "--print-options", "--dry-run")
    assert result.returncode == 0, result.stderr
    options = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    assert options["queues"] == "['a', 'b']"
    assert options["callback"].startswith("<function callback")
    assert options["job_model"] == "<class 'jobs.RecordingJob'>"
    assert options["job_models"] == "(<class 'jobs.FragileHookJob'>, <class 'jobs.DelayingJob'>)"
    assert options["queue_model"] == repr(Queue)
    assert options["error_model"] == repr(Error)
    expected = {
        "concurrency": "3", "fork": "True", "max_loops": "7", "max_duration": "99.5",
        "timeout": "4.0", "terminate_gracefully": "False", "on_terminate": "'detach'",
        "terminate_timeout": "12.0", "save_errors": "False", "save_tracebacks": "False",
        "requeue_times": "2", "requeue_delay_delta": "15.0", "requeue_priority_delta": "-3",
        "ttr": "120.0", "heartbeat_interval": "10.0", "schedule_interval": "2.0",
        "max_attempts": "9", "max_run_time": "3600.0", "clean_interval": "5.0",
        "outcome_retry_timeout": "20.0",
        "listener_id": "'box.example_17'", "logger_name": "'my-jobs'", "logger_level": "10",
        "update_title": "False", "redis_url": redis_url,
    }
    assert {name: options[name] for name in expected} == expected
    assert "dry run: worker ready on queues a,b; no task run" in result.stdout


def test_no_fork_and_defaults(redis_url):
    result = run_worker(redis_url, "--queues=a", "--no-fork", "--print-options", "--dry-run")
    options = dict(line.split("=", 1) for line in result.stdout.splitlines() if "=" in line)
    assert (options["fork"], options["max_loops"], options["ttr"], options["update_title"]) == (
        "False", "1000", "60", "True")


@pytest.mark.parametrize("options, message", [
    ([], "no queues"),
    (["--queues=q", "--callback=nowhere.fn"], "cannot import callback 'nowhere.fn'"),
    (["--queues=q", "--max-loops=many"], "'many' is not a whole number"),
    (["--queues=q", "--concurrency=0"], "'0' must be at least 1"),
    (["--queues=q", "--worker-class=jobs.callback"], "is not a subclass of Worker"),
    (["--queues=q", "--worker-config=jobs.callback"], "is not a WorkerConfig subclass"),
])
def test_a_user_mistake_prints_one_line_and_exits_non_zero(redis_url, options, message):
    result = run_worker(redis_url, *options)
    assert result.returncode == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert "Traceback" not in result.stderr


def test_an_unreachable_redis_prints_one_line(redis_url):
    from limpyd_blueque.connection.embedded import free_port

    url = f"redis://127.0.0.1:{free_port()}/0"
    result = subprocess.run([sys.executable, "-m", "limpyd_blueque.cli", "--queues=q",
                             f"--redis-url={url}"], capture_output=True, text=True, timeout=30)
    assert result.returncode == 1
    assert result.stderr.strip() == result.stderr.strip().splitlines()[0]
    assert f"cannot reach Redis at {url}" in result.stderr


def test_script_shim_runs_the_same_main(redis_url, database):
    job = Queue.named("shim").enqueue("x")
    result = subprocess.run([sys.executable, str(SCRIPT), f"--redis-url={redis_url}",
                             f"--pythonpath={TESTS}", "--queues=shim", "--callback=jobs.callback",
                             "--max-loops=1", "--timeout=0.2"],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert job.status.hget() == "complete"
    assert "[shim|" in result.stderr and "complete" in result.stderr


# -- stopping a real worker during a long task -------------------------------------------------
@pytest.fixture
def long_task(redis_url, database, conn):
    """A worker process running a task that takes 2 seconds; the test then stops it."""
    started = []

    def start(*options, seconds="2"):
        job = Queue.named("long").enqueue(seconds)
        worker = subprocess.Popen(
            worker_command(redis_url, "--queues=long", "--callback=jobs.slow_callback",
                           "--timeout=0.2", *options),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        started.append(worker)
        begin = wait_for(lambda: [e for e in events(conn, job.pk.get()) if e["event"] == "begin"])
        return job, worker, begin[0]["pid"]

    yield start
    for worker in started:
        if worker.poll() is None:
            worker.kill()
    for entry in events(conn):
        if alive(entry["pid"]):
            os.kill(entry["pid"], signal.SIGKILL)


def test_sigterm_with_wait_finishes_the_running_task(long_task, conn):
    job, worker, _child = long_task("--on-terminate=wait")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=15) == 0
    assert job.status.hget() == "complete"
    assert [e["event"] for e in events(conn, job.pk.get())] == ["begin", "end"]
    assert conn.smembers("blueque_listeners_long") == set()


def test_sigterm_with_wait_and_deadline_requeues_the_task(long_task, conn):
    job, worker, child = long_task("--on-terminate=wait", "--terminate-timeout=0.3", seconds="30")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=20) == 0
    assert not alive(child)
    assert job.status.hget() == "pending"
    assert conn.lindex("blueque_pending_tasks_long", -1) == job.pk.get()  # taken next
    assert conn.scard("blueque_started_tasks_long") == 0


def test_sigterm_with_requeue_interrupts_and_puts_the_task_back(long_task, conn):
    job, worker, child = long_task("--on-terminate=requeue", seconds="30")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=20) == 0
    assert not alive(child)
    assert job.status.hget() == "pending"
    assert job.node.hget() is None and job.pid.hget() is None
    assert conn.zcard("blueque:leases:long") == 0
    assert job.uncounted.hget() == "1"  # the worker stopped: not the task's failure


def test_sigterm_with_detach_leaves_the_task_running_to_completion(long_task, conn):
    job, worker, child = long_task("--on-terminate=detach")
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=5) == 0
    assert alive(child)
    assert job.status.hget() == "started"
    # the listener stays registered so that the next worker of the host finds the task
    assert conn.scard("blueque_listeners_long") == 1
    wait_for(lambda: job.status.hget() == "complete", timeout=10)
    assert [e["event"] for e in events(conn, job.pk.get())] == ["begin", "end"]


def test_second_sigterm_interrupts_a_waiting_worker(long_task, conn):
    job, worker, _child = long_task("--on-terminate=wait", seconds="30")
    worker.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    assert worker.poll() is None
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(timeout=20) == 0
    assert job.status.hget() == "pending"


def process_title(pid):
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="reads titles from /proc")
def test_process_titles_show_state_queues_loops_and_task(long_task, conn):
    job, worker, child = long_task("--max-loops=5")
    title = wait_for(lambda: "[running]" in process_title(worker.pid) and process_title(worker.pid))
    assert title == (f"blueque-worker#{worker.pid} [running] queues=long loop=1/5 "
                     f"running={job.pk.get()}")
    assert process_title(child) == f"blueque-task#{child} [long] {job.pk.get()}"
