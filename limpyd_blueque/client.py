"""A drop-in for the reference `blueque.Client`, built on the limpyd models.

Change `from blueque import Client` to `from limpyd_blueque import Client` and the
application runs unchanged on the same Redis keys. Where this client behaves
differently on purpose (it refuses what the reference would silently corrupt), the
docs list it: see docs/compatibility.rst.
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING, Any

from .connection.clients import BluequeDatabase
from .connection.errors import reaching
from .exceptions import InvalidTransition, TaskNotFound
from .models import Error, Job, Queue, TaskData
from .protocol.keys import DEFAULT_PREFIX
from .protocol.liveness import (
    is_this_host,
    listener_host_and_pid,
    listener_id_for,
    listener_is_dead,
    server_time,
    worker_records,
)
from .protocol.scripts import NEVER_EXPIRES
from .protocol.statuses import Status
from .protocol.values import check_task_id

if TYPE_CHECKING:
    from redis.client import PubSub


class Client:
    """Connection to a Blueque system; makes queues, listeners, processors and tasks.

    `Client(url)` takes the same URL as the reference client. Its models are private
    subclasses of `Job`, `Queue` and `Error` bound to this client's own database, so
    clients on different servers never mix.
    """

    def __init__(self, url: str, prefix: str = DEFAULT_PREFIX, **redis_options: Any) -> None:
        self.database = BluequeDatabase(url, **redis_options)
        attrs = {"database": self.database, "namespace": prefix, "__module__": __name__}
        self.job_model: type[Job] = type("Job", (Job,), attrs)
        self.queue_model: type[Queue] = type("Queue", (Queue,),
                                             {**attrs, "job_model": self.job_model})
        self.error_model: type[Error] = type("Error", (Error,), attrs)

    def get_queue(self, name: str) -> ClientQueue:
        return ClientQueue(self.queue_model.named(name))

    def get_task(self, task_id: str) -> TaskData:
        """A read-only snapshot of a task. As the reference does, an unknown id (a task
        never made, or deleted) gives a task whose fields are all None; the models'
        `Job.data()` raises `TaskNotFound` instead.

        Unlike the reference, which reads whatever it is given, it raises `InvalidName` for
        an id that breaks the task id rule (`values.check_task_id`: None, a number...), and
        `ProtocolError` for a task hash whose numbers do not read as numbers (see
        `TaskData.from_hash`); nothing is written.
        """
        job = self.job_model.lazy_connect(check_task_id(task_id))
        try:
            return job.data()
        except TaskNotFound:
            return TaskData.from_hash(task_id, {})

    def get_listener(self, name: str) -> Listener:
        return Listener(self, self.queue_model.named(name))

    def get_processor(self, task: TaskData) -> Processor:
        return Processor(self.job_model.lazy_connect(task.id), task)


class ClientQueue:
    """Producer side of one queue, with the reference `Queue` API."""

    def __init__(self, queue: Queue) -> None:
        self._queue = queue
        # the reference's queue object, which code written for it reaches into
        self._redis_queue = _WireQueue(queue)

    @property
    def name(self) -> str:
        return self._queue.pk.get()

    @property
    def model(self) -> Queue:
        """The `Queue` model behind it, bound to the client's Redis: for what the
        reference API lacks (task options, statistics, Tarantool's operations)."""
        return self._queue

    def enqueue(self, parameters: Any) -> str:
        """Submit a task; returns its id."""
        return self._queue.enqueue(parameters).pk.get()

    def schedule(self, parameters: Any, eta: float) -> str:
        """Submit a task that becomes pending at `eta`; returns its id."""
        return self._queue.schedule(parameters, eta).pk.get()

    def enqueue_due_tasks(self) -> list[str]:
        """Make the due scheduled tasks pending; returns their ids."""
        return self._queue.enqueue_due()

    def delete_task(self, task: TaskData) -> None:
        """Delete a complete or failed task of this queue."""
        if task.queue != self.name:
            raise InvalidTransition(task.id, task.status, "deleted",
                                    f"it is in queue {task.queue!r}, not {self.name!r}")
        self._queue.job_model.lazy_connect(task.id).delete(finished_only=True)


class _WireQueue:
    """What code written for the reference reads through `queue._redis_queue`."""

    def __init__(self, queue: Queue) -> None:
        self._queue = queue

    def get_listeners(self) -> set[str]:
        """The listener ids registered on the queue."""
        with reaching(self._queue.client()):
            return set(self._queue.listeners.smembers())


class Listener:
    """Takes tasks from one queue for this process (`<fqdn>_<pid>`)."""

    #: seconds between two checks when no wake-up arrives (tasks submitted by clients
    #: that do not publish wake-ups, such as the reference package, are seen then)
    poll_interval = 1.0

    def __init__(self, client: Client, queue: Queue, listener_id: str | None = None) -> None:
        self._client = client
        self._queue = queue
        # named as the reference client names its listeners, so that each claims the
        # other's orphans on a host where both run
        self.listener_id = listener_id or listener_id_for(host=socket.getfqdn())
        self._queue.add_listener(self.listener_id)
        self._pubsub: PubSub | None = None

    def _wait(self) -> None:
        pubsub = self._pubsub
        if pubsub is None:
            pubsub = self._pubsub = self._queue.client().pubsub(ignore_subscribe_messages=True)
            pubsub.subscribe(self._queue.keys().wake_channel(self._queue.pk.get()))
        with reaching(self._queue.client()):
            pubsub.get_message(timeout=self.poll_interval)

    def listen(self) -> TaskData:
        """Block until a task is reserved for this listener, and return it."""
        while True:
            # this listener does not renew leases: its tasks get one that never expires
            job = self._queue.reserve(self.listener_id, ttr=NEVER_EXPIRES)
            if job is not None:
                return job.data()
            self._wait()

    def claim_orphan(self) -> TaskData | None:
        """Claim a task left reserved by a dead listener of this host, as the reference does.

        A listener of this host (never one of this listener's pid) that
        `liveness.listener_is_dead` finds dead is unregistered, and the newest task of its
        reserved list is returned, marked `reclaimed_node`.
        """
        my_pid = listener_host_and_pid(self.listener_id)[1]
        alive_until = worker_records(self._queue.client(), self._queue.keys())
        now = server_time(self._queue.client())
        for listener in sorted(self._queue.listeners.smembers()):
            other_host, pid = listener_host_and_pid(listener)
            if (not is_this_host(other_host) or pid == my_pid
                    or not listener_is_dead(listener, alive_until, now)):
                continue
            if not self._queue.remove_listener(listener):
                continue  # another listener claimed it first
            task_id = self._queue.reserved(listener).lindex(0)
            if task_id is None:
                continue
            job = self._queue.job_model.lazy_connect(task_id)
            job.reclaimed_node.hset(self.listener_id)
            return job.data()
        return None


class Processor:
    """Updates one task while a process runs it: start, then complete or fail."""

    def __init__(self, job: Job, task: TaskData) -> None:
        self._job = job
        self._task = task
        self._listener_id = task.node
        self._pid = task.pid
        self._attempt = task.attempt or None

    def start(self, pid: int) -> str | None:
        """Record that `pid` runs the task; returns the task parameters."""
        if not self._listener_id:
            raise InvalidTransition(self._task.id, self._task.status, Status.STARTED,
                                    "no listener reserved it")
        self._pid = pid
        self._job.start(self._listener_id, pid, self._attempt)
        return self._task.parameters

    def complete(self, result: Any) -> bool:
        """Store the result; True when this call completed the task (exactly once)."""
        return self._job.complete(result, listener_id=self._listener_id, pid=self._pid,
                                  attempt=self._attempt)

    def fail(self, error: Any) -> bool:
        """Store the error; True when this call failed the task (exactly once)."""
        return self._job.fail(error, listener_id=self._listener_id, pid=self._pid,
                              attempt=self._attempt)

    # -- this library's additions (Tarantool's operations; see `Task`) --------------------
    def release(self, delay: float | None = None) -> bool:
        """Give the task back (pending, or scheduled `delay` seconds from now), this attempt
        not counted as a failure; False when the caller no longer holds it."""
        return self._job.release(delay, listener_id=self._listener_id or "",
                                 attempt=self._attempt)

    def bury(self, why: Any = None) -> bool:
        """Put the task aside until `Queue.kick`; False when no longer held."""
        return self._job.bury(why, listener_id=self._listener_id or "", attempt=self._attempt)

    def touch(self, seconds: float) -> bool:
        """Extend the task's lease by `seconds`; False when no longer held."""
        return self._job.touch(seconds, listener_id=self._listener_id or "",
                               attempt=self._attempt)


__all__ = ["Client", "ClientQueue", "Listener", "Processor", "listener_id_for"]
