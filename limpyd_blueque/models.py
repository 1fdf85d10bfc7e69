"""The limpyd models: `Job` and `Queue` live on the Blueque keys, `Error` beside them.

Models hold data and the protocol steps; they never fork, sleep or log. Each step
is one call to a script of `atomic.Scripts`.
"""

from __future__ import annotations

import time
import uuid
from copy import copy
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from datetime import datetime, timezone

from limpyd import fields
from limpyd.collection import CollectionManager
from limpyd.contrib.collection import ExtendedCollectionManager
from limpyd.indexes import EqualIndex, TextRangeIndex
from limpyd.exceptions import DoesNotExist
from limpyd.model import RedisModel

from .atomic import Outcome, Reservation, Scripts
from .connection import UnboundDatabase, reaching
from .exceptions import ConfigurationError, InvalidTransition, ProtocolError, TaskNotFound
from .indexes import WireIndex, flatten, status_sources, temporary_key
from .keys import DEFAULT_PREFIX, KeySpace, check_listener_id, check_queue_name, keyspace
from .statuses import Status
from .values import encode


class BluequeModel(RedisModel):
    """Base of the models: one database, and `namespace` doubles as the key prefix."""

    abstract = True
    namespace = DEFAULT_PREFIX
    database = UnboundDatabase()

    @classmethod
    def keys(cls) -> KeySpace:
        """The key space of this model, named by its namespace."""
        return keyspace(cls.namespace)

    @classmethod
    def scripts(cls) -> Scripts:
        """The protocol scripts on this model's connection (registered once)."""
        cache = cls.database.__dict__.setdefault("_blueque_scripts", {})
        if cls.namespace not in cache:
            cache[cls.namespace] = Scripts(cls.database.connection, cls.keys())
        return cache[cls.namespace]

    @classmethod
    def client(cls):
        """The redis-py client of this model's database."""
        return cls.database.connection


# -- fields whose key is a Blueque key -------------------------------------------------
def _wire_field(base: type) -> type:
    class WireField(base):  # type: ignore[misc, valid-type]
        """A field stored at the Blueque key `KeySpace.<wire>(queue name)`."""

        _copy_conf = copy(base._copy_conf)
        _copy_conf["kwargs"] = _copy_conf["kwargs"] + ["wire"]

        def __init__(self, *args: Any, wire: str, **kwargs: Any) -> None:
            self.wire = wire
            super().__init__(*args, **kwargs)

        @property
        def key(self) -> str:
            return getattr(self._instance.keys(), self.wire)(self._instance.pk.get())

    WireField.__name__ = f"Wire{base.__name__}"
    return WireField


WireListField = _wire_field(fields.ListField)
WireSetField = _wire_field(fields.SetField)
WireSortedSetField = _wire_field(fields.SortedSetField)


class ReservedListField(fields.ListField):
    """The reserved list of one listener on a queue (`queue.reserved(listener_id)`)."""

    def __init__(self, listener_id: str, *args: Any, **kwargs: Any) -> None:
        self.listener_id = listener_id
        super().__init__(*args, **kwargs)

    @property
    def key(self) -> str:
        return self._instance.keys().reserved(self._instance.pk.get(), self.listener_id)


