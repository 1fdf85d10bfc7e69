"""`Queue`: a queue named by its pk, whose fields are the Blueque keys of that queue."""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import Any, Callable, cast

from limpyd import fields

from .. import compat
from ..atomic import PassedOver, Reservation
from ..connection import reaching
from ..exceptions import ConfigurationError, InvalidTransition
from ..keys import STATUS_STRUCTURES, check_listener_id, check_queue_name
from ..liveness import worker_records
from ..values import encode
from .base import (
    BluequeModel,
    QueueNameField,
    ReservedListField,
    WireListField,
    WireSetField,
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
        values = cast("dict[str, str]", self.client().hgetall(self.key))
        return {name: float(value) for name, value in values.items()}

    @classmethod
    def named(cls, name: str) -> Queue:
        """The queue called `name`, whether or not it holds anything yet."""
        return cls.lazy_connect(check_queue_name(name))

    def reserved(self, listener_id: str) -> ReservedListField:
        """The reserved list of `listener_id` on this queue, as a limpyd list field."""
        field = ReservedListField(check_listener_id(listener_id))
        field.name = f"reserved_{listener_id}"
        compat.bind_new_field(field, type(self), self)
        return field

    @classmethod
    def listener_counts(cls) -> dict[str, int]:
        """`blueque_queues`: every queue name with its number of listeners."""
        pairs = cast("list[tuple[str, float]]",
                     cls.client().zrange(cls.keys().queues, 0, -1, withscores=True))
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
    def reserve_from(cls, queues: Sequence[str], listener_id: str, *, pid: int | None = None,
                     pstart: str | None = None, ttr: float | str | None = None,
                     max_run_time: float | None = None, max_attempts: int | None = None,
                     job_model: type[Job] | None = None,
                     report: Callable[[PassedOver], None] | None = None,
                     ) -> tuple[Job | None, Reservation | None]:
        """Blueque "Node Task Pop", atomic: take the next task of the first non-empty queue.

        The one way to reserve. The task is reserved by `listener_id`, and started by
        `pid` (whose start mark is `pstart`) in the same step when given. `ttr`,
        `max_run_time` and `max_attempts` are the defaults of its lease terms, used when
        neither the task nor its queue sets them (`atomic.NEVER_EXPIRES` as `ttr`: a
        lease that never expires whatever they say). Returns `(job, reservation)`, the
        job being of `job_model` (default: this model's) and remembering its
        reservation, or `(None, None)`. What the step passed over on the way (ids that
        were not pending tasks, tasks quarantined, queues with a key of another type:
        see `atomic.PassedOver`) is given to `report`, when there is any.
        """
        names = [check_queue_name(queue) for queue in queues]
        reservation, passed = cls.scripts().reserve(
            names, check_listener_id(listener_id), time.time(), pid=pid, pstart=pstart,
            ttrs=[ttr] * len(names), max_run_time=max_run_time, max_attempts=max_attempts)
        if report is not None and passed:
            report(passed)
        if reservation is None:
            return None, None
        return (job_model or cls.job_model).from_reservation(reservation), reservation

    def reserve(self, listener_id: str, *, pid: int | None = None,
                ttr: float | str | None = None) -> Job | None:
        """`reserve_from` this queue alone: its next pending task, or None."""
        job, _ = self.reserve_from([self.pk.get()], listener_id, pid=pid, ttr=ttr)
        return job

    @classmethod
    def wake_channels(cls, names: Sequence[str]) -> list[str]:
        """The channels on which new pending tasks of these queues are announced."""
        return [cls.keys().wake_channel(check_queue_name(name)) for name in names]

    @classmethod
    def worker_records(cls) -> dict[str, float]:
        """`{worker id: time until which it is alive}` of this library's workers."""
        return worker_records(cls.client(), cls.keys())

    @classmethod
    def forget_worker(cls, listener_id: str) -> None:
        """Drop a stopping worker's record: it no longer says it is alive."""
        with reaching(cls.client()):
            cls.client().zrem(cls.keys().workers, listener_id)

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
        labels = {"leases": "running"}  # the lease set holds the reserved and started tasks
        wanted = [(labels.get(wire, status.value), *keys.status_structure(name, status))
                  for status, (wire, _) in STATUS_STRUCTURES.items()]
        with self.client().pipeline(transaction=False) as pipe:
            for _, key, kind in wanted:
                {"list": pipe.llen, "zset": pipe.zcard, "started": pipe.scard}[kind](key)
            with reaching(self.client()):
                values = pipe.execute()
        return {label: value for (label, _, _), value in zip(wanted, values)}
