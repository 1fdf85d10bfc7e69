"""limpyd-blueque, the library of this repository (installed from the work tree).

Worker modes measured by default, written with the models directly:

* `inprocess`: loop `Queue.reserve_from([q], listener_id, pid=os.getpid())` (reserve and
  start in one step), run the task, `job.complete(result)`. When nothing is pending,
  wait on the queue's wake-up channel (enqueue publishes on it), 1 s at most.
* `fork`: reserve without a pid, fork a child per task that calls `job.start(...)`,
  runs the task and `job.complete(...)`, then `os._exit`; the parent waits for it,
  like Blueque's ForkingRunner.

Modes through `limpyd_blueque.Worker` (rows added by `run.py --with-worker-class`):
`worker-inprocess` (`fork=False`) and `worker-fork` (`fork=True`), both with
`callback` = the no-op task, `max_loops=None`, log level WARNING, other settings at
their defaults (leases of 60 s renewed by the heartbeat thread, for instance).

SWITCHING THE DEFAULT ROWS TO THE WORKER CLASS: in bench/run.py, change the modes of
the two limpyd-blueque entries of ROWS from `inprocess`/`fork` to
`worker-inprocess`/`worker-fork` (and drop WORKER_CLASS_ROWS). Nothing else changes:
the producer side (`enqueue`, `enqueue_many`) is the same in every mode.
"""

from __future__ import annotations

import os
import sys

import limpyd_blueque
from limpyd_blueque import Queue, use_redis
from limpyd_blueque.models import BluequeModel

from peers._common import BasePeer, StopFlag, listener_id, main, task_body


class Peer(BasePeer):
    name = "limpyd_blueque"

    def setup(self) -> None:
        self.database = use_redis(self.url)
        self.q = Queue.named(self.queue)
        self.listener = listener_id()

    def versions(self) -> dict:
        return {**super().versions(), "limpyd-blueque": limpyd_blueque.__version__}

    def enqueue(self, params: dict):
        return self.q.enqueue(params)

    def enqueue_bulk(self, params: list) -> None:
        self.q.enqueue_many(params)

    def pending_count(self) -> int:
        return self.q.counts()["pending"]

    # -- worker ----------------------------------------------------------------------
    def worker(self, mode: str) -> None:
        if mode.startswith("worker-"):
            self.worker_class(fork=mode == "worker-fork")
        else:
            self.worker_models(mode)

    def worker_class(self, fork: bool) -> None:
        """Run `limpyd_blueque.Worker` (SIGTERM: its own warm shutdown)."""
        import logging

        from limpyd_blueque import Worker

        self.setup()
        Worker(queues=[self.queue], callback=lambda job, queue: task_body(job.known["parameters"]),
               fork=fork, max_loops=None, logger_level=logging.WARNING).run()

    def worker_models(self, mode: str) -> None:
        self.setup()
        flag = StopFlag()
        self.q.add_listener(self.listener)
        wake = BluequeModel.client().pubsub(ignore_subscribe_messages=True)
        wake.subscribe(Queue.keys().wake_channel(self.queue))
        try:
            while not flag.stop:
                job, _ = Queue.reserve_from([self.queue], self.listener,
                                            pid=os.getpid() if mode == "inprocess" else None)
                if job is None:
                    wake.get_message(timeout=1.0)
                    continue
                flag.busy = True
                if mode == "inprocess":
                    job.complete(task_body(job.known["parameters"]))
                else:
                    self._run_forked(job)
                flag.busy = False
        finally:
            flag.busy = True
            self.q.remove_listener(self.listener)

    def _run_forked(self, job) -> None:
        pid = os.fork()
        if pid == 0:  # the child: start, run, complete, leave without cleanup
            code = 0
            try:
                job.start(self.listener, os.getpid())
                job.complete(task_body(job.known["parameters"]))
            except BaseException:
                import traceback
                traceback.print_exc()
                code = 1
            finally:
                sys.stderr.flush()
                os._exit(code)
        os.waitpid(pid, 0)

    # -- scaling ---------------------------------------------------------------------

    def reserve_one(self):
        job, _ = Queue.reserve_from([self.queue], self.listener, pid=os.getpid())
        return job

    def complete_one(self, job) -> None:
        job.complete("0")

    def extra_scaling(self) -> dict:
        """The error-filtering figure stays null (see the reason); what can be measured
        cheaply about `Error` is measured: the cost of storing one."""
        from limpyd_blueque import models

        if not hasattr(models, "Error"):
            return {"error_filter_100k": {
                "value": None,
                "reason": "limpyd_blueque has no Error model yet: no figure until it exists"}}
        out: dict = {"error_filter_100k": {
            "value": None,
            "reason": "the Error model exists, but storing 100k errors through it (one "
                      "Error.add_error each, no bulk path) takes minutes, beyond this run's "
                      "budget; the figure is left null rather than measured on fewer errors "
                      "(see error_add_ms for the cost of one)"}}
        try:
            import time
            from datetime import datetime, timezone

            job = self.q.enqueue({"n": 0, "s": "x"})
            started = time.perf_counter()
            for _ in range(200):
                models.Error.add_error(self.queue, job, ValueError("bench"),
                                       when=datetime.now(timezone.utc))
            out["error_add_ms"] = (time.perf_counter() - started) / 200 * 1000
        except Exception as error:  # the model is young: say what broke, measure nothing
            out["error_add_ms"] = None
            out["error_add_failure"] = f"{type(error).__name__}: {error}"
        return out


if __name__ == "__main__":
    main(__spec__.name)
