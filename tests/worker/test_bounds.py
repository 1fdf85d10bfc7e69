"""The bounds of a task and the hand-over of deploys (issue #32), on real processes: a
task that allocates twice its `max_memory`, one that spins past its `cpu_limit`, one
that starts a grandchild and passes its `max_run_time`, a soft time limit caught to save
a checkpoint, the peak memory noted on the task, and a worker stopping with
`on_terminate="release"` whose 60-step task another worker resumes from its checkpoint.
After each bound, the worker goes on with its next task.

The tests print (past pytest's capture) how long a release took to be resumed.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import time

import pytest
from bounded_jobs import BoundedJob, steps_key
from helpers import kill, start_worker, wait_for
from jobs import events

from limpyd_blueque import ConfigurationError, Error, Queue, Worker
from limpyd_blueque.operations.web import WebSettings, create_app
from limpyd_blueque.protocol.bounds import parse_size
from limpyd_blueque.protocol.keys import keyspace

pytestmark = pytest.mark.timeout(90)
K = keyspace()
MB = 1024 * 1024


def running(pid):
    """True while `pid` runs (a zombie, ended but not collected yet, does not)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            text = stat.read()
    except FileNotFoundError:
        return False
    return text[text.rfind(b")") + 2:].split()[0] != b"Z"


def run_worker(queue_name, loops, **settings):
    """Run a forking worker in this process until it took `loops` tasks and they ended."""
    Worker(queues=[queue_name], job_model=BoundedJob, max_loops=loops, timeout=0.1,
           logger_level=logging.CRITICAL, **settings).run()


def enqueue(queue_name, do, **options):
    parameters = {key: options.pop(key) for key in list(options)
                  if key in ("bytes", "hold", "stubborn", "n", "step", "resumed_step", "deaf",
                             "busy", "hook_seconds")}
    return Queue.named(queue_name).enqueue({"do": do, **parameters}, model=BoundedJob,
                                           **options)


def failure(job):
    """The type and message of the one `Error` stored for `job`."""
    errors = Error.collection_for_job(job).instances()
    assert len(errors) == 1
    return errors[0].type.hget(), errors[0].message.hget()


def assert_next_task_completes(job):
    assert job.status.hget() == "complete" and job.result.hget() == 'quick'


# -- memory ------------------------------------------------------------------------------------
def test_a_task_over_its_max_memory_is_stopped_and_failed_and_the_worker_goes_on(conn):
    job = enqueue("mem", "allocate", bytes=128 * MB)
    after = enqueue("mem", "quick")
    started = time.monotonic()
    run_worker("mem", 2, max_memory="64M")
    assert time.monotonic() - started < 20
    assert job.status.hget() == "failed"
    kind, message = failure(job)
    assert kind == "MemoryLimitExceeded"
    assert "over its max_memory of 64 MiB (67108864 bytes)" in message
    reached = int(message.split("reached ")[1].split("(")[1].split(" bytes")[0])
    assert reached > 64 * MB  # the size it reached, named
    assert int(job.peak_rss.hget()) > 64 * MB  # noted from the ended process
    assert_next_task_completes(after)


def test_the_task_s_own_max_memory_comes_before_its_queue_s_and_the_worker_s(conn):
    Queue.named("mem2").configure(max_memory="32M")
    assert Queue.named("mem2").settings()["max_memory"] == 32 * MB
    small = enqueue("mem2", "allocate", bytes=64 * MB)  # over its queue's 32M, not 1G
    allowed = enqueue("mem2", "allocate", bytes=64 * MB, hold=1, max_memory=512 * MB)
    run_worker("mem2", 2, max_memory="1G")
    assert small.status.hget() == "failed"
    assert failure(small)[0] == "MemoryLimitExceeded"
    assert "max_memory of 32 MiB" in failure(small)[1]
    assert allowed.max_memory.hget() == str(512 * MB)
    assert allowed.status.hget() == "complete" and allowed.result.hget() == str(64 * MB)


def test_every_finished_forked_task_notes_its_peak_memory_shown_by_inspect_and_dashboard(
        conn, redis_url):
    job = enqueue("peak", "quick")
    run_worker("peak", 1)
    assert job.status.hget() == "complete"
    peak = int(wait_for(lambda: job.peak_rss.hget(), timeout=5))
    assert 1 * MB < peak < 4096 * MB
    inspect = ["blueque", f"--redis-url={redis_url}", "inspect", job.task_id]
    shown = json.loads(subprocess.run([*inspect, "--json"], capture_output=True, text=True,
                                      timeout=30, check=True).stdout)
    assert shown["peak_rss"] == peak
    table = subprocess.run(inspect, capture_output=True, text=True, timeout=30,
                           check=True, env={**os.environ, "COLUMNS": "200"}).stdout
    assert f"({peak} bytes)" in table and "MiB" in table
    body = create_app(WebSettings()).test_client().get(f"/tasks/{job.task_id}")
    assert f"({peak} bytes)" in body.get_data(as_text=True)