class ProtocolField(fields.InstanceHashField):
    """A task field only the protocol steps may change (its value files the task)."""

    def _call_command(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if name in self.available_modifiers:
            raise ProtocolError(
                f"the {self.name!r} of a task changes only through the protocol steps "
                "(enqueue, reserve, start, complete, fail, delete)"
            )
        return super()._call_command(name, *args, **kwargs)


class TaskIdField(fields.PKField):
    """The task id; a task exists when its Blueque hash exists."""

    def exists(self, value: str | None = None) -> bool:
        try:
            value = value or self.get()
        except (AttributeError, DoesNotExist):
            return False
        return bool(self.connection.exists(self._model.keys().task(value)))

    def set(self, value: str) -> int:
        # A limpyd model adds its pks to a collection set; tasks are listed by the
        # Blueque structures instead, so only the in-memory pk is set.
        if self._set:
            raise ValueError("a task id cannot be changed")
        self._instance._set_pk(self._validate(value))
        self._set = True
        return 1


class QueueNameField(fields.PKField):
    """The queue name; a queue exists when `blueque_queues` lists it."""

    def normalize(self, value: Any) -> str:
        return check_queue_name(value)

    def exists(self, value: str | None = None) -> bool:
        try:
            value = value or self.get()
        except (AttributeError, DoesNotExist):
            return False
        return self.connection.zscore(self._model.keys().queues, value) is not None

    def set(self, value: str) -> int:
        raise ProtocolError("queues are created by the protocol steps, not by the ORM")


class JobCollectionManager(CollectionManager):
    """Collections of tasks; with no filter, every task any queue structure lists."""

    def _get_final_set(self, sets, pk, sort_options):
        if not sets and pk is None:
            everything = self.model.materialize(
                [(queue, status.value) for queue in self.model.queue_names() for status in Status])
            final_set, _ = super()._get_final_set([everything], pk, sort_options)
            return final_set, True
        return super()._get_final_set(sets, pk, sort_options)


@dataclass(frozen=True)
class TaskData:
    """A read-only snapshot of a task hash, typed as the reference client types it."""

    id: str
    status: str | None
    queue: str | None
    parameters: str | None
    result: str | None
    error: str | None
    node: str | None
    pid: int | None
    created: float | None
    updated: float | None
    eta: float | None
    attempt: int
    extra: dict

    BLUEQUE_FIELDS = ("status", "queue", "parameters", "result", "error", "node", "pid",
                      "created", "updated", "eta")

    @classmethod
    def from_hash(cls, task_id: str, data: dict) -> "TaskData":
        def number(name: str, kind: type) -> Any:
            value = data.get(name)
            return kind(float(value)) if kind is int and value not in (None, "") else (
                kind(value) if value not in (None, "") else None)

        known = set(cls.BLUEQUE_FIELDS) | {"attempt"}
        return cls(
            id=task_id, status=data.get("status"), queue=data.get("queue"),
            parameters=data.get("parameters"), result=data.get("result"),
            error=data.get("error"), node=data.get("node"), pid=number("pid", int),
            created=number("created", float), updated=number("updated", float),
            eta=number("eta", float), attempt=number("attempt", int) or 0,
            extra={k: v for k, v in data.items() if k not in known},
        )


class Job(BluequeModel):
    """A task: the hash `blueque_task_<id>`.

    The ten Blueque fields come first; the others are this library's additions, which
    other Blueque clients ignore. `status` and `queue` are indexed by the Blueque
    structures (see `WireIndex`), so `Job.collection(queue="q", status="failed")` works
    for every task, whoever wrote it.
    """

    collection_manager = JobCollectionManager

    id = TaskIdField()
    status = ProtocolField(indexable=True, indexes=[WireIndex])
    queue = ProtocolField(indexable=True, indexes=[WireIndex])
    parameters = fields.InstanceHashField()
    result = fields.InstanceHashField()
    error = fields.InstanceHashField()
    node = fields.InstanceHashField()
    pid = fields.InstanceHashField()
    created = fields.InstanceHashField()
    updated = fields.InstanceHashField()
    eta = fields.InstanceHashField()
    # set by the reference client when a listener claims an orphan task
    reclaimed_node = fields.InstanceHashField()
    # additions of limpyd-blueque
    attempt = fields.InstanceHashField()  # reservations so far; the fencing token
    ttr = fields.InstanceHashField()  # lease length in seconds, overriding the worker's
    identifier = fields.InstanceHashField()  # a name of the work, kept in stored errors
    priority = fields.InstanceHashField()  # changed by requeue_priority_delta
    cancel_on_error = fields.InstanceHashField()  # any non-empty value: never requeue
    max_attempts = fields.InstanceHashField()  # overrides the queue's and the worker's
    max_run_time = fields.InstanceHashField()  # seconds; overrides the queue's
    pstart = fields.InstanceHashField()  # start time of the process `pid` (pid reuse)

    #: when True, no task of this class is requeued after an error
    always_cancel_on_error = False

    #: the Blueque fields (every Blueque client writes them)
    BLUEQUE_FIELDS = TaskData.BLUEQUE_FIELDS + ("reclaimed_node",)
    #: the fields this library adds to a task hash (other Blueque clients ignore them)
    OWN_FIELDS = ("attempt", "ttr", "identifier", "priority", "cancel_on_error",
                  "max_attempts", "max_run_time", "pstart")

    @property
    def key(self) -> str:
        return self.keys().task(self.pk.get())

    @classmethod
    def sort_wildcard(cls) -> str:
        return cls.keys().task("*")

    #: fields already known from the step that produced this instance (a reservation)
    known: dict = {}

    #: the reservation that produced this instance, when it came from one
    reservation: Reservation | None = None

    @classmethod
    def from_fields(cls, task_id: str, known: dict,
                    reservation: Reservation | None = None) -> "Job":
        """A `Job` for `task_id` that remembers fields a step just returned."""
        job = cls.lazy_connect(task_id)
        job.known = dict(known)
        job.reservation = reservation
        return job

    def connect(self) -> None:
        task_id = self._pk
        try:
            super().connect()
        except DoesNotExist:
            raise TaskNotFound(str(task_id)) from None

    # -- reading ----------------------------------------------------------------------
    @classmethod
    def load(cls, task_id: str) -> "Job":
        """The task with this id; `TaskNotFound` if its hash does not exist."""
        with reaching(cls.client()):
            return cls(task_id)

    def data(self) -> TaskData:
        """Every field of the task, read at once and typed."""
        with reaching(self.client()):
            values = self.connection.hgetall(self.key)
        if not values:
            raise TaskNotFound(self.pk.get())
        return TaskData.from_hash(self.pk.get(), values)

    @classmethod
    def queue_names(cls) -> list[str]:
        """Every queue `blueque_queues` lists."""
        return list(cls.client().zrange(cls.keys().queues, 0, -1))

    @classmethod
    def materialize(cls, pairs: Iterable[tuple[str, str]]) -> str:
        """A temporary set of the ids of the tasks matching any `(queue, status)` pair."""
        keys = cls.keys()
        destination = temporary_key(keys)
        sources = flatten(status_sources(keys, queue, status) for queue, status in pairs)
        if sources:
            cls.scripts().materialize(destination, sources)
        return destination

    # -- protocol steps on one task -----------------------------------------------------
    def _queue_name(self) -> str:
        queue = self.known.get("queue") or self.queue.hget()
        if not queue:
            raise ProtocolError(f"task {self.pk.get()!r} has no queue field")
        return queue

    def _refuse(self, outcome: Outcome, to_status: str, why: str) -> None:
        if outcome.missing:
            raise TaskNotFound(self.pk.get())
        raise InvalidTransition(self.pk.get(), outcome.status, to_status, why)

    def start(self, listener_id: str, pid: int, attempt: int | None = None,
              pstart: float | None = None) -> None:
        """Blueque "Task Started": process `pid` of `listener_id` now runs this task.

        Raises `InvalidTransition` unless the task is reserved by that listener (and
        attempt, when given). `pstart`, the process start time, tells that process from
        a later one given the same pid.
        """
        outcome = self.scripts().start(self._queue_name(), self.pk.get(),
                                       check_listener_id(listener_id), int(pid), time.time(),
                                       attempt, pstart)
        if not outcome.done:
            self._refuse(outcome, Status.STARTED, f"it must be reserved by {listener_id!r}"
                         + (f" in attempt {attempt}" if attempt is not None else ""))

    def _finish(self, status: Status, value: Any, listener_id: str | None, pid: int | None,
                attempt: int | None) -> bool:
        what = "result" if status is Status.COMPLETE else "error"
        text = encode(value, what)
        queue = self._queue_name()
        if listener_id is None:
            listener_id = self.known.get("node") or self.node.hget()
            if not listener_id:
                raise InvalidTransition(self.pk.get(), self.status.hget(), status,
                                        "no listener holds it")
        outcome = self.scripts().finish(queue, self.pk.get(), listener_id, status.value, text,
                                        time.time(), pid, attempt)
        if outcome.missing:
            raise TaskNotFound(self.pk.get())
        return outcome.done

    def complete(self, result: Any = "", *, listener_id: str | None = None,
                 pid: int | None = None, attempt: int | None = None) -> bool:
        """Blueque "Task Completed Successfully": store `result`, move to the complete list.

        Only the holder may complete: `listener_id` (default: the task's `node`) and,
        when given, `attempt`. Returns True when this call finished the task, False when
        it was refused (finished already, or now held by another listener or attempt):
        a task is finished exactly once.
        """
        return self._finish(Status.COMPLETE, result, listener_id, pid, attempt)

    def fail(self, error: Any, *, listener_id: str | None = None, pid: int | None = None,
             attempt: int | None = None) -> bool:
        """Blueque "Task Failed": store `error`, move to the failed list. See `complete`."""
        return self._finish(Status.FAILED, error, listener_id, pid, attempt)

    def requeue(self, *, listener_id: str | None = None, attempt: int | None = None,
                delay: float | None = None, error: Any = None, front: bool = False,
                priority_delta: float | None = None) -> bool:
        """Put a task its holder stops running back in line, in one step.

        Pending at once (at the `front` of the line, or its end), or scheduled `delay`
        seconds from now. `error`, when given, is stored in the `error` field. Returns
        False when the caller no longer holds the task (see `complete`).
        """
        queue = self._queue_name()
        if listener_id is None:
            listener_id = self.known.get("node") or self.node.hget() or ""
        now = time.time()
        outcome = self.scripts().requeue(
            queue, self.pk.get(), listener_id, now, attempt=attempt,
            eta=now + delay if delay else None,
            error=None if error is None else encode(error, "error"), front=front,
            priority_delta=priority_delta)
        if outcome.missing:
            raise TaskNotFound(self.pk.get())
        return outcome.done

    @property
    def must_be_cancelled_on_error(self) -> bool:
        """True when this task must not be requeued after an error."""
        return bool(self.always_cancel_on_error or self.cancel_on_error.hget())

    # -- hooks a subclass overrides: called by the worker, in the process running the task
    def run(self, queue: "Queue") -> Any:
        """The work of the task; its return value becomes the task result.

        Override it in a subclass, or give the worker a `callback`. By default it
        raises `NotImplementedError`, which fails the task.
        """
        raise NotImplementedError(
            f"{type(self).__name__}.run is not implemented: subclass Job or give the worker a callback")

    def on_started(self, queue: "Queue") -> None:
        """Called just before the task runs; default does nothing."""

    def on_success(self, queue: "Queue", result: Any) -> None:
        """Called after the result is stored; default does nothing."""

    def on_error(self, queue: "Queue", exception: BaseException, trace: str | None) -> None:
        """Called after the failure is stored (and the task requeued, if it is); no-op."""

    def on_skipped(self, queue: "Queue") -> None:
        """Called when a task taken from a queue is not run (not pending, or lost); no-op."""

    def on_requeued(self, queue: "Queue") -> None:
        """Called after a failed task was put back in line for another attempt; no-op."""

    def delete(self) -> None:
        """Blueque "Delete Finished Task"; `InvalidTransition` unless complete or failed."""
        queue = self._queue_name()
        outcome = self.scripts().delete(queue, self.pk.get())
        if not outcome.done:
            self._refuse(outcome, "deleted", "only a complete or failed task can be deleted")

    def hmset(self, **kwargs: Any) -> Any:
        protocol = {"status", "queue"} & set(kwargs)
        if protocol:
            raise ProtocolError(f"{sorted(protocol)} change only through the protocol steps")
        return super().hmset(**kwargs)


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
             pstart: float | None = None) -> tuple[Job | None, Reservation | None, list[str]]:
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
                ttr: float | None = None) -> Job | None:
        """Take the next pending task of this queue for `listener_id`, or None."""
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


