"""`Queue`: a queue named by its pk, whose fields are the Blueque keys of that queue."""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from types import MappingProxyType
from typing import Any, Callable, NamedTuple, cast

import redis
from limpyd import fields

from ..connection import shims
from ..connection.errors import reaching
from ..exceptions import ConfigurationError, InvalidTransition, TaskNotFound
from ..protocol import statistics
from ..protocol.bounds import BOUND_TERMS
from ..protocol.codecs import check_codec
from ..protocol.keys import KeySpace, check_listener_id, check_queue_name
from ..protocol.limits import Limit, limit_field, stored_limit
from ..protocol.liveness import WORKER_ORDERS, server_time, worker_records
from ..protocol.options import TERM_RULES, check_term
from ..protocol.retries import RETRY_TERMS, check_names
from ..protocol.scripts import PassedOver, Reservation
from ..protocol.statuses import RUNNING, Status
from ..protocol.values import MAX_COUNT, check_number, check_task_id, timestamp
from . import periodic
from .base import (
    BluequeModel,
    QueueNameField,
    ReservedListField,
    WireListField,
    WireSetField,
    WireSortedSetField,
)
from .job import Job
from .limits import read_limits
from .producing import enqueue_one, enqueue_tasks
from .task import TaskData


class WorkerControls(NamedTuple):
    """What operators asked of a worker (see `Queue.worker_controls`)."""

    paused: frozenset[str]
    order: str | None
    #: the queues with a limit of their own (the queue as a whole)
    limited: frozenset[str] = frozenset()
    #: each queue's own retry settings and bounds, as stored (`configure`; see
    #: protocol/retries.py and protocol/bounds.py)
    terms: Mapping[str, Mapping[str, str]] = MappingProxyType({})


#: most entries one script of `truncate` or `drop` takes
EMPTY_CHUNK = 1000
#: the settings a queue may have, with the rules of their values (see `values.check_number`)
QUEUE_SETTINGS = TERM_RULES


