"""Tasks, callbacks and worker classes for the tests of operating long tasks (issue 12):
progress, checkpoints and resume, stall detection, cancelling a running task.

Everything records what happens in the Redis list of tests/jobs.py (`jobs.record`), so
a test reads the events of forked task processes, of worker processes and of its own
process alike; `helpers.kill_task_processes` then finds every process to clean up.
A task's parameters (JSON) say what it does; `ControlledJob` also obeys a Redis key the
test writes while it runs (`control`). `WorkerProcesses` starts `blueque-worker`
processes for a test and kills them (and their task processes) after it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from helpers import kill, kill_task_processes, start_worker, wait_for
from jobs import record

from limpyd_blueque import Canceled, Job, Worker

#: how long any task here runs at most, whatever it was told (no process outlives a run)
LONGEST = 30.0


def params(job):
    return json.loads(job.known.get("parameters") or job.parameters.hget() or "{}")


def attempt_of(job):
    return int(job.known.get("attempt") or job.attempt.hget() or 0)


def control_key(task_id):
    return f"test:control:{task_id}"


def control(client, job, order):
    """Tell a running `ControlledJob` what to do next: "move", "stall" or "finish"."""
    client.set(control_key(job.task_id), order)


def items_key(task_id):
    return f"test:items:{task_id}"


def processed(client, job):
    """The `(attempt, item)` pairs an `ItemsJob` processed, in order."""
    return [tuple(json.loads(entry)) for entry in client.lrange(items_key(job.task_id), 0, -1)]


class OperatingJob(Job):
    """A task whose parameters say what to do; it records its hooks.

    Parameters (all optional): `seconds` (how long it runs, default 0), `progress`
    (call `set_progress` every `tick` seconds as it runs, recording `canceled_raised` when
    that raises `Canceled`), `cooperative` (poll `cancel_requested()` every tick; once it
    turns true, record `cancel_seen` and call `set_progress`, which must raise
    `Canceled`), `spawn` (start a child process that sleeps, in the task's process
    group, recorded as a `child` event), `ignore_term` (ignore SIGTERM), `record_term`
    (on SIGTERM, record `sigterm`, then die of it), `tick` (0.05).
    """

    def run(self, queue):
        options = params(self)
        record(self, "running", attempt=attempt_of(self))
        if options.get("ignore_term"):
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if options.get("record_term"):
            signal.signal(signal.SIGTERM, lambda signum, frame: self.die_of_sigterm())
        if options.get("spawn"):
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
            record(self, "child", pid=child.pid)
        seconds = float(options.get("seconds", 0))
        tick = float(options.get("tick", 0.05))
        if not (options.get("progress") or options.get("cooperative")):
            time.sleep(seconds)
            record(self, "finished")
            return {"slept": seconds}
        start = time.monotonic()
        done = 0
        while time.monotonic() - start < seconds:
            if options.get("cooperative") and self.cancel_requested():
                record(self, "cancel_seen")
                self.reported_progress(done + 1)
                record(self, "no_canceled_raised")
                return "went on"
            if options.get("progress"):
                done += 1
                self.reported_progress(done)
            time.sleep(tick)
        record(self, "finished")
        return {"ticks": done}

    def die_of_sigterm(self):
        record(self, "sigterm")
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    def reported_progress(self, done):
        """`set_progress`, recording whether it raised `Canceled` (then raised again)."""
        try:
            self.set_progress(done, None, f"tick {done}")
        except Canceled:
            record(self, "canceled_raised", done=done)
            raise

    # -- the hooks, recorded ------------------------------------------------------------------
    def on_started(self, queue):
        record(self, "on_started", attempt=attempt_of(self))

    def on_success(self, queue, result):
        record(self, "on_success", result=result)

    def on_error(self, queue, exception, trace):
        record(self, "on_error", type=type(exception).__name__, message=str(exception))

    def on_requeued(self, queue):
        record(self, "on_requeued")

    def on_canceled(self, queue):
        record(self, "on_canceled", queue=queue.pk.get())

    def on_stalled(self, queue):
        record(self, "on_stalled", queue=queue.pk.get())


class ProgressJob(OperatingJob):
    """Processes `total` items, one every `step` seconds, telling its progress after each:
    `set_progress(n, total, "item n of total")`."""

    def run(self, queue):
        return count_items(self)


def count_items(job):
    options = params(job)
    total, step = int(options["total"]), float(options["step"])
    record(job, "running", attempt=attempt_of(job))
    for done in range(1, total + 1):
        time.sleep(step)
        job.set_progress(done, total, f"item {done} of {total}")
    return {"items": total}


def progress_callback(job, queue):
    """`ProgressJob`'s work as a callback: progress told on the job it is given."""
    return count_items(job)


def tight_progress(job, queue):
    """Calls `set_progress` `calls` times (when `progress`) spread evenly over `seconds`
    of busy loop: the same work with and without progress, for counting round trips."""
    options = params(job)
    calls, seconds = int(options["calls"]), float(options["seconds"])
    start = time.perf_counter()
    for done in range(1, calls + 1):
        deadline = start + seconds * done / calls
        while time.perf_counter() < deadline:
            pass
        if options.get("progress"):
            job.set_progress(done, calls)
    return "ok"


