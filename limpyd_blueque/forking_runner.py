"""A drop-in for the reference `blueque.forking_runner.ForkingRunner`, built on `Worker`.

Change `from blueque.forking_runner import ForkingRunner` to
`from limpyd_blueque.forking_runner import ForkingRunner` and the worker script runs
unchanged: `ForkingRunner(client, queue_name, task_callback).run()` takes the orphans of
dead listeners of this host first, then runs each task in a process of its own, calling
`task_callback(task)` with the task as `Client.get_task` returns it. Its return value is
the result; an exception fails the task.

Being a `Worker`, it also gets what the reference lacks: leases renewed while a task runs,
tasks of dead workers taken back, fenced outcomes, wake-ups instead of polling, and a
clean stop on SIGTERM.
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING, Any, Callable

from .models import TaskData
from .protocol.liveness import listener_id_for
from .worker.worker import Worker

if TYPE_CHECKING:
    from .client import Client
    from .models import Job, Queue


class ForkingRunner:
    """Runs the tasks of one queue, each in a forked process, until stopped."""

    def __init__(self, client: Client, queue: str, task_callback: Callable[[TaskData], Any],
                 **worker_options: Any) -> None:
        self._client = client
        self._queue = queue
        self._task_callback = task_callback
        self.worker_options = worker_options

    def _call(self, job: Job, queue: Queue) -> Any:
        """The worker's callback: the reference callback, given the task as it reads it."""
        return self._task_callback(TaskData.from_hash(job.task_id, dict(job.known)))

    def make_worker(self) -> Worker:
        """The `Worker` doing the work; `worker_options` override its settings."""
        options: dict[str, Any] = {
            "queues": [self._queue], "callback": self._call, "fork": True, "max_loops": None,
            "job_model": self._client.job_model, "queue_model": self._client.queue_model,
            "error_model": self._client.error_model,
            # named as the reference names its listeners, so that each takes the other's
            # orphans on a host where both run
            "listener_id": listener_id_for(host=socket.getfqdn()),
        }
        options.update(self.worker_options)
        return Worker(**options)

    def run(self) -> None:
        """Run until stopped (SIGTERM or SIGINT: the running task is waited for)."""
        self.make_worker().run()


__all__ = ["ForkingRunner"]
