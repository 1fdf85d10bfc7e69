"""`Task`: a task hash `blueque_task_<id>`, its fields and the protocol steps on it."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeVar, cast

from limpyd import fields
from limpyd.collection import CollectionManager
from limpyd.exceptions import DoesNotExist
from redis.exceptions import RedisError, ResponseError

from ..connection import shims
from ..connection.errors import reaching
from ..exceptions import InvalidTransition, LimpydBluequeError, ProtocolError, TaskNotFound
from ..protocol.keys import check_listener_id
from ..protocol.options import DEFAULT_RETENTION, Retention, eta_of
from ..protocol.scripts import Reservation, StepResult
from ..protocol.statistics import Tally
from ..protocol.statuses import Status
from ..protocol.values import MAX_SECONDS, TASK_ID_MAX, check_number, encode, printable
from . import dependencies
from .base import BluequeModel, ProtocolField, TaskIdField
from .indexes import WireIndex, flatten, status_sources, temporary_key

if TYPE_CHECKING:
    pass

logger = logging.getLogger(__name__)
_NOTHING: Mapping[str, str] = MappingProxyType({})
T = TypeVar("T", bound="Task")


class TaskCollectionManager(shims.UnfilteredSet, CollectionManager):
    """Collections of tasks; with no filter, every task any queue structure lists."""

    model: type[Task]

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

    def status_in(self, *statuses: str, attempt: int | None = None) -> bool:
        """True when the task has one of `statuses` (in that `attempt`, when given)."""
        return self.status in statuses and (attempt is None or self.attempt == attempt)

    @classmethod
    def from_hash(cls, task_id: str, data: Mapping[str, str]) -> TaskData:
        """The snapshot of the task hash `data` (as HGETALL gives it).

        Raises `ProtocolError`, naming the task, the field and its value, when `created`,
        `updated` or `eta` is not a number, or `pid` or `attempt` not a whole number: the
        hash is input from any client of the server. An empty field is an unset one.
        """
        def number(name: str, whole: bool) -> Any:
            text = data.get(name)
            return _number_field(task_id, name, text, whole) if text else None

        known = set(cls.BLUEQUE_FIELDS) | {"attempt"}
        return cls(
            id=task_id, status=data.get("status"), queue=data.get("queue"),
            parameters=data.get("parameters"), result=data.get("result"),
            error=data.get("error"), node=data.get("node"), pid=number("pid", True),
            created=number("created", False), updated=number("updated", False),
            eta=number("eta", False), attempt=number("attempt", True) or 0,
            extra={k: v for k, v in data.items() if k not in known},
        )


def _number_field(task_id: str, name: str, text: str, whole: bool) -> float:
    """The number field `name` of a task hash, read from `text`: a whole number (an `int`)
    when `whole`, and "12.0" is one, written as a float. `ProtocolError` otherwise."""
    try:
        value = float(text)
    except ValueError:
        pass
    else:
        if not whole:
            return value
        if value.is_integer():  # NaN and the infinities are not
            return int(value)
    raise ProtocolError(f"task '{_clipped(task_id, TASK_ID_MAX)}' has a corrupt {name} field: "
                        f"'{_clipped(text)}' is not {'a whole number' if whole else 'a number'}")


def _clipped(text: str, limit: int = 80) -> str:
    """`text` fit for a message: escaped (`printable`), its first `limit` characters."""
    return printable(text[:limit]) + ("..." if len(text) > limit else "")


class Task(BluequeModel):
    """A task: the hash `blueque_task_<id>`, its fields, and the protocol steps on it.

    `Job` adds what a task does when it runs (the hooks a subclass overrides) and the
    producer's API; it is the model to use and to subclass.

    The ten Blueque fields come first; the others are this library's additions, which
    other Blueque clients ignore. `status` and `queue` are indexed by the Blueque
    structures (see `WireIndex`), so `Job.collection(queue="q", status="failed")` works
    for every task, whoever wrote it.

    Long, as a model is: its field table (one line per field of the hash) and one short
    method per protocol step on a task.
    """

    abstract = True
    collection_manager = TaskCollectionManager

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
    # these two file a waiting task too: only the steps write them
    identifier = ProtocolField()  # at most one waiting task per identifier
    priority = ProtocolField()  # a whole number, higher runs sooner (unset: 0)
    group = ProtocolField()  # the group whose line it waits in, and whose limit it follows
    cancel_on_error = fields.InstanceHashField()  # any non-empty value: never requeue
    max_attempts = fields.InstanceHashField()  # overrides the queue's and the worker's
    max_run_time = fields.InstanceHashField()  # seconds; overrides the queue's
    pstart = fields.InstanceHashField()  # start time of the process `pid` (pid reuse)
    # set by a task process whose worker is gone: it still runs until then (Redis's clock)
    alive_until = fields.InstanceHashField()
    model = fields.InstanceHashField()  # the name of its Job subclass (`get_model_repr`)
    uncounted = fields.InstanceHashField()  # attempts that were not failures (delays)
    started_at = fields.InstanceHashField()  # when its last attempt started
    periodic = fields.InstanceHashField()  # the periodic task whose tick made it
    periodic_tick = fields.InstanceHashField()  # the moment of that tick
    expires_at = fields.InstanceHashField()  # a waiting task not started by then expires
    # also in the hash, read through `Job` methods of the same names (no limpyd field):
    # `progress` and `checkpoint` (JSON, see progress.py) and `cancel_requested` (when the
    # cancel of the running task was asked)
    stalled_at = fields.InstanceHashField()  # when it was found stalled (progress still)
    # its own terms (over its queue's and its worker's)
    stall_timeout = fields.InstanceHashField()
    result_ttl = fields.InstanceHashField()
    failure_ttl = fields.InstanceHashField()
    error_ttl = fields.InstanceHashField()
    parents = fields.InstanceHashField()  # the ids of the tasks it waited for (JSON)
    on_parent_failure = fields.InstanceHashField()  # 'fail' or 'run' (unset: 'cancel')
    # its retry policy, over its queue's and its worker's (see protocol/retries.py)
    retry_delay = fields.InstanceHashField()
    retry_backoff = fields.InstanceHashField()
    retry_max_delay = fields.InstanceHashField()
    retry_jitter = fields.InstanceHashField()
    retry_deadline = fields.InstanceHashField()
    no_retry_for = fields.InstanceHashField()  # exception type names, comma-separated
    # its bounds, over its queue's and its worker's (see protocol/bounds.py)
    max_memory = fields.InstanceHashField()  # bytes
    cpu_limit = fields.InstanceHashField()  # CPU seconds
    soft_time_limit = fields.InstanceHashField()  # seconds
    peak_rss = fields.InstanceHashField()  # bytes: the peak memory of its last process
    # the codec its parameters, result and checkpoints are written with (unset: "json",
    # the Blueque wire format; see protocol/codecs.py)
    codec = fields.InstanceHashField()
    # set when its parameters, result, checkpoints and progress messages are encrypted
    # (the algorithm; see protocol/encryption.py)
    encrypted = fields.InstanceHashField()

    #: the Blueque fields (every Blueque client writes them)
    BLUEQUE_FIELDS = (*TaskData.BLUEQUE_FIELDS, "reclaimed_node")
    #: the fields this library adds to a task hash (other Blueque clients ignore them)
    OWN_FIELDS = ("attempt", "ttr", "identifier", "priority", "group", "cancel_on_error",
                  "max_attempts", "max_run_time", "pstart", "alive_until", "model",
                  "uncounted", "started_at", "periodic", "periodic_tick",
                  "expires_at", "progress", "checkpoint", "cancel_requested", "stalled_at",
                  "stall_timeout", "result_ttl", "failure_ttl", "error_ttl", "retry_delay",
                  "retry_backoff", "retry_max_delay", "retry_jitter", "retry_deadline",
                  "no_retry_for", "max_memory", "cpu_limit", "soft_time_limit", "peak_rss",
                  "codec", "encrypted")

    @property
    def task_id(self) -> str:
        """The task id (what `pk.get()` returns, without making the pk field)."""
        task_id = shims.cached_pk(self)
        return self.pk.get() if task_id is None else task_id

    @property
    def key(self) -> str:
        return self.keys().task(self.task_id)

    @classmethod
    def sort_wildcard(cls) -> str:
        return cls.keys().task("*")

    #: the reservation this instance was made from, when it came from one: the task as
    #: its holder sees it, with its lease terms (see `scripts.Reservation`)
    task: Reservation | None = None
    #: how long the tasks this instance finishes are kept, unless the task or its queue
    #: says otherwise (a worker sets its own)
    retention: Retention = DEFAULT_RETENTION

    @property
    def known(self) -> Mapping[str, str]:
        """The task hash as the step that reserved it returned it (read-only; empty when
        this instance was not made from a reservation)."""
        return self.task.fields if self.task is not None else _NOTHING

    @classmethod
    def from_reservation(cls: type[T], reservation: Reservation) -> T:
        """The instance of a reserved task, remembering its reservation."""
        job = cls.lazy_connect(reservation.task_id)
        job.task = reservation
        return job

    def connect(self) -> None:
        task_id = shims.cached_pk(self)
        try:
            super().connect()
        except DoesNotExist:
            raise TaskNotFound(str(task_id)) from None

    # -- reading ----------------------------------------------------------------------
    @classmethod
    def load(cls: type[T], task_id: str) -> T:
        """The task with this id; `TaskNotFound` if its hash does not exist."""
        with reaching(cls.client()):
            return cls(task_id)

    def raw_field(self, name: str) -> str | None:
        """One field of the task hash, whether or not the model declares it."""
        with reaching(self.client()):
            return cast("str | None", self.connection.hget(self.key, name))

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
            with reaching(cls.client()):
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
            cls.scripts().upkeep.materialize(destination, sources)
        return destination

    # -- protocol steps on one task -----------------------------------------------------
    def _queue_name(self) -> str:
        queue = self.task.queue if self.task is not None else self.queue.hget()
        if not queue:
            if not self.connection.exists(self.key):
                raise TaskNotFound(self.task_id)
            raise ProtocolError(f"task {self.task_id!r} has no queue field")
        return queue

    def _refuse(self, outcome: StepResult, to_status: str, why: str) -> None:
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
                attempt: int | None, tally: Tally | None = None,
                peak_rss: int | None = None) -> bool:
        """The holder's finish step; a task whose cancel was asked is filed as canceled
        (`settled` then says "canceled"). Counted in `tally` when given (see
        `statistics.Tally`), else by the step itself; `peak_rss` noted when given."""
        what = "result" if status is Status.COMPLETE else "error"
        text = encode(value, what)
        queue = self._queue_name()
        if listener_id is None:
            listener_id = self.known.get("node") or self.node.hget()
            if not listener_id:
                raise InvalidTransition(self.task_id, self.status.hget(), status,
                                        "no listener holds it")
        reserved = self.task
        outcome = self.scripts().finish(
            queue, self.task_id, listener_id, status.value, text, time.time(), pid, attempt,
            self.retention, tally, reserved.queue_ttl(status.value) if reserved else None,
            peak_rss)
        if outcome.missing:
            raise TaskNotFound(self.task_id)
        if outcome.followed:
            self.follow_up(queue)
        return self._settle(outcome.done, "canceled") if outcome.canceled else outcome.done

    def follow_up(self, queue: str) -> None:
        """Tell the tasks waiting for this one, and its workflow, that it finished (see
        `dependencies.follow_up`). Its step is done already: a failure here is logged and
        left to the workers' own follow-up of their queues."""
        try:
            dependencies.follow_up(self.scripts(), [queue], self.retention)
        except (LimpydBluequeError, RedisError) as error:
            logger.warning("[%s] the tasks waiting for %s were not told yet: %s", queue,
                           self.task_id, error)

    def complete(self, result: Any = "", *, listener_id: str | None = None,
                 pid: int | None = None, attempt: int | None = None,
                 tally: Tally | None = None, peak_rss: int | None = None) -> bool:
        """Blueque "Task Completed Successfully": store `result`, move to the complete list.

        Only the holder may complete: `listener_id` (default: the task's `node`) and,
        when given, `attempt`. Returns True when this call finished the task, False when
        it was refused (finished already, or now held by another listener or attempt):
        a task is finished exactly once. A worker counts its steps in its `tally`
        (`statistics.Tally`); without one, the step counts itself in its queue's counters.
        `peak_rss`: the peak memory (bytes) of the process that ran it, noted on the task.
        """
        return self._finish(Status.COMPLETE, result, listener_id, pid, attempt, tally,
                            peak_rss)

    def fail(self, error: Any, *, listener_id: str | None = None, pid: int | None = None,
             attempt: int | None = None, tally: Tally | None = None,
             peak_rss: int | None = None) -> bool:
        """Blueque "Task Failed": store `error`, move to the failed list. See `complete`."""
        return self._finish(Status.FAILED, error, listener_id, pid, attempt, tally, peak_rss)

    def _put_back(self, queue: str, listener_id: str | None, attempt: int | None, now: float,
                  *, eta: float | None = None, error: Any = None, front: bool = False,
                  priority_delta: int | None = None, uncounted: bool = False,
                  peak_rss: int | None = None) -> bool:
        """The holder's requeue step (see `requeue`)."""
        if listener_id is None:
            listener_id = self.known.get("node") or self.node.hget() or ""
        outcome = self.scripts().requeue(
            queue, self.task_id, listener_id, now, attempt=attempt, eta=eta,
            error=None if error is None else encode(error, "error"), front=front,
            priority_delta=priority_delta, uncounted=uncounted, retention=self.retention,
            peak_rss=peak_rss)
        if outcome.missing:
            raise TaskNotFound(self.task_id)
        return self._settle(outcome.done, "canceled") if outcome.canceled else outcome.done

    def _retry(self, queue: str, status: str, now: float, eta: float | None, front: bool,
               priority: int | None) -> bool:
        """A failed or canceled task back in line (see `requeue`)."""
        outcome = self.scripts().retry(queue, self.task_id, status, now, eta=eta, front=front,
                                       priority=priority)
        if outcome.missing:
            raise TaskNotFound(self.task_id)
        if outcome.done:
            dependencies.reopen(self.scripts(), self.task_id)
        return outcome.done

    # -- what a holder may do with the task it runs (Tarantool's operations) ------------------
    #: "released" or "buried" by its own code as it ran (its worker records no outcome),
    #: or "canceled" when an outcome step filed it as canceled (its cancel was asked)
    settled: str | None = None

    def _holder(self, listener_id: str | None) -> str:
        return listener_id or self.known.get("node") or self.node.hget() or ""

    def _attempt(self, attempt: int | None) -> int | None:
        """The attempt a holder acts for: the one given, else the one this instance was
        reserved in (a stale instance never acts on a later attempt), else any."""
        if attempt is not None:
            return attempt
        return (self.task.attempt or None) if self.task is not None else None

    def _settle(self, done: bool, how: str) -> bool:
        self.settled = how if done else self.settled
        return done

    def release(self, delay: float | timedelta | None = None, *,
                listener_id: str | None = None, attempt: int | None = None) -> bool:
        """Give the task back: pending again at the front of its priority (or scheduled
        `delay` seconds from now), this attempt not counted as a failure. Only its holder
        may (`listener_id`, default its `node`; `attempt`, default the attempt this
        instance was reserved in): False when the caller no longer holds it."""
        now = time.time()
        done = self._put_back(self._queue_name(), self._holder(listener_id),
                              self._attempt(attempt), now, eta=eta_of(now, delay), front=True,
                              uncounted=True)
        return self._settle(done, self.settled or "released")

    def bury(self, why: Any = None, *, listener_id: str | None = None,
             attempt: int | None = None) -> bool:
        """Put the task aside: status `buried`, out of line until `Queue.kick` puts it back
        (a poisoned task that must not be retried nor lost). `why`, when given, is stored
        in its `error` field. Only its holder may: see `release`."""
        outcome = self.scripts().bury(
            self._queue_name(), self.task_id, self._holder(listener_id), time.time(),
            attempt=self._attempt(attempt), why=None if why is None else encode(why, "error"),
            retention=self.retention)
        if outcome.missing:
            raise TaskNotFound(self.task_id)
        return self._settle(outcome.done, "canceled" if outcome.canceled else "buried")

    def touch(self, seconds: float, *, listener_id: str | None = None,
              attempt: int | None = None) -> bool:
        """Extend the running task's lease by `seconds`, beyond what the heartbeat gives
        (a lease that never expires stays so). Only its holder may: see `release`."""
        check_number("touch seconds", seconds, minimum=0, above=True, maximum=MAX_SECONDS)
        outcome, _ = self.scripts().touch(self._queue_name(), self.task_id,
                                          self._holder(listener_id), seconds,
                                          attempt=self._attempt(attempt))
        if outcome.missing:
            raise TaskNotFound(self.task_id)
        return outcome.done

    def hmset(self, **kwargs: Any) -> Any:
        protocol = {"status", "queue", "priority", "identifier"} & set(kwargs)
        if protocol:
            raise ProtocolError(f"{sorted(protocol)} change only through the protocol steps")
        return super().hmset(**kwargs)