class ItemsJob(OperatingJob):
    """Processes items 0..n-1 from its last checkpoint, pushing `[attempt, item]` on its
    items list (`processed`) for each, and checkpointing `{"next": i + 1}` after every
    `every` items (recorded as `checkpoint` events, with what `checkpoint` returned).

    On its first attempt, right after item `stop_at`, it does `stop`: "fail" (raises),
    "release" (gives the task back), or "pause" (records `paused` and sleeps, to be killed).
    """

    def run(self, queue):
        options = params(self)
        attempt = attempt_of(self)
        state = self.last_checkpoint()
        first = state["next"] if state else 0
        record(self, "resumed", attempt=attempt, first=first)
        client = self.client()
        for item in range(first, int(options["n"])):
            client.rpush(items_key(self.task_id), json.dumps([attempt, item]))
            if (item + 1) % int(options["every"]) == 0:
                stored = self.checkpoint({"next": item + 1})
                record(self, "checkpoint", attempt=attempt, next=item + 1, stored=stored)
            if attempt == 1 and item == options.get("stop_at"):
                stop = options["stop"]
                if stop == "fail":
                    raise RuntimeError(f"failed after item {item}")
                if stop == "release":
                    self.release()
                    return "released"
                record(self, "paused", item=item)
                time.sleep(LONGEST)
        return {"items": int(options["n"])}


class ControlledJob(OperatingJob):
    """Tells progress `0` at once, then obeys its control key (`control`) every 50 ms:
    "move" tells progress one step further, "stall" (or no order) tells nothing,
    "finish" returns. From attempt `finish_from` on (when given) it returns at once."""

    def run(self, queue):
        options = params(self)
        attempt = attempt_of(self)
        record(self, "running", attempt=attempt)
        if options.get("finish_from") and attempt >= options["finish_from"]:
            record(self, "finished", attempt=attempt)
            return "at once"
        client = self.client()
        done = 0
        self.set_progress(done, None, "started")
        deadline = time.monotonic() + LONGEST
        while time.monotonic() < deadline:
            order = client.get(control_key(self.task_id))
            if isinstance(order, bytes):
                order = order.decode()
            if order == "finish":
                break
            if order == "move":
                done += 1
                self.set_progress(done, None, "moving")
            time.sleep(0.05)
        record(self, "finished", attempt=attempt)
        return {"moves": done}


# -- workers -----------------------------------------------------------------------------------
class HookedWorker(Worker):
    """A worker recording the worker hooks of issue 12 (then doing what they do)."""

    def job_canceled(self, job, queue):
        record(job, "job_canceled", queue=queue.pk.get())
        super().job_canceled(job, queue)

    def job_stalled(self, job, queue):
        record(job, "job_stalled", queue=queue.pk.get())
        super().job_stalled(job, queue)


class ReleasingWorker(HookedWorker):
    """Gives a stalled task back (pending again), recording the outcome and the status."""

    def job_stalled(self, job, queue):
        super().job_stalled(job, queue)
        done = job.release()
        record(job, "stall_handled", done=done, status=job.status.hget())


class FailingWorker(HookedWorker):
    """Fails a stalled task, recording the outcome and the status."""

    def job_stalled(self, job, queue):
        super().job_stalled(job, queue)
        done = job.fail("stalled for too long")
        record(job, "stall_handled", done=done, status=job.status.hget())


class WorkerProcesses:
    """`blueque-worker` processes of one test, with the short intervals these tests need,
    each logging to a file of `log_dir`; `stop_all` kills them and their task processes."""

    BASE = ("--timeout=0.2", "--liveness-interval=0.2", "--progress-interval=0.2",
            "--cancel-grace=1", "--worker-class=operating_jobs.HookedWorker",
            "--job-model=operating_jobs.OperatingJob", "--no-title")

    def __init__(self, redis_url, log_dir):
        self.redis_url = redis_url
        self.log_dir = log_dir
        self.started = []

    def start(self, *options, fork=True):
        """Start a worker; later options override the base ones (argparse: last wins)."""
        log = open(self.log_dir / f"worker-{len(self.started)}.log", "w")  # noqa: SIM115
        process = start_worker(self.redis_url, *self.BASE, "--fork" if fork else "--no-fork",
                               *options, stdout=log, stderr=subprocess.STDOUT)
        log.close()  # the child has its own copy
        self.started.append(process)
        return process

    def logs(self):
        return "\n".join(path.read_text() for path in sorted(self.log_dir.glob("worker-*.log")))

    def stop_all(self, conn):
        for process in self.started:
            kill(process.pid)
            process.wait()
        kill_task_processes(conn)


def task_pid(entries, event="running", attempt=None):
    """The pid of the process that recorded `event` (of `attempt`, when given)."""
    for entry in entries:
        if entry["event"] == event and (attempt is None or entry.get("attempt") == attempt):
            return entry["pid"]
    return None


def wait_status(job, status, workers=None, timeout=10.0):
    """Wait until `job` has `status`; else fail saying where it is, with the workers' logs."""
    try:
        wait_for(lambda: job.status.hget() == status, timeout=timeout, interval=0.005)
    except AssertionError:
        data = job.data()
        logs = workers.logs()[-4000:] if workers is not None else ""
        raise AssertionError(f"task {job.task_id} is {data.status} (attempt {data.attempt}), not "
                             f"{status}, after {timeout} s; its fields: {data.extra}\n"
                             f"worker logs:\n{logs}") from None


#: run a test in both modes: each task in a process of its own, and in the worker's
MODES = pytest.mark.parametrize("fork", [True, False], ids=["forked", "in-process"])


def names(entries):
    """The events of recorded entries, in order."""
    return [entry["event"] for entry in entries]


def stuck_progress(job, queue):
    """Reports the same progress again and again for `seconds`: it does not move."""
    deadline = time.time() + json.loads(job.known["parameters"])["seconds"]
    while time.time() < deadline:
        job.set_progress(1, 10, "stuck")
        time.sleep(0.05)
    return "done"
