"""limpyd-blueque, the library of this repository (installed from the work tree).

Worker modes, both through `limpyd_blueque.Worker` with `callback` = the no-op task,
`max_loops=None`, log level WARNING and every other setting at its default (leases of
60 s renewed by the heartbeat thread, for instance):

* `worker-inprocess` (`fork=False`): tasks run in the worker process.
* `worker-fork` (`fork=True`): each task runs in a process of its own, forked ahead
  (the worker keeps one spare process waiting for the next task).
* `worker-fork2` (`fork=True`, `concurrency=2`): the same, two tasks at once.
"""

from __future__ import annotations

import os
import sys

import limpyd_blueque
from limpyd_blueque import Queue, Worker, use_redis
from limpyd_blueque.models import BluequeModel
from limpyd_blueque.protocol.statistics import Tally

from peers._common import BasePeer, listener_id, main, report_rusage, task_body


class Peer(BasePeer):
    name = "limpyd_blueque"

    def setup(self) -> None:
        self.database = use_redis(self.url)
        self.q = Queue.named(self.queue)
        self.listener = listener_id()
        self.tally = Tally(interval=float("inf"))

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
        """Run `limpyd_blueque.Worker` (SIGTERM: its own warm shutdown)."""
        import logging

        self.setup()
        Worker(queues=[self.queue], callback=lambda job, queue: task_body(job.known["parameters"]),
               fork=mode.startswith("worker-fork"), concurrency=2 if mode == "worker-fork2" else 1,
               max_loops=None, logger_level=logging.WARNING).run()
        report_rusage()  # the `cpu` measurement only (BENCH_RUSAGE_FILE)

    # -- steps one by one (scaling, per-step costs) ------------------------------------

    def reserve_one(self):
        """Reserve and start the next task for this process, as `Worker.wait_for_job`
        does, with the worker's default lease terms, counted in a tally as a worker counts
        its steps (written once a second by a worker: not a step's cost)."""
        job, _ = Queue.reserve_from([self.queue], self.listener, pid=os.getpid(),
                                    ttr=Worker.ttr, max_run_time=Worker.max_run_time,
                                    max_attempts=Worker.max_attempts, tally=self.tally)
        return job

    def complete_one(self, job) -> None:
        """Store the result as the worker does (the holder: this listener, this attempt,
        counted in the tally)."""
        job.complete("0", listener_id=self.listener, tally=self.tally)

    def extra_scaling(self) -> dict:
        """Error filtering by date among 1k and among 100k stored errors.

        Both stores hold the same 100 errors on the date filtered; the rest fall on other
        dates. A filter that reads only its index costs the same in both.
        """
        import time
        from datetime import datetime, timedelta, timezone

        from limpyd_blueque import Error, Job

        job = Job.lazy_connect("bench-task")
        target = datetime(2026, 1, 1, tzinfo=timezone.utc)
        out: dict = {}
        for total in (1_000, 100_000):
            client = BluequeModel.client()
            for key in client.scan_iter(match="blueque:error:*", count=1000):
                client.unlink(key)
            records = [Error.error_values(self.queue, job, ValueError("bench"),
                                          when=target + timedelta(seconds=i)) for i in range(100)]
            records += [Error.error_values(self.queue, job, KeyError("bench"),
                                           when=target + timedelta(days=1 + i % 365, seconds=i))
                        for i in range(total - 100)]
            started = time.perf_counter()
            for chunk in range(0, len(records), 2000):
                Error.add_errors(records[chunk:chunk + 2000])
            out[f"error_store_{total}_s"] = time.perf_counter() - started
            timings = []
            for _ in range(30):
                started = time.perf_counter()
                found = list(Error.collection(date="2026-01-01"))
                timings.append(time.perf_counter() - started)
            assert len(found) == 100, len(found)
            timings.sort()
            out[f"error_filter_{total}_ms"] = timings[len(timings) // 2] * 1000
        out["error_filter_100k"] = {"value": out["error_filter_100000_ms"],
                                    "at_1k": out["error_filter_1000_ms"]}
        return out


if __name__ == "__main__":
    main(__spec__.name)
