"""Tasks for the tests of bounds and hand-overs (issue #32): each does what its
parameters (JSON) say, and records what happens with `jobs.record`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from jobs import record

from limpyd_blueque import Job, Release, SoftTimeLimitExceeded

#: how long any task here runs at most, whatever it was told
LONGEST = 30.0


def steps_key(task_id):
    return f"test:steps:{task_id}"


class BoundedJob(Job):
    """`{"do": ...}`: "allocate" (`bytes` of memory, held `hold` seconds), "spin" (a busy loop; with
    `stubborn`, it catches what is raised in it and spins on), "grandchild" (starts a
    process that starts one more, both sleeping, recorded as `family`), "soft" (sleeps,
    catches `SoftTimeLimitExceeded`, checkpoints and returns; with `busy`, it checkpoints
    all the while), "steps" (`n` steps of `step` seconds, `resumed_step` after its first
    attempt, from its checkpoint; on `stop_requested` it returns `Release`; with `deaf`,
    it never looks), or "quick". Its hooks are recorded; `on_success` takes
    `hook_seconds`."""

    def run(self, queue):
        started = time.monotonic()
        options = json.loads(self.known.get("parameters") or "{}")
        do = options.get("do", "quick")
        record(self, "running", attempt=int(self.known.get("attempt") or 0), pid=os.getpid())
        if do == "allocate":
            held = b"x" * int(options["bytes"])  # written: every page is the task's own
            record(self, "allocated", size=len(held))
            time.sleep(float(options.get("hold", LONGEST)))
            return len(held)
        if do == "spin":
            deadline = time.monotonic() + LONGEST
            while time.monotonic() < deadline:
                try:
                    while time.monotonic() < deadline:
                        pass
                except Exception as caught:
                    record(self, "caught", type=type(caught).__name__)
                    if not options.get("stubborn"):
                        raise
            return "spun"
        if do == "grandchild":
            child = subprocess.Popen([sys.executable, "-c", (
                "import subprocess, sys, time; "
                "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); "
                "print(g.pid, flush=True); time.sleep(60)")], stdout=subprocess.PIPE)
            grandchild = int(child.stdout.readline())
            record(self, "family", child=child.pid, grandchild=grandchild)
            time.sleep(LONGEST)
            return "slept"
        if do == "soft":
            try:
                if options.get("busy"):
                    count = 0
                    while time.monotonic() - started < LONGEST:
                        count += 1
                        self.checkpoint({"count": count})
                time.sleep(LONGEST)
            except SoftTimeLimitExceeded:
                record(self, "soft", after=time.monotonic() - started)
                self.checkpoint({"saved": True})
                return "saved"
            return "slept"
        if do == "steps":
            return self.steps(options)
        return "quick"

    def steps(self, options):
        state = self.last_checkpoint() or {"next": 0}
        client = self.client()
        pause = float(options.get("step", 0.1))
        if self.known.get("attempt") != "1":  # a resumed attempt goes faster
            pause = float(options.get("resumed_step", pause))
        for step in range(state["next"], int(options["n"])):
            time.sleep(pause)
            client.rpush(steps_key(self.task_id), json.dumps([self.known.get("attempt"), step]))
            self.checkpoint({"next": step + 1})
            if self.stop_requested() and not options.get("deaf"):
                record(self, "releasing", after=step)
                return Release
        return "all steps"

    def on_stop_requested(self, queue):
        record(self, "on_stop_requested", pid=os.getpid())

    def on_success(self, queue, result):
        time.sleep(float(json.loads(self.known.get("parameters") or "{}").get(
            "hook_seconds", 0)))
        record(self, "on_success")

    def on_skipped(self, queue):
        record(self, "on_skipped")
