"""`Job`: a task, living on the Blueque hash `blueque_task_<id>`."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, cast

from limpyd import fields
from limpyd.collection import CollectionManager
from limpyd.exceptions import DoesNotExist
from redis.exceptions import ResponseError

from .. import compat
from ..atomic import Outcome, Reservation
from ..connection import reaching
from ..exceptions import InvalidTransition, ProtocolError, TaskNotFound
from ..indexes import WireIndex, flatten, status_sources, temporary_key
from ..keys import check_listener_id
from ..statuses import Status
from ..values import encode
from .base import BluequeModel, ProtocolField, TaskIdField

if TYPE_CHECKING:
    from .queue import Queue

_NOTHING: Mapping[str, str] = MappingProxyType({})


class JobCollectionManager(compat.UnfilteredSet, CollectionManager):
    """Collections of tasks; with no filter, every task any queue structure lists."""

    model: type[Job]

    def unfiltered_set(self) -> str:
        return self.model.materialize(
            [(queue, status.value) for queue in self.model.queue_names() for status in Status])


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
    extra: dict[str, str]

    BLUEQUE_FIELDS = ("status", "queue", "parameters", "result", "error", "node", "pid",
                      "created", "updated", "eta")

    @classmethod
    def from_hash(cls, task_id: str, data: Mapping[str, str]) -> TaskData:
        def number(name: str, kind: type) -> Any:
            value = data.get(name)
            if value in (None, ""):
                return None
            return kind(float(value))  # "12.0" is an int field written as a float

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
    # set by a task process whose worker is gone: it still runs until then (Redis's clock)
    alive_until = fields.InstanceHashField()

    #: when True, no task of this class is requeued after an error
    always_cancel_on_error = False

    #: the Blueque fields (every Blueque client writes them)
    BLUEQUE_FIELDS = (*TaskData.BLUEQUE_FIELDS, "reclaimed_node")
    #: the fields this library adds to a task hash (other Blueque clients ignore them)
    OWN_FIELDS = ("attempt", "ttr", "identifier", "priority", "cancel_on_error",
                  "max_attempts", "max_run_time", "pstart", "alive_until")

    @property
    def task_id(self) -> str:
        """The task id (what `pk.get()` returns, without making the pk field)."""
        task_id = compat.cached_pk(self)
        return self.pk.get() if task_id is None else task_id

    @property
    def key(self) -> str:
        return self.keys().task(self.task_id)

    @classmethod
    def sort_wildcard(cls) -> str:
        return cls.keys().task("*")

    #: the reservation this instance was made from, when it came from one: the task as
    #: its holder sees it, with its lease terms (see `atomic.Reservation`)
    task: Reservation | None = None

    @property
    def known(self) -> Mapping[str, str]:
        """The task hash as the step that reserved it returned it (read-only; empty when
        this instance was not made from a reservation)."""
        return self.task.fields if self.task is not None else _NOTHING

    @classmethod
    def from_reservation(cls, reservation: Reservation) -> Job:
        """The `Job` of a reserved task, remembering its reservation."""
        job = cls.lazy_connect(reservation.task_id)
        job.task = reservation
        return job

    def connect(self) -> None:
        task_id = compat.cached_pk(self)
        try:
            super().connect()
        except DoesNotExist:
            raise TaskNotFound(str(task_id)) from None

    # -- reading ----------------------------------------------------------------------
    @classmethod
    def load(cls, task_id: str) -> Job:
        """The task with this id; `TaskNotFound` if its hash does not exist."""
        with reaching(cls.client()):
            return cls(task_id)

    def data(self) -> TaskData:
        """Every field of the task, read at once and typed."""
        with reaching(self.client()):
            values = cast("dict[str, str]", self.connection.hgetall(self.key))
        if not values:
            raise TaskNotFound(self.task_id)
        return TaskData.from_hash(self.task_id, values)

    @classmethod
    def queue_names(cls) -> list[str]:
        """Every queue `blueque_queues` lists (none when that key holds another type)."""
        try:
            return cast("list[str]", cls.client().zrange(cls.keys().queues, 0, -1))
        except ResponseError:
            return []

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
        queue = self.task.queue if self.task is not None else self.queue.hget()
        if not queue:
            raise ProtocolError(f"task {self.task_id!r} has no queue field")
        return queue

    def _refuse(self, outcome: Outcome, to_status: str, why: str) -> None:
        if outcome.missing:
            raise TaskNotFound(self.task_id)
        raise InvalidTransition(self.task_id, outcome.status, to_status, why)

    def start(self, listener_id: str, pid: int, attempt: int | None = None,
              pstart: str | None = None) -> None:
        """Blueque "Task Started": process `pid` of `listener_id` now runs this task.

        Raises `InvalidTransition` unless the task is reserved by that listener (and
        attempt, when given). `pstart`, the process's start mark, tells that process from
        a later one given the same pid.
        """
        outcome = self.scripts().start(self._queue_name(), self.task_id,
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
                raise InvalidTransition(self.task_id, self.status.hget(), status,
                                        "no listener holds it")
        outcome = self.scripts().finish(queue, self.task_id, listener_id, status.value, text,
                                        time.time(), pid, attempt)
        if outcome.missing:
            raise TaskNotFound(self.task_id)
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
            queue, self.task_id, listener_id, now, attempt=attempt,
            eta=now + delay if delay else None,
            error=None if error is None else encode(error, "error"), front=front,
            priority_delta=priority_delta)
        if outcome.missing:
            raise TaskNotFound(self.task_id)
        return outcome.done

    @property
    def must_be_cancelled_on_error(self) -> bool:
        """True when this task must not be requeued after an error."""
        return bool(self.always_cancel_on_error or self.cancel_on_error.hget())

    # -- hooks a subclass overrides: called by the worker, in the process running the task
    def run(self, queue: Queue) -> Any:
        """The work of the task; its return value becomes the task result.

        Override it in a subclass, or give the worker a `callback`. By default it
        raises `NotImplementedError`, which fails the task.
        """
        raise NotImplementedError(
            f"{type(self).__name__}.run is not implemented: subclass Job or give the worker "
            "a callback")

    def on_started(self, queue: Queue) -> None:
        """Called just before the task runs; default does nothing."""

    def on_success(self, queue: Queue, result: Any) -> None:
        """Called after the result is stored; default does nothing."""

    def on_error(self, queue: Queue, exception: BaseException, trace: str | None) -> None:
        """Called after the failure is stored (and the task requeued, if it is); no-op."""

    def on_skipped(self, queue: Queue) -> None:
        """Called when a task taken from a queue is not run (not pending, or lost); no-op."""

    def on_requeued(self, queue: Queue) -> None:
        """Called after a failed task was put back in line for another attempt; no-op."""

    def delete(self) -> None:
        """Blueque "Delete Finished Task"; `InvalidTransition` unless complete or failed."""
        queue = self._queue_name()
        outcome = self.scripts().delete(queue, self.task_id)
        if not outcome.done:
            self._refuse(outcome, "deleted", "only a complete or failed task can be deleted")

    def hmset(self, **kwargs: Any) -> Any:
        protocol = {"status", "queue"} & set(kwargs)
        if protocol:
            raise ProtocolError(f"{sorted(protocol)} change only through the protocol steps")
        return super().hmset(**kwargs)