class Error(BluequeModel):
    """A stored task failure, to filter by date, type, code, queue or job.

    Keys are limpyd's own, in this library's key family: `<prefix>:error:...`.
    """

    collection_manager = ExtendedCollectionManager

    queue_name = fields.InstanceHashField(indexable=True)
    job_pk = fields.InstanceHashField(indexable=True)
    identifier = fields.InstanceHashField(indexable=True)
    date = fields.InstanceHashField(indexable=True, indexes=[EqualIndex, TextRangeIndex])
    time = fields.InstanceHashField()
    timestamp = fields.InstanceHashField()
    type = fields.InstanceHashField(indexable=True)
    code = fields.InstanceHashField(indexable=True)
    message = fields.InstanceHashField()
    traceback = fields.InstanceHashField()
    attempt = fields.InstanceHashField()

    @classmethod
    def add_error(cls, queue_name: str, job: Job, error: BaseException,
                  when: datetime | None = None, trace: str | None = None,
                  **additional_fields: Any) -> "Error":
        """Store `error` raised by `job` of `queue_name`, at `when` (default: now, UTC)."""
        when = when or datetime.now(timezone.utc)
        values = {
            "queue_name": queue_name,
            "job_pk": job.pk.get(),
            "identifier": job.known.get("identifier") or job.identifier.hget() or "",
            "date": when.strftime("%Y-%m-%d"),
            "time": when.strftime("%H:%M:%S.%f"),
            "timestamp": repr(when.timestamp()),
            "type": type(error).__name__,
            "message": str(error),
            "attempt": job.known.get("attempt", ""),
        }
        code = getattr(error, "code", None)
        if code is not None:
            values["code"] = str(code)
        if trace:
            values["traceback"] = trace
        values.update(additional_fields)
        return cls(**values)

    @classmethod
    def collection_for_job(cls, job: Job | str) -> Any:
        """The errors of a task, newest first."""
        task_id = job if isinstance(job, str) else job.pk.get()
        return cls.collection(job_pk=task_id).sort(by="-timestamp")

    @property
    def datetime(self) -> datetime:
        """When the error happened (UTC)."""
        return datetime.fromtimestamp(float(self.timestamp.hget()), timezone.utc)