# -- CPU ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("stubborn", [False, True], ids=["raised", "killed"])
def test_a_task_past_its_cpu_limit_fails_with_cpu_limit_exceeded(conn, stubborn):
    job = enqueue("cpu", "spin", cpu_limit=1, stubborn=stubborn)
    after = enqueue("cpu", "quick")
    started = time.monotonic()
    run_worker("cpu", 2)
    assert time.monotonic() - started < 20
    assert job.status.hget() == "failed"
    kind, message = failure(job)
    assert kind == "CpuLimitExceeded"
    assert "cpu_limit of 1 CPU seconds" in message
    caught = [e for e in events(conn, job.task_id) if e["event"] == "caught"]
    assert caught and caught[0]["type"] == "CpuLimitExceeded"  # raised in the task first
    assert_next_task_completes(after)


# -- time --------------------------------------------------------------------------------------
def test_max_run_time_kills_the_whole_process_group_grandchildren_included(conn):
    job = enqueue("hard", "grandchild", max_run_time=4)
    after = enqueue("hard", "quick")
    run_worker("hard", 2)
    assert job.status.hget() == "failed"
    kind, message = failure(job)
    assert kind == "TimeLimitExceeded"
    assert "maximum run time of 4 seconds" in message
    family = next(e for e in events(conn, job.task_id) if e["event"] == "family")
    for pid in (family["child"], family["grandchild"]):
        wait_for(lambda pid=pid: not running(pid), timeout=5)
    assert_next_task_completes(after)


def test_a_soft_time_limit_is_raised_in_the_task_which_saves_its_place(conn):
    job = enqueue("soft", "soft", soft_time_limit=1, max_run_time=20)
    run_worker("soft", 1)
    assert job.status.hget() == "complete" and job.result.hget() == 'saved'
    soft = next(e for e in events(conn, job.task_id) if e["event"] == "soft")
    assert 0.9 <= soft["after"] < 2.0  # within a second of the limit (its code's start)
    assert job.last_checkpoint() == {"saved": True}


def test_a_soft_time_limit_met_while_the_task_talks_to_its_worker_leaves_the_line_clear(
        conn):
    # the limit falls, sooner or later, while a checkpoint waits for the worker's answer:
    # held back until the answer is read, it never leaves one unread for the outcome
    jobs = [enqueue("soft", "soft", soft_time_limit=0.3, busy=True) for _ in range(5)]
    run_worker("soft", len(jobs))
    for job in jobs:
        assert job.status.hget() == "complete" and job.result.hget() == "saved"
        names = [e["event"] for e in events(conn, job.task_id)]
        assert "on_success" in names and "on_skipped" not in names


def test_in_process_the_time_limits_cover_the_task_s_code_not_its_hooks(conn):
    job = enqueue("inhooks", "quick", soft_time_limit=0.2, max_run_time=0.3,
                  hook_seconds=0.6)
    run_worker("inhooks", 1, fork=False)
    assert job.status.hget() == "complete"
    assert [e["event"] for e in events(conn, job.task_id)][-1] == "on_success"


def test_in_process_a_soft_limit_at_the_hard_one_raises_only_the_hard_one(conn):
    job = enqueue("inboth", "spin", soft_time_limit=0.5, max_run_time=0.5)
    run_worker("inboth", 1, fork=False)
    assert failure(job)[0] == "TimeLimitExceeded"
    assert job.status.hget() == "failed"


def test_in_process_the_soft_and_hard_time_limits_raise_in_the_task(conn):
    soft = enqueue("inproc", "soft", soft_time_limit=0.5)
    hard = enqueue("inproc", "spin", max_run_time=0.5)
    run_worker("inproc", 2, fork=False)
    assert soft.result.hget() == 'saved'
    assert hard.status.hget() == "failed"
    assert failure(hard)[0] == "TimeLimitExceeded"


@pytest.mark.parametrize("settings, named", [
    ({"max_memory": "1G"}, "max_memory needs fork=True"),
    ({"cpu_limit": 5}, "cpu_limit needs fork=True"),
    ({"on_terminate": "release"}, "on_terminate='release' needs fork=True"),
])
def test_an_in_process_worker_refuses_the_bounds_it_cannot_hold(settings, named):
    with pytest.raises(ConfigurationError, match=named):
        Worker(queues=["q"], fork=False, **settings)


