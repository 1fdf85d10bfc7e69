"""Periodic tasks: a task enqueued on a schedule by the workers of its queue, each tick once.

A periodic task of a queue is a definition in the hash `KeySpace.periodic(queue)` (name ->
JSON: schedule, parameters, overlap, last run) and the time of its next tick in the sorted
set `KeySpace.periodic_due(queue)`. A schedule is a cron expression (five fields, read in
UTC, with the `cronsim` package of the ``cron`` extra) or an interval in seconds. Times are
epoch seconds.

Every worker, each `schedule_interval`, ticks the due periodic tasks of its queues
(`tick_due`), one `tick` script each. The script is a compare-and-set on the due time (and
definition) the worker read: of all the workers that see the same tick, one enqueues it.

* Missed ticks (no worker ran when they were due) are not replayed: one run is enqueued,
  for the latest tick past, the earlier ones are counted and logged as skipped, and the
  next tick is the first one in the future.
* Unless declared with `overlap=True`, a tick whose previous run still waits or runs
  (pending, scheduled, reserved or started) is skipped and logged; the next one runs as
  usual once that run ended.
"""

from __future__ import annotations

import json
import logging
import math
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import Any, Callable, Union, cast

from redis.client import Pipeline
from redis.exceptions import ResponseError

from ..connection.clients import check_value_sizes
from ..connection.errors import reaching
from ..exceptions import ConfigurationError, InvalidName, ProtocolError
from ..protocol.keys import QUEUE_NAME_RE
from ..protocol.scripts import Scripts
from ..protocol.statuses import RUNNING, WAITING
from ..protocol.values import MAX_SECONDS, check_number, encode, printable, shown

Schedule = Union[str, float]
Log = Callable[..., None]

#: the longest cron expression accepted, in characters
CRON_MAX = 200
#: the usual shorthands of cron, as the five fields they stand for
CRON_ALIASES = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
                "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
                "@hourly": "0 * * * *"}
#: missed cron ticks counted one by one at most (more are reported as "at least" this)
COUNT_LIMIT = 10_000
#: statuses of the previous run that make a tick wait, unless runs may overlap
STILL_RUNS = tuple(sorted(status.value for status in WAITING | RUNNING))
#: most due periodic tasks of one queue read in one round trip
DUE_CHUNK = 100


