"""blueque 1.0.1, the reference implementation of the protocol (redis-py < 6).

Modes:
* `listen`: its listener/processor loop in-process: `listener.listen()` (polls every
  second when the queue is empty), `processor.start(pid)`, run, `processor.complete`.
* `fork`: its `ForkingRunner`, which forks a child per task.
"""

from __future__ import annotations

import json
import logging
import os
import time

import redis
from blueque import Client
from blueque.forking_runner import ForkingRunner

from peers._common import BasePeer, StopFlag, main, task_body


def _run(task) -> str:
    return json.dumps(task_body(task.parameters))


class Peer(BasePeer):
    name = "blueque"

    def setup(self) -> None:
        logging.getLogger().setLevel(logging.WARNING)
        self.client = Client(self.url)
        self.q = self.client.get_queue(self.queue)
        self.r = self.client._redis  # only to count pending tasks, never to run a step
        self._listener = None

    def versions(self) -> dict:
        from importlib.metadata import version
        return {**super().versions(), "blueque": version("blueque")}

    def enqueue(self, params: dict) -> str:
        return self.q.enqueue(json.dumps(params))

    def pending_count(self) -> int:
        return self.r.llen(f"blueque_pending_tasks_{self.queue}")

    def worker(self, mode: str) -> None:
        self.setup()
        if mode == "fork":
            ForkingRunner(self.client, self.queue, _run).run()
            return
        flag = StopFlag()
        listener = self.client.get_listener(self.queue)
        while not flag.stop:
            task = listener.listen()
            flag.busy = True
            processor = self.client.get_processor(task)
            processor.start(os.getpid())
            processor.complete(_run(task))
            flag.busy = False

    # -- scaling ---------------------------------------------------------------------

    def reserve_one(self):
        if self._listener is None:
            self._listener = self.client.get_listener(self.queue)
        return self._listener.listen()

    def complete_one(self, task) -> None:
        processor = self.client.get_processor(task)
        processor.start(os.getpid())
        processor.complete("0")


if __name__ == "__main__":
    main(__spec__.name)
