"""RQ: `Queue.enqueue` / `Queue.enqueue_many`; modes `simple` (SimpleWorker, the task
runs in the worker process) and `fork` (Worker, a forked work horse per task).

Defaults kept: pickle serializer, results kept `result_ttl` = 500 s, no scheduler.
"""

from __future__ import annotations

import logging

import redis
import rq
from rq import Queue, SimpleWorker, Worker

from peers._common import BasePeer, main, task_body


def task(params: dict) -> int:
    return task_body(params)


class Peer(BasePeer):
    name = "rq"

    def setup(self) -> None:
        self.r = redis.Redis.from_url(self.url)
        self.q = Queue(self.queue, connection=self.r)

    def versions(self) -> dict:
        return {**super().versions(), "rq": rq.__version__}

    def enqueue(self, params: dict):
        return self.q.enqueue(task, params)

    def enqueue_bulk(self, params: list) -> None:
        self.q.enqueue_many([Queue.prepare_data(task, args=(p,)) for p in params])

    def pending_count(self) -> int:
        return self.q.count

    def worker(self, mode: str) -> None:
        self.setup()
        cls = SimpleWorker if mode == "simple" else Worker
        cls([self.q], connection=self.r).work(logging_level=logging.WARNING)


if __name__ == "__main__":
    main(__spec__.name)
