"""Celery with the Redis broker and the Redis result backend; worker `--pool=solo`.

Defaults kept (JSON serializer, prefetch multiplier 4, results kept one day), except
`--without-gossip --without-mingle --without-heartbeat`, the usual advice for a
Redis broker: they only add broadcast traffic between workers.
"""

from __future__ import annotations

import celery
from celery import Celery

from peers._common import BasePeer, main, task_body

TASK_NAME = "bench.noop"


def make_app(url: str, queue: str) -> Celery:
    app = Celery("bench", broker=url, backend=url)
    app.conf.update(task_default_queue=queue, worker_hijack_root_logger=False,
                    broker_connection_retry_on_startup=True)

    @app.task(name=TASK_NAME)
    def noop(params):
        return task_body(params)

    return app


class Peer(BasePeer):
    name = "celery"

    def setup(self) -> None:
        if not hasattr(self, "app"):
            self.app = make_app(self.url, self.queue)
            self.task = self.app.tasks[TASK_NAME]

    def versions(self) -> dict:
        import kombu
        return {**super().versions(), "celery": celery.__version__, "kombu": kombu.__version__}

    def enqueue(self, params: dict):
        return self.task.delay(params)

    def pending_count(self) -> int:
        with self.app.connection_for_write() as conn:
            return conn.default_channel.client.llen(self.queue)

    def worker(self, mode: str) -> None:
        self.setup()
        self.app.worker_main(["worker", "--pool=solo", "--concurrency=1", "--loglevel=WARNING",
                              "-Q", self.queue, "--without-gossip", "--without-mingle",
                              "--without-heartbeat", "-n", f"bench-{self.queue}@%h"])


if __name__ == "__main__":
    main(__spec__.name)
