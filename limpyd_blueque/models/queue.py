"""`Queue`: a queue named by its pk, whose fields are the Blueque keys of that queue."""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Callable, cast

from limpyd import fields
from redis.exceptions import RedisError

from .. import compat
from ..atomic import PassedOver, Reservation
from ..connection import check_value_sizes, reaching
from ..exceptions import (
    ConfigurationError,
    InvalidTransition,
    LimpydBluequeError,
    PartiallyEnqueued,
)
from ..keys import STATUS_STRUCTURES, check_listener_id, check_queue_name
from ..liveness import worker_records
from ..values import (
    MAX_COUNT,
    MAX_SECONDS,
    check_number,
    check_parameters_list,
    check_task_id,
    check_task_ids,
    chunks,
    encode,
    timestamp,
)
from .base import (
    BluequeModel,
    QueueNameField,
    ReservedListField,
    WireListField,
    WireSetField,
    WireSortedSetField,
)
from .job import Job

#: the settings a queue may have, with the rules of their values (see `values.check_number`)
QUEUE_SETTINGS: dict[str, dict[str, Any]] = {
    "ttr": {"minimum": 0, "above": True, "maximum": MAX_SECONDS},
    "max_run_time": {"minimum": 0, "above": True, "maximum": MAX_SECONDS},
    "max_attempts": {"integer": True, "minimum": 1, "maximum": MAX_COUNT},
}
#: the most characters of parameters sent in one enqueue script call
CHUNK_CHARACTERS = 64 * 1024 * 1024


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
        `ttr` and `max_run_time` are seconds, finite and above 0 (at most
        `values.MAX_SECONDS`); `max_attempts` a whole number, at least 1. Raises
        `ConfigurationError` naming a bad value, before anything is written.
        """
        unknown = sorted(set(settings) - set(QUEUE_SETTINGS))
        if unknown:
            raise ConfigurationError(f"unknown queue setting(s): {', '.join(unknown)}")
        for name, value in settings.items():
            if value is not None:
                check_number(f"queue setting {name}", value, **QUEUE_SETTINGS[name])
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

        `parameters` is stored as is when a `str`, JSON-encoded otherwise (see
        `values.encode`). `task_id` (default: a new UUID) follows `values.check_task_id`.
        """
        return self.enqueue_many([parameters],
                                 task_ids=None if task_id is None else [task_id])[0]

    def enqueue_many(self, parameters: Sequence[Any], *,
                     task_ids: Sequence[str] | None = None, chunk: int = 1000) -> list[Job]:
        """Many pending tasks, one atomic script call per `chunk` tasks (and per 64 MiB).

        Everything is checked before the first write: `parameters` is a sequence (a
        list, a tuple; not a `str` nor a `dict`), each encoded (`InvalidParameters`)
        and small enough for the server (`ParametersTooLarge`); `task_ids`, one per task,
        valid and distinct (`InvalidName`). A chunk is written whole or not at all: when
        one fails after others were written, `PartiallyEnqueued` carries their ids.
        """
        texts = [encode(value) for value in check_parameters_list(parameters)]
        ids = ([str(uuid.uuid4()) for _ in texts] if task_ids is None
               else check_task_ids(task_ids, len(texts)))
        check_number("chunk", chunk, integer=True, minimum=1)
        client, scripts, name = self.client(), self.scripts(), self.pk.get()
        check_value_sizes(client, texts)
        done: list[str] = []
        for start, end in chunks(texts, chunk, CHUNK_CHARACTERS):
            try:
                with reaching(client):
                    scripts.enqueue(name, list(zip(ids[start:end], texts[start:end])),
                                    time.time())
            except (LimpydBluequeError, RedisError) as error:
                if not done:
                    raise
                raise PartiallyEnqueued(done, len(ids), error) from error
            done += ids[start:end]
        return [self.job_model.lazy_connect(task_id) for task_id in ids]

    def schedule(self, parameters: Any, eta: float | datetime, *,
                 task_id: str | None = None) -> Job:
        """Blueque "Schedule Task": a task that turns pending at `eta`.

        `eta` is epoch seconds (a finite number) or a `datetime` (a naive one is local
        time, as `datetime.timestamp` takes it). An eta already past enqueues the task
        at once, as the reference client does. Checked as `enqueue` checks, before any
        write; a bad eta raises `ConfigurationError`.
        """
        eta = timestamp("eta", eta)
        text = encode(parameters)
        task_id = str(uuid.uuid4()) if task_id is None else check_task_id(task_id)
        now = time.time()
        if eta < now:
            return self.enqueue(text, task_id=task_id)
        check_value_sizes(self.client(), [text])
        # stored as given (an int stays an int), as the reference client does
        with reaching(self.client()):
            self.scripts().schedule(self.pk.get(), task_id, text, eta, now)
        return self.job_model.lazy_connect(task_id)

    def enqueue_due(self, now: float | datetime | None = None, limit: int = 0) -> list[str]:
        """Blueque "Enqueue Scheduled Tasks": make due tasks pending; return their ids.

        `now` (default: the current time) is as `schedule`'s eta; `limit`, a whole number,
        caps how many move (0: no limit)."""
        moment = time.time() if now is None else timestamp("now", now)
        check_number("limit", limit, integer=True, minimum=0, maximum=MAX_COUNT)
        with reaching(self.client()):
            return self.scripts().enqueue_due(self.pk.get(), moment, limit)

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
