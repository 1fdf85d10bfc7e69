"""Running real worker processes from tests, and waiting on them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).parent
BIN = Path(sys.executable).parent


def script(name, module):
    """The installed console script `name` (as users run it), else `python -m module`."""
    path = BIN / name
    return [str(path)] if path.exists() else [sys.executable, "-m", module]


def worker_command(redis_url, *options):
    """The command line of a `blueque-worker` on `redis_url` that can import tests/jobs.py."""
    return [sys.executable, "-m", "limpyd_blueque.cli", f"--redis-url={redis_url}",
            f"--pythonpath={TESTS}", *options]


def start_worker(redis_url, *options, **popen):
    popen.setdefault("stdout", subprocess.DEVNULL)
    popen.setdefault("stderr", subprocess.DEVNULL)
    return subprocess.Popen(worker_command(redis_url, *options), **popen)


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie child of this process is not alive
        done, _ = os.waitpid(pid, os.WNOHANG)
        return not done
    except ChildProcessError:
        return True


def kill(pid, signum=signal.SIGKILL):
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def wait_for(predicate, timeout=10.0, interval=0.02):
    """The first truthy value of `predicate()`, or AssertionError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met in {timeout} seconds")


def dead_pid():
    """A pid that no process has any more."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def kill_task_processes(conn):
    """Kill every process that recorded a task event, except this one (in-process tasks
    record this very process): no task process outlives its test."""
    from jobs import events

    for entry in events(conn):
        if entry["pid"] != os.getpid():
            kill(entry["pid"])


LISTENER = "worker.example.com_4242"
OTHER = "other.example.com_7"


def take(queue_name, listener=LISTENER, **options):
    """The job of the next task `listener` reserves from `queue_name` (None: none)."""
    from limpyd_blueque import Queue

    job, _ = Queue.reserve_from([queue_name], listener, **options)
    return job


def signals_scene(queue_name):
    """Queue `queue_name` with tasks of each figure a scheduler reads: 2 running (one
    started, one reserved), 2 held back in group `a` (max_running 1, its slot taken) and 3
    waiting (one of group `b`, one of priority 5, one of none); the expected
    `(waiting, running, held_back)`."""
    from limpyd_blueque import Queue

    queue = Queue.named(queue_name)
    queue.set_limit("a", max_running=1)
    queue.enqueue_many(list(range(3)), group="a")
    assert take(queue_name, pid=os.getpid()).group.hget() == "a"  # started
    assert take(queue_name) is None  # a is held back
    plain = queue.enqueue("reserved")
    assert take(queue_name).task_id == plain.task_id
    queue.enqueue("b", group="b")
    queue.enqueue("urgent", priority=5)
    queue.enqueue("plain")
    return 3, 2, 2


def read_events(path):
    """[(event, task id, pid)] of the task log, in order: begin, end, recorded."""
    if not path.exists():
        return []
    return [(event, task_id, int(pid)) for event, task_id, pid
            in (line.split() for line in path.read_text().splitlines())]


def read_runs(path):
    """{task id: [(pid, ended)]} from the task log."""
    begun, ended = defaultdict(list), set()
    for event, task_id, pid in read_events(path):
        if event == "begin":
            begun[task_id].append(pid)
        elif event == "end":
            ended.add((task_id, pid))
    return {task_id: [(pid, (task_id, pid) in ended) for pid in pids]
            for task_id, pids in begun.items()}


def fill_until_full(raw, margin=0):
    """Fill the server, then cap its memory at what it uses plus `margin` bytes."""
    raw.mset({f"filler{n}": "x" * 1000 for n in range(2000)})
    used = int(raw.info("memory")["used_memory"])
    raw.config_set("maxmemory-policy", "noeviction")
    raw.config_set("maxmemory", used + margin)
