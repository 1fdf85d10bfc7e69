"""Dramatiq with its Redis broker; a worker with one worker thread.

Defaults kept: default middleware, no result backend (so nothing is kept once a task
is done), the consumer's idle back-off up to `worker_timeout` (1 s).
"""

from __future__ import annotations

import signal
import threading

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from peers._common import BasePeer, main, task_body


def noop(params):
    return task_body(params)


class Peer(BasePeer):
    name = "dramatiq"
    keeps_finished = False

    def setup(self) -> None:
        self.broker = RedisBroker(url=self.url)
        self.actor = dramatiq.actor(noop, broker=self.broker, queue_name=self.queue,
                                    actor_name="bench_noop")

    def versions(self) -> dict:
        return {**super().versions(), "dramatiq": dramatiq.__version__}

    def enqueue(self, params: dict):
        return self.actor.send(params)

    def pending_count(self) -> int:
        return self.broker.client.llen(f"dramatiq:{self.queue}")

    def worker(self, mode: str) -> None:
        self.setup()
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        worker = dramatiq.Worker(self.broker, worker_threads=1)
        worker.start()
        stop.wait()
        worker.stop()


if __name__ == "__main__":
    main(__spec__.name)
