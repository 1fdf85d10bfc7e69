"""`Queue`: a queue named by its pk, whose fields are the Blueque keys of that queue."""

from __future__ import annotations

import time
import uuid
from typing import Any, Sequence

from limpyd import fields

from ..atomic import Reservation
from ..connection import reaching
from ..exceptions import ConfigurationError, InvalidTransition
from ..keys import check_listener_id, check_queue_name
from ..values import encode
from .base import (
    BluequeModel, QueueNameField, ReservedListField, WireListField, WireSetField,
    WireSortedSetField,
)
from .job import Job


class Queue(BluequeModel):
    """A queue, named by its pk; its fields are the Blueque keys of that queue."""

    name = QueueNameField()
    # settings of the queue, in the hash `<prefix>:queue:<name>`
    ttr = fields.InstanceHashField()
    max_run_time = fields.InstanceHashField()
    max_attempts = fields.InstanceHashField()
    # the Blueque keys of the queue
    pending = WireListField(wire="pending")
    scheduled = WireSortedSetField(wire="scheduled")
    complete = WireListField(wire="complete")
    failed = WireListField(wire="failed")
    started = WireSetField(wire="started")
    listeners = WireSetField(wire="listeners")
    leases = WireSortedSetField(wire="leases")

    job_model = Job

    @property
    def key(self) -> str:
        return self.keys().queue_settings(self.pk.get())

    def configure(self, **settings: float | None) -> None:
        """Set (or, with None, remove) the queue's `ttr`, `max_run_time`, `max_attempts`.

        A task's own field overrides its queue's setting, which overrides the worker's.
        """
        unknown = sorted(set(settings) - {"ttr", "max_run_time", "max_attempts"})
        if unknown:
            raise ConfigurationError(f"unknown queue setting(s): {', '.join(unknown)}")
        for name, value in settings.items():
            if value is not None and (isinstance(value, bool) or value <= 0
                                      or not isinstance(value, (int, float))):
                raise ConfigurationError(f"queue setting {name} must be a number above 0, "
                                         f"not {value!r}")
        with self.client().pipeline(transaction=True) as pipe:
            for name, value in settings.items():
                if value is None:
                    pipe.hdel(self.key, name)
                else:
                    pipe.hset(self.key, name, repr(value))
            with reaching(self.client()):
                pipe.execute()

    def settings(self) -> dict[str, float]:
        """The queue's own settings that are set."""
        values = self.client().hgetall(self.key)
        return {name: float(value) for name, value in values.items()}

    @classmethod
    def named(cls, name: str) -> "Queue":
        """The queue called `name`, whether or not it holds anything yet."""
        return cls.lazy_connect(check_queue_name(name))

    def reserved(self, listener_id: str) -> ReservedListField:
        """The reserved list of `listener_id` on this queue, as a limpyd list field."""
        field = ReservedListField(check_listener_id(listener_id))
        field.name = f"reserved_{listener_id}"
        field._attach_to_model(type(self))
        field._attach_to_instance(self)
        return field

    @classmethod
    def listener_counts(cls) -> dict[str, int]:
        """`blueque_queues`: every queue name with its number of listeners."""
        pairs = cls.client().zrange(cls.keys().queues, 0, -1, withscores=True)
        return {name: int(score) for name, score in pairs}

    # -- producer steps -----------------------------------------------------------------
    def enqueue(self, parameters: Any, *, task_id: str | None = None) -> Job:
        """Blueque "Submission": a new pending task; returns its `Job`.

        `parameters` is stored as is when a `str`, JSON-encoded otherwise.
        """
        return self.enqueue_many([parameters], task_ids=[task_id] if task_id else None)[0]

    def enqueue_many(self, parameters: Sequence[Any], *,
                     task_ids: Sequence[str] | None = None, chunk: int = 1000) -> list[Job]:
        """Many pending tasks, one script call per `chunk` tasks; all encoded first."""
        texts = [encode(value) for value in parameters]
        ids = list(task_ids) if task_ids else [str(uuid.uuid4()) for _ in texts]
        if len(ids) != len(texts):
            raise ValueError("task_ids and parameters must have the same length")
        scripts, name = self.scripts(), self.pk.get()
        for start in range(0, len(ids), chunk):
            scripts.enqueue(name, list(zip(ids[start:start + chunk], texts[start:start + chunk])),
                            time.time())
        return [self.job_model.lazy_connect(task_id) for task_id in ids]

    def schedule(self, parameters: Any, eta: float, *, task_id: str | None = None) -> Job:
        """Blueque "Schedule Task": a task that turns pending at `eta` (epoch seconds).

        An eta already past enqueues the task at once, as the reference client does.
        """
        if isinstance(eta, bool) or not isinstance(eta, (int, float)):
            raise ConfigurationError(f"eta must be a timestamp (seconds), not {eta!r}")
        now = time.time()
        if eta < now:
            return self.enqueue(parameters, task_id=task_id)
        task_id = task_id or str(uuid.uuid4())
        # stored as given (an int stays an int), as the reference client does
        self.scripts().schedule(self.pk.get(), task_id, encode(parameters), eta, now)
        return self.job_model.lazy_connect(task_id)

    def enqueue_due(self, now: float | None = None, limit: int = 0) -> list[str]:
        """Blueque "Enqueue Scheduled Tasks": make due tasks pending; return their ids."""
        return self.scripts().enqueue_due(self.pk.get(), time.time() if now is None else now,
                                          limit)

    # -- listener steps -------------------------------------------------------------------
    def add_listener(self, listener_id: str) -> bool:
        """Register `listener_id` on this queue; True if it was not registered."""
        return self.scripts().add_listener(self.pk.get(), check_listener_id(listener_id))

    def remove_listener(self, listener_id: str) -> bool:
        """Unregister `listener_id`; True if it was registered."""
        return self.scripts().remove_listener(self.pk.get(), listener_id)

    @classmethod
    def take(cls, queues: Sequence[str], listener_id: str, *, pid: int | None = None,
             ttrs: Sequence[float | None] | None = None, job_model: type[Job] | None = None,
             pstart: str | None = None) -> tuple[Job | None, Reservation | None, list[str]]:
        """Blueque "Node Task Pop", atomic: take the next task of the first non-empty queue.

        The task is reserved by `listener_id` (and started by `pid` in the same step when
        given). Returns the `Job` (of `job_model`, default this queue model's), the
        `Reservation` (queue, fields, attempt), and the ids dropped on the way because
        their hash was gone or not pending.
        """
        names = [check_queue_name(queue) for queue in queues]
        reservation, dropped = cls.scripts().reserve(
            names, check_listener_id(listener_id), time.time(), pid, ttrs, pstart)
        if reservation is None:
            return None, None, dropped
        job_model = job_model or cls.job_model
        job = job_model.from_fields(reservation.task_id, reservation.fields, reservation)
        return job, reservation, dropped

    @classmethod
    def reserve_from(cls, queues: Sequence[str], listener_id: str, *, pid: int | None = None,
                     ttrs: Sequence[float | None] | None = None
                     ) -> tuple[Job | None, Reservation | None]:
        """`take` without the dropped ids: `(job, reservation)` or `(None, None)`."""
        job, reservation, _ = cls.take(queues, listener_id, pid=pid, ttrs=ttrs)
        return job, reservation

    def reserve(self, listener_id: str, *, pid: int | None = None,
                ttr: float | str | None = None) -> Job | None:
        """Take the next pending task of this queue for `listener_id`, or None.

        `ttr` is the lease length when neither the task nor the queue gives one;
        `atomic.NEVER_EXPIRES` gives a lease that never expires whatever they say.
        """
        job, _ = self.reserve_from([self.pk.get()], listener_id, pid=pid, ttrs=[ttr])
        return job

    def delete_task(self, job: Job) -> None:
        """Delete a finished task of this queue (`InvalidTransition` otherwise)."""
        data = job.data()
        if data.queue != self.pk.get():
            raise InvalidTransition(data.id, data.status, "deleted",
                                    f"it is in queue {data.queue!r}, not {self.pk.get()!r}")
        job.delete()

    # -- reading ----------------------------------------------------------------------------
    def counts(self) -> dict[str, int]:
        """How many tasks each Blueque structure of this queue holds, in one round trip."""
        keys, name = self.keys(), self.pk.get()
        with self.client().pipeline(transaction=False) as pipe:
            pipe.zcard(keys.scheduled(name))
            pipe.llen(keys.pending(name))
            pipe.zcard(keys.leases(name))
            pipe.scard(keys.started(name))
            pipe.llen(keys.complete(name))
            pipe.llen(keys.failed(name))
            with reaching(self.client()):
                values = pipe.execute()
        return dict(zip(("scheduled", "pending", "running", "started", "complete", "failed"),
                        values))
