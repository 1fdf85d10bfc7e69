"""redis-limpyd-jobs: `Job.add_job(identifier)` and its `Worker` (BLPOP, in-process).

The task parameters travel as the job identifier (JSON), as limpyd-jobs users do.
Defaults kept (jobs and queues kept forever), except `max_loops` (10**12: no limit),
the log level (WARNING, like the other workers) and the BLPOP `timeout` (1 s instead of
30 s, so that SIGTERM stops an idle worker at once: it changes nothing while tasks wait).
"""

from __future__ import annotations

import json
import logging
from importlib.metadata import version

from peers._common import BasePeer, main, task_body

_models: dict = {}


def models() -> dict:
    """The models, built once in this module (not in `__main__`: limpyd names them)."""
    if not _models:
        from limpyd_jobs import Job, Queue

        class BenchQueue(Queue):
            namespace = "bench-ljobs"

        class BenchJob(Job):
            namespace = "bench-ljobs"
            queue_model = BenchQueue

            def run(self, queue):
                return task_body(json.loads(self.identifier.hget()))

        _models.update(BenchJob=BenchJob, BenchQueue=BenchQueue)
    return _models


def __getattr__(name: str):  # `Job.get_from_ident` imports "peers.limpyd_jobs.BenchJob"
    if name in ("BenchJob", "BenchQueue"):
        return models()[name]
    raise AttributeError(name)


class Peer(BasePeer):
    name = "limpyd_jobs"

    def setup(self) -> None:
        from limpyd.contrib.database import PipelineDatabase
        from limpyd_jobs.models import BaseJobsModel

        if not hasattr(self, "database"):
            self.database = PipelineDatabase(host=self.cfg["host"], port=self.cfg["port"], db=0)
            BaseJobsModel.use_database(self.database)
        self.job_model = models()["BenchJob"]
        self.queue_model = models()["BenchQueue"]

    def versions(self) -> dict:
        return {**super().versions(), "redis-limpyd-jobs": version("redis-limpyd-jobs"),
                "redis-limpyd": version("redis-limpyd")}

    def enqueue(self, params: dict):
        return self.job_model.add_job(identifier=json.dumps(params), queue_name=self.queue)

    def pending_count(self) -> int:
        return self.queue_model.count_waiting_jobs([self.queue])

    def worker(self, mode: str) -> None:
        from limpyd_jobs import Worker

        self.setup()
        Worker(queues=[self.queue], queue_model=self.queue_model, max_loops=10 ** 12,
               logger_level=logging.WARNING, timeout=1).run()


if __name__ == "__main__":
    main(__spec__.name)