class Queue(BluequeModel):
    """A queue, named by its pk; its fields are the Blueque keys of that queue.

    One class, though long: every step an application or an operator takes on a queue
    (enqueue, reserve, Tarantool's operations, counts, periodic tasks, setting a bad key
    aside, pausing, its limits across workers) is a method of the model it is called on,
    each a thin call of its step. The orders to workers (`tell_worker`,
    `worker_controls`) are class methods here beside `worker_records` and the pauses a
    worker reads with its order in one round trip.
    """

    name = QueueNameField()
    # settings of the queue, in the hash `<prefix>:queue:<name>`
    ttr = fields.InstanceHashField()
    max_run_time = fields.InstanceHashField()
    max_attempts = fields.InstanceHashField()
    ttl = fields.InstanceHashField()
    stall_timeout = fields.InstanceHashField()
    result_ttl = fields.InstanceHashField()
    failure_ttl = fields.InstanceHashField()
    error_ttl = fields.InstanceHashField()
    # the Blueque keys of the queue
    pending = WireListField(wire="pending")
    scheduled = WireSortedSetField(wire="scheduled")
    complete = WireListField(wire="complete")
    failed = WireListField(wire="failed")
    started = WireSetField(wire="started")
    listeners = WireSetField(wire="listeners")
    leases = WireSortedSetField(wire="leases")
    prioritized = WireSortedSetField(wire="prioritized")
    canceled = WireListField(wire="canceled")
    buried = WireListField(wire="buried")
    expired = WireListField(wire="expired")

    job_model = Job

    @property
    def key(self) -> str:
        return self.keys().queue_settings(self.pk.get())

    def configure(self, **settings: Any) -> None:
        """Set (or, with None, remove) the queue's `ttr`, `ttl`, `max_run_time`,
        `max_attempts`, `stall_timeout`, `result_ttl`, `failure_ttl`, `error_ttl`, its
        retry policy: `retry_delay`, `retry_backoff`, `retry_max_delay`, `retry_jitter`,
        `retry_deadline`, `no_retry_for` (exception type names), and the bounds of its
        forked tasks: `max_memory` (bytes, or text such as '512M'), `cpu_limit`,
        `soft_time_limit` (see docs/bounds.rst).

        A task's own field overrides its queue's setting, which overrides the worker's.
        Times are seconds above 0 (retentions: 0 deletes at the next cleaning, -1 keeps
        forever); `max_attempts` a whole number from 1. `ConfigurationError` names a bad
        value, before anything is written."""
        unknown = sorted(set(settings) - set(QUEUE_SETTINGS) - {"no_retry_for"})
        if unknown:
            raise ConfigurationError(f"unknown queue setting(s): {', '.join(unknown)}")
        texts: dict[str, str | None] = {}
        for name, value in settings.items():
            if value is None:
                texts[name] = None
            elif name == "no_retry_for":
                texts[name] = ",".join(check_names(value))
            else:
                texts[name] = repr(check_term(f"queue setting {name}", name, value))
        with self.client().pipeline(transaction=True) as pipe:
            for name, text in texts.items():
                if text is None:
                    pipe.hdel(self.key, name)
                else:
                    pipe.hset(self.key, name, text)
            with reaching(self.client()):
                pipe.execute()

    def settings(self) -> dict[str, Any]:
        """The queue's own settings that are set (numbers; `no_retry_for` a list of
        names)."""
        values = cast("dict[str, str]", self.client().hgetall(self.key))
        found: dict[str, Any] = {}
        for name, value in values.items():
            if name == "no_retry_for":
                found[name] = [part for part in value.split(",") if part]
                continue
            try:  # (a value another client wrote that is no number is left out)
                found[name] = float(value)
            except ValueError:
                continue
        return found

    #: the codec this object's `enqueue` and `enqueue_many` write parameters with (None:
    #: the default, "json"; see `named` and protocol/codecs.py)
    codec: str | None = None

    @classmethod
    def named(cls, name: str, codec: str | None = None) -> Queue:
        """The queue called `name`, whether or not it holds anything yet; `codec` names
        the codec its tasks are written with by this object (`UnknownCodec` names an
        unknown one): each task records it, so workers decode it with the same."""
        queue = cls.lazy_connect(check_queue_name(name))
        if codec is not None:
            queue.codec = check_codec(codec)
        return queue

    def reserved(self, listener_id: str) -> ReservedListField:
        """The reserved list of `listener_id` on this queue, as a limpyd list field."""
        field = ReservedListField(check_listener_id(listener_id))
        field.name = f"reserved_{listener_id}"
        shims.bind_new_field(field, type(self), self)
        return field

    @classmethod
    def listener_counts(cls) -> dict[str, int]:
        """`blueque_queues`: every queue name with its number of listeners."""
        return listener_counts(cls.client(), cls.keys())

    # -- producer steps -----------------------------------------------------------------
    def enqueue(self, parameters: Any = "", *, task_id: str | None = None,
                **options: Any) -> Job:
        """Blueque "Submission": a new task; returns its `Job`. One round trip.

        `parameters` is stored as is when a `str`, JSON-encoded otherwise (see
        `values.encode`); `task_id` (default: a new UUID) follows `values.check_task_id`.
        Options (all checked before anything is written, `ConfigurationError` naming a
        bad one):

        * `priority`: a whole number, higher runs sooner (default 0; see `MAX_PRIORITY`);
        * `delay` (seconds or a `timedelta`) or `eta` (epoch seconds or a `datetime`):
          scheduled, pending no sooner than that;
        * `identifier`: if a waiting task of this queue has it, that task is returned
          instead (its priority raised to this one if higher);
        * `prepend`: at the front of its priority, not the back;
        * `group`: the task's group (1 to 200 letters, digits, `.`, `_`, `-`, `:`): the
          groups of a queue take turns, and follow their limits (see `set_limit` and
          docs/limits.rst); workers of blueque 1.0.1 never take such a task;
        * `model`: the `Job` subclass (or its name) that runs it;
        * `after`: tasks (`Job`s or ids, in any queue) it waits for: it has the status
          `waiting`, in no line, until every one of them finished, then joins its line
          with its other options; `on_parent_failure` says what it does when one of them
          fails for good, is canceled or expires: `"cancel"` (the default), `"fail"` or
          `"run"` (see docs/workflows.rst); a task of `after` that does not exist is
          refused; takes no `identifier`;
        * any other keyword: a field of the job model (`ttr`, `max_attempts`,
          `max_run_time`, `cancel_on_error`, or a subclass's own).
        """
        if self.codec is not None:
            options.setdefault("codec", self.codec)
        return enqueue_one(self.job_model, self._queue_name(), parameters, task_id, options)

    def enqueue_many(self, parameters: Sequence[Any], *, task_ids: Sequence[str] | None = None,
                     chunk: int = 1000, options: Sequence[Mapping[str, Any]] | None = None,
                     **common: Any) -> list[Job]:
        """Many tasks, one atomic script call per `chunk` tasks (and per 64 MiB).

        The keyword options of `enqueue` apply to every task; `options`, one mapping per
        task, gives each its own (over those). Everything is checked before the first
        write: `parameters` is a sequence (a list, a tuple; not a `str` nor a `dict`),
        each encoded (`InvalidParameters`) and small enough for the server
        (`ParametersTooLarge`); `task_ids`, one per task, valid and distinct
        (`InvalidName`). A chunk is written whole or not at all: when one fails after
        others were written, `PartiallyEnqueued` carries their ids. Returns the `Job` of
        each task, in order (for an identifier that was waiting already, its task).
        """
        if self.codec is not None:
            common.setdefault("codec", self.codec)
        return enqueue_tasks(self.job_model, self._queue_name(), parameters, task_ids=task_ids,
                             chunk=chunk, options=options, common=common)

    def _queue_name(self) -> str:
        """This queue's name: its pk, read without building the pk field when it is
        known (a queue is mostly made by `named`, with its pk, to enqueue)."""
        name = shims.cached_pk(self)
        return self.pk.get() if name is None else name

    def schedule(self, parameters: Any, eta: float | datetime, *,
                 task_id: str | None = None, **options: Any) -> Job:
        """Blueque "Schedule Task": a task that turns pending at `eta` (epoch seconds or a
        `datetime`, a naive one being local time). An eta already past enqueues the task
        at once, as the reference client does. Takes the options of `enqueue`."""
        return self.enqueue(parameters, task_id=task_id, eta=timestamp("eta", eta), **options)

    def enqueue_due(self, now: float | datetime | None = None, limit: int = 0) -> list[str]:
        """Blueque "Enqueue Scheduled Tasks": make due tasks pending; return their ids.

        `now` (default: the current time) is as `schedule`'s eta; `limit`, a whole number,
        caps how many move (0: no limit)."""
        moment = time.time() if now is None else timestamp("now", now)
        check_number("limit", limit, integer=True, minimum=0, maximum=MAX_COUNT)
        with reaching(self.client()):
            return self.scripts().enqueue_due(self.pk.get(), moment, limit)

    def expire_due(self, limit: int = 0) -> list[str]:
        """Expire the waiting tasks past their ttl (by Redis's clock); their ids. `limit`
        caps how many (0: a thousand at most)."""
        check_number("limit", limit, integer=True, minimum=0, maximum=MAX_COUNT)
        with reaching(self.client()):
            return self.scripts().expire_due(self.pk.get(), time.time(), limit or 1000)

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
                     tally: statistics.Tally | None = None,
                     unlimited: Collection[str] = (),
                     ) -> tuple[Job | None, Reservation | None]:
        """Blueque "Node Task Pop", atomic, the one way to reserve: the next task of the
        highest priority among `queues` (see `scripts.Scripts.reserve`), reserved by
        `listener_id`, and started by `pid` (start mark `pstart`) in the same step when
        given. `ttr`, `max_run_time`, `max_attempts`: the defaults of its lease terms
        (`scripts.NEVER_EXPIRES` as `ttr`: never expires). Returns `(job, reservation)`,
        the job of `job_model` (default: this model's), or `(None, None)`; what the step
        passed over (`scripts.PassedOver`) goes to `report`, when there is any. A worker
        counts the take in its `tally` (see `write_tally`), else the step counts it.
        `unlimited`: the queues the caller knows have no limit of their own (their limit is
        then not read; see `worker_controls`)."""
        names = [check_queue_name(queue) for queue in queues]
        reservation, passed = cls.scripts().reserve(
            names, check_listener_id(listener_id), time.time(), pid=pid, pstart=pstart,
            ttrs=[ttr] * len(names), max_run_time=max_run_time, max_attempts=max_attempts,
            tally=tally, unlimited=unlimited)
        if report is not None and passed:
            report(passed)
        if reservation is None:
            return None, None
        return (job_model or cls.job_model).from_reservation(reservation), reservation

    @classmethod
    def write_tally(cls, tally: statistics.Tally) -> int:
        """Add what `tally` counted to the queues' counters, in one round trip (see
        `statistics.Tally.flush`); how many fields were written."""
        return tally.flush(cls.client(), cls.keys())

    def reserve(self, listener_id: str, *, pid: int | None = None,
                ttr: float | str | None = None) -> Job | None:
        """`reserve_from` this queue alone: its next pending task, or None."""
        job, _ = self.reserve_from([self.pk.get()], listener_id, pid=pid, ttr=ttr)
        return job

    def set_aside(self, key: str, kind: str, listener_id: str) -> tuple[str, str] | None:
        """Move aside a structure of this queue that a reserve step by `listener_id` found
        holding another type of value than `kind` (`scripts.PassedOver.misfits`), so that
        the queue goes on: `(the type it held, the name it was moved to)`, or None when
        the key is missing or of its type by now. Only a key of this queue's own
        structures, with its own type, is moved (else `ConfigurationError`)."""
        name = self.pk.get()
        if (key, kind) not in self.keys().queue_structures(name, listener_id):
            raise ConfigurationError(f"{key!a} is not a {kind} of queue {name!r}")
        return self.scripts().set_aside(key, kind, time.time())

    @classmethod
    def wake_channels(cls, names: Sequence[str]) -> list[str]:
        """The channels on which new pending tasks of these queues are announced."""
        return [cls.keys().wake_channel(check_queue_name(name)) for name in names]

    @classmethod
    def worker_records(cls) -> dict[str, float]:
        """`{worker id: time until which it is alive}` of this library's workers."""
        return worker_records(cls.client(), cls.keys())

    # -- pausing, and orders to workers ---------------------------------------------------
    def pause(self) -> bool:
        """Pause the queue: this library's workers take none of its tasks from about a
        second from now, its running tasks go on, and producers still enqueue (workers of
        blueque 1.0.1 do not know of it). True when it was not paused already."""
        with reaching(self.client()):
            return bool(self.client().set(self.keys().paused(self.pk.get()),
                                          repr(time.time()), nx=True))

    def resume(self) -> bool:
        """Let the workers take the queue's tasks again (they are woken at once). True
        when it was paused."""
        name, client = self.pk.get(), self.client()
        with reaching(client):
            deleted = client.delete(self.keys().paused(name))
            client.publish(self.keys().wake_channel(name), 1)
        return bool(deleted)

    def is_paused(self) -> bool:
        """True while the queue is paused (see `pause`)."""
        with reaching(self.client()):
            return bool(self.client().exists(self.keys().paused(self.pk.get())))

    @classmethod
    def paused_among(cls, names: Sequence[str]) -> frozenset[str]:
        """The queues of `names` that are paused, in one round trip."""
        return cls.worker_controls(None, names, limits=False).paused

    @classmethod
    def tell_worker(cls, worker_id: str, order: str | None) -> bool:
        """Give a live worker of this library an order, which it reads within about a
        second: `"quiet"` (take no new task; the running ones go on) or `"stop"` (stop as
        on SIGTERM: `on_terminate` says what becomes of its running tasks). False, with
        nothing written, when no live worker has this id. None takes an order back
        (True when there was one), whether or not the worker is alive."""
        if order is not None and order not in WORKER_ORDERS:
            raise ConfigurationError(f"unknown worker order {order!r}: one of "
                                     f"{', '.join(WORKER_ORDERS)}, or None")
        client, keys = cls.client(), cls.keys()
        with reaching(client):
            if order is None:
                try:
                    return bool(client.hdel(keys.worker_orders, worker_id))
                except redis.ResponseError:  # a key of another type: no order to take back
                    return False
            if worker_records(client, keys).get(worker_id, 0.0) < server_time(client):
                return False
            client.hset(keys.worker_orders, worker_id, order)
        return True

    @classmethod
    def worker_orders(cls) -> dict[str, str]:
        """`{worker id: order}` of the orders given to workers (see `tell_worker`)."""
        client = cls.client()
        with reaching(client):
            try:
                orders = cast("dict[str, str]", client.hgetall(cls.keys().worker_orders))
            except redis.ResponseError:  # a key of another type: no order
                return {}
        return {str(worker): str(order) for worker, order in orders.items()
                if order in WORKER_ORDERS}

    @classmethod
    def worker_controls(cls, worker_id: str | None, names: Sequence[str], *,
                        limits: bool = True) -> WorkerControls:
        """What operators asked of a worker on `names`, in one round trip: the paused
        queues among them, the worker's order (None: none; see `tell_worker`), the
        queues among them that have a limit of their own (see `set_limit`) and their
        retry settings and bounds (see `configure`; neither read without `limits`). A key
        of another type reads as no pause, no order, a limit (the reserve step then
        reads it, and reports it) and no setting."""
        client, keys = cls.client(), cls.keys()
        term_fields = [*RETRY_TERMS, "no_retry_for", *BOUND_TERMS]
        with client.pipeline(transaction=False) as pipe:
            for name in names:
                pipe.exists(keys.paused(name))
            if limits:
                for name in names:
                    pipe.hexists(keys.limits(name), "")
                for name in names:
                    pipe.hmget(keys.queue_settings(name), term_fields)
            if worker_id is not None:
                pipe.hget(keys.worker_orders, worker_id)
            with reaching(client):
                replies = pipe.execute(raise_on_error=False)
        count = len(names)
        paused = frozenset(name for name, reply in zip(names, replies[:count]) if reply == 1)
        limited = frozenset(name for name, reply in zip(names, replies[count:2 * count])
                            if limits and reply is not False)
        terms = {name: {field: value for field, value in zip(term_fields, reply)
                          if isinstance(value, str)}
                   for name, reply in zip(names, replies[2 * count:3 * count])
                   if limits and isinstance(reply, list)}
        order = replies[(3 if limits else 1) * count] if worker_id is not None else None
        return WorkerControls(paused, order if order in WORKER_ORDERS else None, limited,
                              MappingProxyType(terms))

    # -- limits across all workers (docs/limits.rst) ---------------------------------------
    def set_limit(self, group: str | None, *, max_running: int | None = None,
                  max_starts: int | None = None, per: float | None = None,
                  weight: float | None = None) -> bool:
        """Limit `group` of this queue (`"*"`: every group without a limit of its own; None:
        the queue as a whole) across all workers: at most `max_running` of its tasks
        running at once, at most `max_starts` starts in any window of `per` seconds, and
        its share of the starts when groups compete, `weight` (default 1). Replaces the
        group's limit; applies to the next reservation (a queue's own limit, set where it
        had none: within half a second, as workers read which of their queues have one
        with their pauses). Every value is checked before
        anything is written (`ConfigurationError`). True when the limit changed."""
        stored = stored_limit(group, max_running, max_starts, per, weight)
        name, client = self._queue_name(), self.client()
        with reaching(client):
            changed = self.scripts().limit(name, limit_field(group), stored)
            try:  # a queue with a limit is a known queue (listed, given limits by name)
                client.zadd(self.keys().queues, {name: 0}, nx=True)
            except redis.ResponseError as error:
                if not str(error).startswith("WRONGTYPE"):
                    raise
                # the index holds another type: the limit is set all the same
        return changed

    def remove_limit(self, group: str | None) -> bool:
        """Remove the limit of `group` (see `set_limit`); True when there was one."""
        field = limit_field(group)
        with reaching(self.client()):
            return self.scripts().limit(self._queue_name(), field, None)

    def limits(self) -> dict[str | None, Limit]:
        """`{group: Limit}` of every limit of this queue, with the live `running` and
        `waiting` counts (see `models.limits.read_limits`)."""
        return read_limits(self.client(), self.keys(), self._queue_name())

    # -- Tarantool's queue operations -----------------------------------------------------
    def kick(self, count: int = 1) -> int:
        """Put up to `count` buried tasks back in line, oldest first; how many were."""
        check_number("count", count, integer=True, minimum=1, maximum=MAX_COUNT)
        with reaching(self.client()):
            return len(self.scripts().kick(self.pk.get(), count, time.time()))

    def peek(self, task_id: str) -> TaskData:
        """A task of this queue, read without changing it (else `TaskNotFound`)."""
        data = self.job_model.lazy_connect(check_task_id(task_id)).data()
        if data.queue != self.pk.get():
            raise TaskNotFound(task_id)
        return data

    def truncate(self) -> int:
        """Delete every waiting task, a thousand per script; how many."""
        return self._empty("truncate")

    def drop(self) -> int:
        """Delete the queue and every task it files; how many tasks. Refused with
        `QueueBusy` while it has listeners or running tasks (stop its workers first)."""
        return self._empty("drop")

    def _empty(self, mode: str) -> int:
        total, done = 0, False
        while not done:
            with reaching(self.client()):
                deleted, done = self.scripts().empty(self.pk.get(), mode, EMPTY_CHUNK)
            total += deleted
        return total

    def delete(self, task_id: str | None = None) -> None:
        """Delete one task of this queue, not running (Tarantool's `delete`); see `drop`."""
        if task_id is None:
            raise ConfigurationError("Queue.delete deletes one task: give its id (drop() "
                                     "deletes the queue and all its tasks)")
        self.peek(task_id)  # TaskNotFound unless a task of this queue
        self.job_model.lazy_connect(task_id).delete()

    def delete_task(self, job: Job) -> None:
        """Blueque "Delete Finished Task" on this queue (`InvalidTransition` otherwise)."""
        data = job.data()
        if data.queue != self.pk.get():
            raise InvalidTransition(data.id, data.status, "deleted",
                                    f"it is in queue {data.queue!r}, not {self.pk.get()!r}")
        job.delete(finished_only=True)

    # -- reading ----------------------------------------------------------------------------
    def counts(self) -> dict[str, int]:
        """How many tasks each status holds in this queue, in one round trip (`running`:
        the reserved and started tasks). See `statistics`."""
        tasks = self.statistics()["tasks"]
        counts = {status.value: tasks[status.value] for status in Status
                  if status not in RUNNING}
        counts.update(running=tasks["taken"], started=tasks["started"])
        return counts

    def statistics(self) -> dict[str, dict[str, int]]:
        """This queue's statistics in O(1), in Tarantool's shape (see
        `limpyd_blueque.protocol.statistics.read`): `{"tasks": {...}, "calls": {...}}`."""
        return statistics.read(self.client(), self.keys(), [self.pk.get()])[self.pk.get()]

    @classmethod
    def statistics_all(cls) -> dict[str, dict[str, dict[str, int]]]:
        """The statistics of every queue `blueque_queues` lists, by name."""
        return statistics.read(cls.client(), cls.keys(), cls.job_model.queue_names())

    @classmethod
    def count_waiting_jobs(cls, names: str | Sequence[str]) -> int:
        """How many tasks are pending in these queues (a name or several), all priorities
        together (redis-limpyd-jobs' name). One round trip."""
        return cls._count(names, Status.PENDING)

    @classmethod
    def count_delayed_jobs(cls, names: str | Sequence[str]) -> int:
        """How many tasks are scheduled (delayed) in these queues. One round trip."""
        return cls._count(names, Status.SCHEDULED)

    @classmethod
    def _count(cls, names: str | Sequence[str], status: Status) -> int:
        queues = [names] if isinstance(names, str) else list(names)
        keys = cls.keys()
        with cls.client().pipeline(transaction=False) as pipe:
            for name in queues:
                for key, kind in keys.structures_of(check_queue_name(name), status):
                    (pipe.llen if kind == "list" else pipe.zcard)(key)
            with reaching(cls.client()):
                return sum(pipe.execute())

    # -- periodic tasks (the logic lives in `limpyd_blueque.models.periodic`) ----------------------
    def every(self, schedule: str | float, parameters: Any = "", *, name: str,
              overlap: bool = False) -> periodic.PeriodicTask:
        """Declare (or replace) the periodic task `name`: `parameters` enqueued on this
        queue at each tick of `schedule`, a cron expression (five fields, in UTC; needs
        the ``cron`` extra) or an interval in seconds, by the workers of the queue, each
        tick once. Unless `overlap`, a tick is skipped while the previous run still waits
        or runs. Checked before any write (`InvalidName`, `ConfigurationError`,
        `InvalidParameters`); see `periodic.declare`."""
        if self.keyring() is not None or self.codec is not None:
            raise ConfigurationError("periodic tasks are written clear, in the default codec: "
                                     "declare them from a Queue with no codec, on models "
                                     "bound without encryption keys")
        return periodic.declare(self.scripts(), self.pk.get(), name, schedule, parameters,
                                overlap=overlap)

    def periodic_tasks(self) -> list[periodic.PeriodicTask]:
        """The periodic tasks of this queue, by name, each with its next tick."""
        return periodic.list_periodic(self.scripts(), self.pk.get())

    def remove_periodic(self, name: str) -> bool:
        """Remove the periodic task `name` of this queue; True if it was there."""
        return periodic.remove(self.scripts(), self.pk.get(), name)


def listener_counts(client: redis.Redis, keys: KeySpace) -> dict[str, int]:
    """Every queue of the index with its number of listeners; in the cluster key mode,
    each counted in its queue's own index entry (`KeySpace.queue_index`): one more read
    per queue, in one pipeline split by node."""
    pairs = cast("list[tuple[str, float]]", client.zrange(keys.queues, 0, -1, withscores=True))
    if not keys.cluster:
        return {name: int(score) for name, score in pairs}
    with client.pipeline(transaction=False) as pipe:
        for name, _ in pairs:
            pipe.zscore(keys.queue_index(name), name)
        scores = pipe.execute(raise_on_error=False)
    return {name: int(score) if isinstance(score, float) else 0
            for (name, _), score in zip(pairs, scores)}
