"""Tasks and worker classes for the tests of a task process that writes through its worker
(`limpyd_blueque.worker.relay`), imported by `blueque-worker` processes too
(`--pythonpath=tests/worker`).

The worker classes die of SIGKILL at a chosen point of the exchange with a task
process: when its outcome request has come whole but before the worker writes it
(`KilledBeforeWriting`), or once the worker wrote it but before it answers
(`KilledBeforeAnswering`). `SometimesKilled` does either now and then, for the crash
test (its rate in `$RELAY_KILL_RATE`, its kills logged in `$CRASH_LOG`).
"""

from __future__ import annotations

import json
import os
import random
import signal
import time
from pathlib import Path

from limpyd_blueque import Worker
from limpyd_blueque.worker.runners import ForkedRunner

HERE = Path(__file__).parent


def params(job):
    return json.loads(job.known.get("parameters") or "{}")


def quiet(job, queue):
    """Sleeps the seconds its parameters say ({"sleep": s}), touching no Redis of its own."""
    time.sleep(float(params(job).get("sleep", 0)))
    return "quiet"


def uses_redis(job, queue):
    """Writes to Redis from the task's own code: its process connects for it."""
    job.client().rpush("test:relay", job.task_id)
    return "wrote"


def reports(job, queue):
    """Reports progress (`steps` times) and checkpoints (one of `size` bytes at the end),
    through its worker; fails with `fail` when given."""
    options = params(job)
    steps = int(options.get("steps", 3))
    for step in range(steps):
        job.set_progress(step + 1, steps, f"step {step + 1}")
        assert job.checkpoint({"next": step + 1}) is True
    if options.get("size"):
        assert job.checkpoint({"blob": "x" * int(options["size"])}) is True
    if options.get("fail"):
        raise ValueError(options["fail"])
    return {"steps": steps}


def is_outcome_request(request):
    return request.get("ask") == "outcome"


def is_outcome_answer(reply):
    return reply.get("reply") in ("recorded", "refused")


def die():
    os.kill(os.getpid(), signal.SIGKILL)


class KillsBeforeWriting(ForkedRunner):
    def write(self, task, request):
        if is_outcome_request(request):
            die()  # the task process sent its outcome; nothing is written
        return super().write(task, request)


class KillsBeforeAnswering(ForkedRunner):
    def answer(self, task, reply):
        if is_outcome_answer(reply):
            die()  # the outcome is written; the task process is never told
        super().answer(task, reply)


class KilledBeforeWriting(Worker):
    def runner_class(self):
        return KillsBeforeWriting if self.fork else super().runner_class()


class KilledBeforeAnswering(Worker):
    def runner_class(self):
        return KillsBeforeAnswering if self.fork else super().runner_class()


def kill_now(point, task):
    """For the crash test: now and then (`$RELAY_KILL_RATE`), log the kill point in
    `$CRASH_LOG` and die there."""
    rate = float(os.environ.get("RELAY_KILL_RATE") or 0)
    if rate and random.random() < rate:
        with open(os.environ["CRASH_LOG"], "a") as log:
            log.write(f"{point} {task.task_id} {os.getpid()}\n")
        die()


class KillsSometimes(ForkedRunner):
    def write(self, task, request):
        if is_outcome_request(request):
            kill_now("killed-before-writing", task)
        return super().write(task, request)

    def answer(self, task, reply):
        if is_outcome_answer(reply):
            kill_now("killed-before-answering", task)
        super().answer(task, reply)


class SometimesKilled(Worker):
    def runner_class(self):
        return KillsSometimes if self.fork else super().runner_class()