@dataclass(frozen=True)
class PeriodicTask:
    """A periodic task as stored: its queue and name, what it enqueues, when, its last run."""

    queue: str
    name: str
    schedule: Schedule  # a cron expression (UTC), or an interval in seconds
    parameters: str  # as `values.encode` stores them
    overlap: bool = False  # may a tick run while the previous run still waits or runs
    last_task: str | None = None  # the id of the task of the last tick run
    last_tick: float | None = None  # the time of that tick
    next_tick: float | None = None  # from the due set; None when not in it

    def definition(self) -> str:
        """The JSON stored in the periodic hash (the next tick lives in the due set)."""
        return json.dumps({"schedule": self.schedule, "parameters": self.parameters,
                           "overlap": self.overlap, "last_task": self.last_task,
                           "last_tick": self.last_tick}, separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_definition(cls, queue: str, name: str, text: str,
                        next_tick: float | None = None) -> PeriodicTask:
        """The periodic task a stored definition describes; `ProtocolError` if unreadable."""
        try:
            data = json.loads(text)
            schedule = data["schedule"]
            task = cls(queue, name, schedule, data["parameters"], data["overlap"],
                       data.get("last_task"), data.get("last_tick"), next_tick)
        except (ValueError, TypeError, KeyError) as error:
            raise ProtocolError(f"periodic task {name!a} of queue {queue!a} has an unreadable "
                                f"definition ({type(error).__name__}: {error})") from None
        if not (isinstance(schedule, str) or _is_interval(schedule)) or not (
                isinstance(task.parameters, str) and isinstance(task.overlap, bool)
                and isinstance(task.last_task, (str, type(None)))
                and (task.last_tick is None or _is_number(task.last_tick))):
            raise ProtocolError(f"periodic task {name!a} of queue {queue!a} has a definition "
                                f"of unexpected types: {shown(text)}")
        return task


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_interval(value: object) -> bool:
    return _is_number(value) and 0 < cast(float, value) <= MAX_SECONDS


def iso(moment: float | None) -> str:
    """A time as ISO 8601 in UTC, to the second, or the millisecond when it has a fraction
    ('-' for none)."""
    if moment is None:
        return "-"
    precision = "milliseconds" if moment % 1 else "seconds"
    return datetime.fromtimestamp(moment, timezone.utc).isoformat(timespec=precision)


# -- schedules ---------------------------------------------------------------------------
def check_name(name: object) -> str:
    """Return `name` if it is a valid periodic task name (the queue name rule), else raise
    `InvalidName`."""
    if not isinstance(name, str) or not QUEUE_NAME_RE.match(name):
        raise InvalidName(f"invalid periodic task name {shown(name)}: use 1 to 200 characters "
                          "among letters, digits, '.', '_' and '-'")
    return name


def check_schedule(schedule: object) -> Schedule:
    """`schedule` as it is stored: a cron expression (a `str`, checked by computing its next
    tick), or an interval in seconds (a finite number above 0, at most
    `values.MAX_SECONDS`). `ConfigurationError` otherwise."""
    if isinstance(schedule, str):
        expression = " ".join(schedule.split())
        next(_cron_times(expression, time.time()))
        return expression
    checked: float = check_number("periodic interval", schedule, minimum=0, above=True,
                                  maximum=MAX_SECONDS)
    return checked


def _cron_times(expression: str, after: float, reverse: bool = False) -> Iterator[float]:
    """The ticks of a cron expression strictly after `after` (before, with `reverse`), in
    UTC. `ConfigurationError` for an invalid expression, one that never fires, or when
    the `cronsim` package (the ``cron`` extra) is not installed."""
    try:  # an optional dependency: only cron expressions need it
        from cronsim import CronSim, CronSimError
    except ImportError:
        raise ConfigurationError(
            f"the cron expression {shown(expression)} needs the cronsim package: "
            "pip install 'limpyd-blueque[cron]' (intervals in seconds need nothing)") from None
    text = CRON_ALIASES.get(expression.lower(), expression)
    # five fields, whichever cronsim is installed (from 2.7 it also takes a sixth, seconds)
    if len(text) > CRON_MAX or len(text.split()) != 5:
        raise ConfigurationError(f"invalid cron expression {shown(expression)}: expected five "
                                 "fields (minute hour day-of-month month day-of-week)")
    try:
        times = CronSim(text, datetime.fromtimestamp(after, timezone.utc), reverse=reverse)
        first = next(times)
    except CronSimError as error:
        raise ConfigurationError(f"invalid cron expression {shown(expression)}: {error}") from None
    except StopIteration:
        raise ConfigurationError(f"the cron expression {shown(expression)} never fires") from None
    yield first.timestamp()
    for moment in times:
        yield moment.timestamp()


def next_tick(schedule: Schedule, after: float) -> float:
    """The first tick of `schedule` strictly after `after`."""
    if isinstance(schedule, str):
        return next(_cron_times(schedule, after))
    return after + schedule


def catch_up(schedule: Schedule, due: float, now: float) -> tuple[float, int, float]:
    """For a periodic task due at `due`, seen at `now` (at or after `due`): the tick to run
    (the latest one past), how many earlier ticks are skipped (missed while no worker
    ran; at most `COUNT_LIMIT` counted for a cron), and the next tick (after `now`)."""
    if not isinstance(schedule, str):
        missed = max(0, math.floor((now - due) / schedule))
        return due + missed * schedule, missed, due + (missed + 1) * schedule
    following = next_tick(schedule, now)
    latest = max(due, next(_cron_times(schedule, following, reverse=True)))
    skipped = 0
    if latest > due:
        skipped = 1  # `due` itself, then every tick between it and `latest`
        for moment in _cron_times(schedule, due):
            if moment >= latest or skipped >= COUNT_LIMIT:
                break
            skipped += 1
    return latest, skipped, following


# -- declaring, listing, removing ----------------------------------------------------------
def declare(scripts: Scripts, queue: str, name: str, schedule: object, parameters: Any = "",
            overlap: bool = False) -> PeriodicTask:
    """Declare (or replace) the periodic task `name` of `queue`; the task as stored.

    Everything is checked before any write: the name (`InvalidName`), the schedule and
    `overlap` (`ConfigurationError`), the parameters (as `values.encode` takes them).
    The first tick is the first one after now. Declared again with the same schedule, a
    periodic task keeps its next tick (so that declaring at each start of an application
    delays nothing) and its last run (so that a running one is not overlapped); with
    another schedule, its next tick is computed anew.
    """
    check_name(name)
    checked = check_schedule(schedule)
    if not isinstance(overlap, bool):
        raise ConfigurationError(f"overlap must be True or False, not {shown(overlap)}")
    task = PeriodicTask(queue, name, checked, encode(parameters), overlap)
    client, keys = scripts.client, scripts.keys
    check_value_sizes(client, [task.parameters])

    declared: list[PeriodicTask] = []

    def step(pipe: Pipeline) -> None:  # under WATCH: run again if another client writes
        _check_types(pipe, scripts, queue)
        new = _redeclared(task, _read_one(pipe, scripts, queue, name))
        queues_fit = pipe.type(keys.queues) in ("none", "zset")
        pipe.multi()
        pipe.hset(keys.periodic(queue), name, new.definition())
        pipe.zadd(keys.periodic_due(queue), {name: cast(float, new.next_tick)})
        if queues_fit:  # listed as queues with tasks are: `blueque periodic list` finds it
            pipe.zincrby(keys.queues, 0, queue)
        declared[:] = [new]

    with reaching(client):
        client.transaction(step, keys.periodic(queue), keys.periodic_due(queue))
    return declared[0]


def _check_types(pipe: Pipeline, scripts: Scripts, queue: str) -> None:
    """`ProtocolError` when a periodic key of `queue` holds a value of another type."""
    keys = scripts.keys
    for key, kind in ((keys.periodic(queue), "hash"), (keys.periodic_due(queue), "zset")):
        found = cast(str, pipe.type(key))
        if found not in ("none", kind):
            raise ProtocolError(f"{key} holds a {found}, not a {kind}")


def _read_one(pipe: Pipeline, scripts: Scripts, queue: str, name: str) -> PeriodicTask | None:
    """The periodic task `name` as stored (None when absent or unreadable: replaced whole)."""
    text = cast("str | None", pipe.hget(scripts.keys.periodic(queue), name))
    due = pipe.zscore(scripts.keys.periodic_due(queue), name)
    if text is None:
        return None
    try:
        return PeriodicTask.from_definition(queue, name, text, due)
    except ProtocolError:
        return None


def _redeclared(task: PeriodicTask, stored: PeriodicTask | None) -> PeriodicTask:
    """`task` declared over `stored`: the next tick and the last run it keeps."""
    if stored is None:
        return replace(task, next_tick=next_tick(task.schedule, time.time()))
    same = stored.schedule == task.schedule and stored.next_tick is not None
    return replace(task, last_task=stored.last_task, last_tick=stored.last_tick,
                   next_tick=stored.next_tick if same else next_tick(task.schedule, time.time()))


def _execute(pipe: Pipeline, keys: list[str]) -> list[Any]:
    """Run `pipe`, one command per key of `keys`; `ProtocolError` naming the key of a
    command refused because that key holds another type."""
    replies = pipe.execute(raise_on_error=False)
    for key, reply in zip(keys, replies):
        if isinstance(reply, ResponseError):
            raise ProtocolError(f"{key} holds a value of another type: {reply}")
    return replies


def list_periodic(scripts: Scripts, queue: str) -> list[PeriodicTask]:
    """The periodic tasks of `queue`, by name. `ProtocolError` for a key of another type
    or an unreadable definition (remove it with `remove`)."""
    keys, client = scripts.keys, scripts.client
    with reaching(client), client.pipeline(transaction=True) as pipe:
        pipe.hgetall(keys.periodic(queue))
        pipe.zrange(keys.periodic_due(queue), 0, -1, withscores=True)
        definitions, due = _execute(pipe, [keys.periodic(queue), keys.periodic_due(queue)])
    ticks = dict(due)
    return [PeriodicTask.from_definition(queue, name, text, ticks.get(name))
            for name, text in sorted(definitions.items())]


def remove(scripts: Scripts, queue: str, name: str) -> bool:
    """Remove the periodic task `name` of `queue`; True if it was there. A run already
    enqueued is left alone."""
    check_name(name)
    keys, client = scripts.keys, scripts.client
    with reaching(client), client.pipeline(transaction=True) as pipe:
        pipe.hdel(keys.periodic(queue), name)
        pipe.zrem(keys.periodic_due(queue), name)
        removed = _execute(pipe, [keys.periodic(queue), keys.periodic_due(queue)])
    return any(removed)


# -- ticking -------------------------------------------------------------------------------
def tick_due(scripts: Scripts, queue: str, log: Log, now: float | None = None) -> int:
    """Tick every periodic task of `queue` due at `now` (default: the current time); the
    number of tasks enqueued. What each tick did is logged through `log(message, level)`:
    an enqueued tick at DEBUG, a skipped one at INFO, missed ticks at WARNING, a periodic
    task that cannot tick (unreadable, or a cron without cronsim) at ERROR. One round trip
    when none is due. `ProtocolError` when the queue's periodic keys hold other types."""
    now = time.time() if now is None else now
    enqueued = 0
    for name, due, text in _due(scripts, queue, now):
        try:
            enqueued += _tick_one(scripts, queue, name, due, text, now, log)
        except (ConfigurationError, ProtocolError) as error:
            log(f"[{queue}] periodic task {printable(name)} not ticked: {error}", logging.ERROR)
    return enqueued


def _due(scripts: Scripts, queue: str, now: float) -> list[tuple[str, float, str | None]]:
    """`(name, due time, definition or None)` of the periodic tasks of `queue` due at `now`."""
    keys, client = scripts.keys, scripts.client
    due_key, definitions_key = keys.periodic_due(queue), keys.periodic(queue)
    with reaching(client):
        try:
            due = cast("list[tuple[str, float]]", client.zrangebyscore(
                due_key, "-inf", now, start=0, num=DUE_CHUNK, withscores=True))
            if not due:
                return []
            texts = cast("list[str | None]", client.hmget(definitions_key, [n for n, _ in due]))
        except ResponseError as error:
            raise ProtocolError(f"the periodic keys of queue {queue!a} hold values of other "
                                f"types ({due_key}, {definitions_key}): {error}") from None
    return [(name, score, text) for (name, score), text in zip(due, texts)]


def _tick_one(scripts: Scripts, queue: str, name: str, due: float, text: str | None,
              now: float, log: Log) -> int:
    """Run the tick script for one due periodic task; 1 if it enqueued a task."""
    where = f"[{queue}] periodic task {printable(name)}"
    if text is None:  # a due entry without definition (not written by us): dropped
        outcome, _ = scripts.upkeep.tick(queue, name, seen="", due=due, next_due=due, now=now,
                                  task_id=str(uuid.uuid4()), parameters="", tick=due, after="")
        if outcome == "gone":
            log(f"{where}: due, but not defined: dropped from the due set", logging.WARNING)
        return 0
    task = PeriodicTask.from_definition(queue, name, text)
    tick, skipped, following = catch_up(task.schedule, due, now)
    task_id = str(uuid.uuid4())
    after = replace(task, last_task=task_id, last_tick=tick).definition()
    outcome, detail = scripts.upkeep.tick(
        queue, name, seen=text, due=due, next_due=following, task_id=task_id,
        parameters=task.parameters, tick=tick, after=after, now=now,
        last_task=None if task.overlap else task.last_task, still_runs=STILL_RUNS)
    if outcome in ("ticked", "overlap") and skipped:
        more = "at least " if skipped >= COUNT_LIMIT and isinstance(task.schedule, str) else ""
        log(f"{where}: {more}{skipped} missed tick(s) skipped, from {iso(due)} (no worker "
            f"ran); the tick of {iso(tick)} is the one run", logging.WARNING)
    if outcome == "ticked":
        log(f"{where}: tick of {iso(tick)} enqueued as task {detail}; next tick at "
            f"{iso(following)}", logging.DEBUG)
        return 1
    if outcome == "overlap":
        log(f"{where}: tick of {iso(tick)} skipped: its previous run "
            f"{printable(task.last_task)} is still {printable(detail)} (overlap=False); next "
            f"tick at {iso(following)}", logging.INFO)
    return 0
