"""Tasks for the worker tests. They record what happens in a Redis list, so a test can
read events from forked children and from other processes alike."""

from __future__ import annotations

import json
import os
import signal
import time

from limpyd_blueque import Delay, Job, Release

EVENTS = "test:events"


def record(job, event, **extra):
    entry = {"event": event, "task": job.pk.get(), "pid": os.getpid(), "at": time.time(), **extra}
    job.client().rpush(EVENTS, json.dumps(entry))


def events(client, task_id=None):
    entries = [json.loads(e) for e in client.lrange(EVENTS, 0, -1)]
    return [e for e in entries if task_id is None or e["task"] == task_id]


class RecordingJob(Job):
    """A job whose parameters say what to do: {"sleep": s, "fail": msg, "kill": true, ...}."""

    def params(self):
        return json.loads(self.known.get("parameters") or self.parameters.hget() or "{}")

    def run(self, queue):
        params = self.params()
        record(self, "run", queue=queue.pk.get(), attempt=self.known.get("attempt"),
               running=int(self.client().zcard(f"blueque:leases:{queue.pk.get()}")))
        if params.get("sleep"):
            time.sleep(params["sleep"])
        if params.get("kill"):
            os.kill(os.getpid(), signal.SIGKILL)
        if params.get("fail"):
            error = ValueError(params["fail"])
            error.code = params.get("code")
            raise error
        if params.get("unstorable"):
            return object()
        record(self, "ran")
        return {"done": params.get("n")}

    def on_started(self, queue):
        record(self, "on_started", queue=queue.pk.get())

    def on_success(self, queue, result):
        record(self, "on_success", result=result)

    def on_error(self, queue, exception, trace):
        record(self, "on_error", type=type(exception).__name__, message=str(exception),
               trace=bool(trace))

    def on_requeued(self, queue):
        record(self, "on_requeued")

    def on_skipped(self, queue):
        record(self, "on_skipped")


def callback(job, queue):
    """A plain function used with --callback."""
    record(job, "callback", queue=queue.pk.get())
    return "from-callback"


def slow_callback(job, queue):
    """Runs for the number of seconds in its parameters, then records its end."""
    record(job, "begin")
    time.sleep(float(job.known.get("parameters") or job.parameters.hget()))
    record(job, "end")
    return "slept"


def crash_task(job, queue):
    """For the crash test: log begin and end lines (task id, pid) in $CRASH_LOG, sleeping
    the number of seconds of its parameters in between."""
    path = os.environ["CRASH_LOG"]
    with open(path, "a") as log:
        log.write(f"begin {job.pk.get()} {os.getpid()}\n")
    time.sleep(float(job.known.get("parameters") or job.parameters.hget()))
    with open(path, "a") as log:
        log.write(f"end {job.pk.get()} {os.getpid()}\n")
    return "survived"


class CrashJob(Job):
    """`crash_task` as a job model that also logs a `recorded` line once its outcome is
    stored (`on_success` runs after the complete step succeeded)."""

    def run(self, queue):
        return crash_task(self, queue)

    def on_success(self, queue, result):
        with open(os.environ["CRASH_LOG"], "a") as log:
            log.write(f"recorded {self.pk.get()} {os.getpid()}\n")


def noop(job, queue):
    """Does nothing: for measuring what the worker itself costs."""
    return "ok"


class FragileHookJob(RecordingJob):
    """A RecordingJob whose on_error hook itself fails."""

    def on_error(self, queue, exception, trace):
        record(self, "on_error")
        raise RuntimeError("the hook failed too")


class DelayingJob(RecordingJob):
    """Asks to run again later on its first runs: {"delays": n, "wait": s, "raise": bool}."""

    def run(self, queue):
        params = self.params()
        runs = record_run(self)
        if runs <= params.get("delays", 1):
            if params.get("raise"):
                raise Delay(params.get("wait", 0.2))
            self.delay(params.get("wait", 0.2))
            return "ignored"
        return {"runs": runs}

    def on_delayed(self, queue):
        record(self, "on_delayed")


class OtherJob(RecordingJob):
    """A second model sharing a queue with RecordingJob."""

    def run(self, queue):
        record(self, "other", model=type(self).__name__)
        return "other"


def record_run(job):
    """Record a run of `job`; how many runs it had, this one included."""
    record(job, "run", attempt=job.known.get("attempt"))
    return sum(1 for entry in events(job.client(), job.pk.get()) if entry["event"] == "run")


def utube_callback(job, queue):
    """For the micro-queue test: record the task's start and end, with its utube key and
    its rank in that key, sleeping the seconds of its parameters in between."""
    params = json.loads(job.known.get("parameters") or "{}")
    client = job.client()
    start = time.time()
    time.sleep(params.get("sleep", 0.0))
    client.rpush("test:utube", json.dumps({"key": params["key"], "rank": params["rank"],
                                           "start": start, "end": time.time()}))
    return "ok"


def progressing(job, queue):
    """A task that reports its progress over 300 items, a tenth of a second each."""
    for item in range(300):
        job.set_progress(item, 300, f"item {item}")
        time.sleep(0.1)
    return "done"


class WorkflowJob(Job):
    """For the workflow fault test: logs `begin <id> <pid> <time>` and `end ...` in
    $CRASH_LOG around a sleep of its parameters' seconds (`fail`: raises at once), and
    `recorded <id> <pid>` once its outcome is stored; a node named `sum` returns how many
    results its parents passed it, one named `grow:<n>` adds n nodes to its workflow."""

    def run(self, queue):
        path = os.environ["CRASH_LOG"]
        parameters = self.known.get("parameters") or self.parameters.hget()
        with open(path, "a") as log:
            log.write(f"begin {self.pk.get()} {os.getpid()} {time.time()!r}\n")
        if parameters == "fail":
            raise ValueError("this node fails")
        if parameters == "sum":
            return str(len(self.parent_results()))
        if parameters.startswith("grow:"):  # adds that many nodes, after a pause
            time.sleep(0.5)
            workflow = self.workflow()
            for _ in range(int(parameters[5:])):
                workflow.add(queue.pk.get(), "0.2")
            workflow.submit()
            time.sleep(0.5)
            parameters = "0"
        time.sleep(float(parameters))
        with open(path, "a") as log:
            log.write(f"end {self.pk.get()} {os.getpid()} {time.time()!r}\n")
        return "ok"

    def on_success(self, queue, result):
        with open(os.environ["CRASH_LOG"], "a") as log:
            log.write(f"recorded {self.pk.get()} {os.getpid()} {time.time()!r}\n")


def fail_callback(job, queue):
    """Always fails (for the retry policy's command line test)."""
    raise RuntimeError("always fails")


def ending_callback(job, queue):
    """Runs `sleep` seconds, then ends as `end` says: complete, fail, release (its first
    run), delay or bury (a task the test cancels meanwhile sleeps long): {"end": ...,
    "sleep": s}."""
    params = json.loads(job.known.get("parameters") or job.parameters.hget())
    record(job, "begin")
    time.sleep(params.get("sleep", 0.4))
    end = params["end"]
    record(job, "end", end=end)
    if end == "fail":
        raise RuntimeError("ends by failing")
    if end == "release" and record_run(job) == 1:  # released once, then done
        return Release
    if end == "delay":
        raise Delay(60)
    if end == "bury":
        job.bury("poison")
    return "ok"
