"""Huey with RedisHuey (blocking BRPOP dequeue, the default); a consumer with one
worker thread, run by `Consumer.run()` in the worker process.

Defaults kept: results stored (a task returning a value keeps it), scheduler thread.
"""

from __future__ import annotations

import logging

import huey
from huey import RedisHuey

from peers._common import BasePeer, main, task_body


class Peer(BasePeer):
    name = "huey"

    def setup(self) -> None:
        self.huey = RedisHuey(self.queue, url=self.url)
        self.task = self.huey.task(name="bench_noop")(task_body)

    def versions(self) -> dict:
        return {**super().versions(), "huey": huey.__version__}

    def enqueue(self, params: dict):
        return self.task(params)

    def pending_count(self) -> int:
        return self.huey.pending_count()

    def worker(self, mode: str) -> None:
        self.setup()
        logging.basicConfig(level=logging.WARNING)
        consumer = self.huey.create_consumer(workers=1, worker_type="thread")
        consumer.run()


if __name__ == "__main__":
    main(__spec__.name)