@pytest.mark.parametrize("text, size", [("512M", 512 * MB), ("2G", 2048 * MB),
                                        ("1.5GB", int(1.5 * 1024 * MB)), ("300KiB", 300 * 1024),
                                        ("4096", 4096), (1000, 1000)])
def test_sizes_read_with_their_unit(text, size):
    assert parse_size(text) == size
    assert Worker(queues=["q"], max_memory=text).max_memory == size


@pytest.mark.parametrize("bad", ["lots", "-1M", "0", "12X", True, None, "1e400"])
def test_a_bad_size_is_refused_with_a_message_naming_it(bad):
    with pytest.raises(ConfigurationError, match="max_memory"):
        parse_size(bad)
    with pytest.raises(ConfigurationError, match="max_memory"):
        Queue.named("q").enqueue("x", max_memory=bad)


def test_the_command_line_takes_sizes_and_refuses_bad_ones(redis_url):
    ok = subprocess.run(["blueque-worker", f"--redis-url={redis_url}", "--queues=q",
                         "--max-memory=2G", "--cpu-limit=30", "--soft-time-limit=60",
                         "--on-terminate=release", "--release-timeout=5", "--dry-run"],
                        capture_output=True, text=True, timeout=30)
    assert ok.returncode == 0, ok.stderr
    bad = subprocess.run(["blueque-worker", f"--redis-url={redis_url}", "--queues=q",
                          "--max-memory=lots"], capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2
    assert "--max-memory" in bad.stderr and "'lots'" in bad.stderr
    assert "Traceback" not in bad.stderr


# -- hand-over ---------------------------------------------------------------------------------
def steps_run(conn, job):
    return [tuple(json.loads(entry)) for entry in conn.lrange(steps_key(job.task_id), 0, -1)]


def start(redis_url, name, *extra):
    return start_worker(redis_url, "--queues=hand", "--job-model=bounded_jobs.BoundedJob",
                        f"--listener-id={name}.host_1", "--on-terminate=release", "--timeout=0.2",
                        "--liveness-interval=0.2", "--liveness-timeout=2", *extra)


def listening(conn, name):
    return f"{name}.host_1" in conn.smembers(K.listeners("hand"))


@pytest.mark.parametrize("deaf, ordered", [(False, False), (True, False), (False, True)],
                         ids=["returns-release", "past-timeout", "order-then-signal"])
def test_a_released_task_is_resumed_by_another_worker_from_its_checkpoint(
        conn, redis_url, capsys, deaf, ordered):
    workers = {name: start(redis_url, name, "--release-timeout=1") for name in ("a", "b")}
    try:
        wait_for(lambda: all(listening(conn, name) for name in workers), timeout=30)
        job = enqueue("hand", "steps", n=60, step=0.2, resumed_step=0.01, deaf=deaf)
        wait_for(lambda: len(steps_run(conn, job)) >= 20, timeout=30)
        holder = job.node.hget().split(".")[0]
        (other,) = set(workers) - {holder}
        released = time.monotonic()
        if ordered:  # as an orchestrator may: the order, then the signal (one stop)
            assert Queue.tell_worker(f"{holder}.host_1", "stop")
            time.sleep(1)
        workers[holder].send_signal(signal.SIGTERM)
        assert workers[holder].wait(timeout=30) == 0
        wait_for(lambda: job.node.hget() == f"{other}.host_1", timeout=10)
        resumed = time.monotonic() - released
        wait_for(lambda: job.status.hget() == "complete", timeout=30)
    finally:
        for process in workers.values():
            kill(process.pid)
            process.wait()
    with capsys.disabled():
        print(f"\nreleased ({'killed at its release_timeout' if deaf else 'returned Release'})"
              f" and resumed by another worker in {resumed:.2f} s")
    assert resumed < 10
    steps = steps_run(conn, job)
    done = [step for _, step in steps]
    attempts = [attempt for attempt, _ in steps]
    if not deaf:  # each step once: the task saved its place after each
        assert done == list(range(60))
    else:  # killed between two steps or right after one: at most one step run twice
        assert sorted(set(done)) == list(range(60)) and len(done) - 60 <= 1
    assert attempts[0] == "1" and attempts[-1] == "2"
    assert job.result.hget() == 'all steps'
    # the released attempt is fenced off: nothing its old process sends is recorded
    assert not job.complete("late", listener_id=f"{holder}.host_1", attempt=1)
    assert not Error.collection_for_job(job)  # not a failure
    assert job.uncounted.hget() == "1"  # its attempt not counted
    names = [e["event"] for e in events(conn, job.task_id)]
    assert "on_stop_requested" in names
    assert ("releasing" in names) is not deaf
