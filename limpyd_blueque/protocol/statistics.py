"""Statistics of queues in O(1), whatever their size: how many tasks each status holds,
read from the length of the structures that file them (which every Blueque client keeps
true, the reference included), and how many times each operation ran, counted in
`<prefix>:stats:<queue>` by the scripts themselves or, for the steps a worker runs on its
tasks, by the worker (`Tally`), about once a second (operations of other Blueque clients
are not counted there).

The shape is Tarantool's queue's `statistics()`: `{"tasks": {...}, "calls": {...}}`,
with its names (`ready`, `taken`, `done`, `delayed`, `buried`, `total`) beside ours.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis

from ..connection.errors import reaching
from .keys import STATUS_STRUCTURES, KeySpace
from .statuses import FINISHED, Status, in_order

#: the operations the scripts count, each `calls.<name>` in the counters hash
CALLS = ("put", "take", "ack", "fail", "release", "requeue", "bury", "kick", "delete",
         "touch", "cancel", "expire")
_LENGTH = {"list": "llen", "zset": "zcard", "started": "scard"}
#: the upper bounds, in seconds, of the buckets of the duration histograms the scripts
#: keep in the counters hash (`wait`: pending to reserved, `run`: started to finished by
#: its worker): `<name>.le.<bound>` counts a bucket ('inf' past the last bound), and
#: `<name>.sum_us` adds the durations up, in microseconds (see lua/_finished.lua)
DURATION_BOUNDS = (0.1, 1, 5, 15, 60, 300, 900, 1800, 3600, 7200, 14400, 43200, 86400,
                   259200, 604800)
#: The tasks finished lately are counted by the scripts per queue and minute, one hash
#: each (`KeySpace.throughput`). Two spans derive from this one: the window shown, here,
#: and how long the hashes are kept, `THROUGHPUT_TTL`.
#: The longest window of tasks finished lately that is shown, in seconds: the "last
#: hour" of `blueque stats` and of the dashboard (`overview`).
THROUGHPUT_WINDOW = 3600
#: How long each minute's hash is kept after its last count, in seconds (lua/_finished.lua
#: gets it at load time, as `DURATION_BOUNDS`; a drop deletes that many minutes back): a
#: day, the longest history the dashboard charts (`THROUGHPUT_HISTORY`), and more than
#: the window above (a reader of a window also reads the minute it begins in, and the
#: clock of the worker that counted may be behind the reader's).
THROUGHPUT_HISTORY = 24 * 3600
THROUGHPUT_TTL = THROUGHPUT_HISTORY + 2 * THROUGHPUT_WINDOW


#: the counter of each finishing status in the counters hash
FINISH_CALLS = {"complete": "calls.ack", "failed": "calls.fail", "canceled": "calls.cancel"}


def bucket_of(seconds: float) -> str:
    """The histogram bucket of a duration: its upper bound as `<name>.le.<bound>` names it
    (the same text as lua/_finished.lua's `observe`)."""
    for bound in DURATION_BOUNDS:
        if seconds <= bound:
            return f"{bound:g}"
    return "inf"


class Tally:
    """The counters of the steps one worker runs, kept in its memory and written in one
    round trip per `flush` (`interval` seconds apart at most, while there is something to
    write) instead of five to eight `HINCRBY` inside each step: the reserve and finish
    steps given a tally count nothing themselves (`Scripts.reserve`, `Scripts.finish`).
    What a worker killed outright had not flushed yet (at most `interval` seconds of its
    counts) is lost: these are statistics, the tasks' states are in their own keys.
    Thread-safe."""

    def __init__(self, interval: float = 1.0) -> None:
        self.interval = interval
        self._lock = threading.Lock()
        self._counts: dict[str, Counter[str]] = {}
        self._minutes: dict[tuple[str, int], Counter[str]] = {}
        self._next = 0.0

    def __bool__(self) -> bool:
        return bool(self._counts or self._minutes)

    def _observe(self, counts: Counter[str], name: str, since: object, now: float) -> None:
        """Count `now - since` seconds in the histogram `name` (nothing when `since` is not
        a number; clamped at 0), as lua/_finished.lua's `observe` does."""
        try:
            seconds = max(now - float(str(since)), 0.0)
        except ValueError:
            return
        if not math.isfinite(seconds):
            return
        counts[f"{name}.le.{bucket_of(seconds)}"] += 1
        counts[f"{name}.sum_us"] += math.floor(seconds * 1_000_000 + 0.5)

    def _queue_counts(self, queue: str) -> Counter[str]:
        """The counts of `queue` (lock held); the first count after a flush is written
        `interval` seconds later, with those that follow it by then."""
        if not self:
            self._next = max(self._next, time.monotonic() + self.interval)
        return self._counts.setdefault(queue, Counter())

    def taken(self, queue: str, waiting_since: object, now: float) -> None:
        """A reserve step took a task of `queue` that waited since `waiting_since`."""
        with self._lock:
            counts = self._queue_counts(queue)
            counts["calls.take"] += 1
            self._observe(counts, "wait", waiting_since, now)

    def finished(self, queue: str, status: str, started_at: object, now: float) -> None:
        """A task of `queue` was filed `status` at `now` by its holder; it ran since
        `started_at` (None when it was reserved, never started)."""
        with self._lock:
            counts = self._queue_counts(queue)
            counts[FINISH_CALLS[status]] += 1
            counts[f"finished.{status}"] += 1
            if started_at is not None:
                self._observe(counts, "run", started_at, now)
            self._minutes.setdefault((queue, int(now // 60)), Counter())[status] += 1

    def due(self) -> bool:
        """True when there is something to write, counted `interval` seconds ago or more."""
        return bool(self) and time.monotonic() >= self._next

    def until_due(self) -> float:
        """Seconds until `due` (infinity when there is nothing to write)."""
        return max(self._next - time.monotonic(), 0.0) if self else math.inf

    def flush(self, client: redis.Redis, keys: KeySpace) -> int:
        """Write the counts kept so far in one round trip; how many fields were written.
        When Redis cannot be reached, the counts are kept for the next flush and the error
        raised. A counters hash of another type is passed over, as the scripts do."""
        with self._lock:
            counts, minutes = self._counts, self._minutes
            self._counts, self._minutes = {}, {}
            self._next = time.monotonic() + self.interval
        if not counts and not minutes:
            return 0
        written = 0
        # all or nothing where one server holds them all (one slot per queue otherwise)
        with client.pipeline(transaction=not keys.cluster) as pipe:
            for queue, fields in counts.items():
                for field, count in fields.items():
                    pipe.hincrby(keys.statistics(queue), field, count)
                    written += 1
            for (queue, minute), fields in minutes.items():
                key = keys.throughput(queue, minute)
                for field, count in fields.items():
                    pipe.hincrby(key, field, count)
                    written += 1
                pipe.expire(key, THROUGHPUT_TTL)
            try:
                with reaching(client):
                    pipe.execute(raise_on_error=False)
            except Exception:
                self._restore(counts, minutes)
                raise
        return written

    def _restore(self, counts: dict[str, Counter[str]],
                 minutes: dict[tuple[str, int], Counter[str]]) -> None:
        with self._lock:
            for queue, fields in counts.items():
                self._counts.setdefault(queue, Counter()).update(fields)
            for at, fields in minutes.items():
                self._minutes.setdefault(at, Counter()).update(fields)


def _queue_commands(pipe: Any, keys: KeySpace, name: str) -> list[str]:
    """Queue the O(1) reads of one queue's figures on `pipe`; the label of each."""
    labels = []
    for status in STATUS_STRUCTURES:
        for key, kind in keys.structures_of(name, status):
            getattr(pipe, _LENGTH[kind])(key)
            labels.append(status.value)
    pipe.zcard(keys.stalled(name))
    labels.append("stalled")
    pipe.hgetall(keys.statistics(name))
    labels.append("calls")
    return labels


def _figures(labels: list[str], values: list[Any]) -> dict[str, dict[str, int]]:
    """One queue's statistics from its reads (see `_queue_commands`)."""
    tasks = {status.value: 0 for status in Status}
    stalled = 0
    calls = {name: 0 for name in CALLS}
    for label, value in zip(labels, values):
        if label == "calls":
            for field, count in dict(value).items():
                if str(field).startswith("calls.") and str(count).lstrip("-").isdigit():
                    calls[str(field)[6:]] = int(count)
        elif label == "reserved":
            tasks["taken"] = int(value)  # the lease set: reserved and started alike
        elif label == "stalled":
            stalled = int(value)
        else:
            tasks[label] += int(value)
    # started tasks are in the lease set too, unless a Blueque client started them
    tasks["taken"] = max(tasks["taken"], tasks["started"])
    tasks["reserved"] = tasks["taken"] - tasks["started"]
    tasks["total"] = sum(tasks[status.value] for status in Status)
    tasks.update(ready=tasks["pending"], done=tasks["complete"], delayed=tasks["scheduled"],
                 stalled=stalled)
    return {"tasks": tasks, "calls": calls}


def read(client: redis.Redis, keys: KeySpace, names: Sequence[str],
         ) -> dict[str, dict[str, dict[str, int]]]:
    """The statistics of each queue of `names`, in one round trip: `{name: {"tasks":
    {status: count, ..., "total", "ready", "taken", "done", "delayed", "stalled" (running
    tasks flagged stalled, counted in "started" too)}, "calls":
    {operation: count}}}`. Held tasks are counted from the lease set and the started set:
    a task a Blueque client reserved but did not start yet counts once `blueque reindex`
    or a deep clean gave it a lease entry."""
    return {name: _figures(labels, values) for name, (labels, values, _) in
            _read(client, keys, names).items()}


@dataclass(frozen=True)
class Histogram:
    """Durations counted by the scripts: `buckets` holds `(upper bound, how many took at
    most that long)` for each of `DURATION_BOUNDS` then `math.inf` (cumulative, as
    Prometheus has them), `total` adds them up."""

    buckets: list[tuple[float, int]]
    total: float

    @property
    def count(self) -> int:
        return self.buckets[-1][1]


@dataclass(frozen=True)
class Counters:
    """One queue's figures as its counters hash and its structures give them: `tasks`
    (as `read` has them), `finished` (tasks finished by status, never reset),
    `recovered` (tasks taken back from a holder that was gone) and the `durations`
    histograms (`wait`, `run`)."""

    tasks: dict[str, int]
    finished: dict[str, int]
    recovered: int
    durations: dict[str, Histogram]


def read_counters(client: redis.Redis, keys: KeySpace, names: Sequence[str],
                  ) -> dict[str, Counters]:
    """The `Counters` of each queue of `names`, in one round trip (O(1) per queue)."""
    result = {}
    for name, (labels, values, counts) in _read(client, keys, names).items():
        result[name] = Counters(
            tasks=_figures(labels, values)["tasks"],
            finished={status.value: _count(counts.get(f"finished.{status.value}"))
                      for status in in_order(FINISHED)},
            recovered=_count(counts.get("recovered")),
            durations={kind: _histogram(counts, kind) for kind in ("wait", "run")})
    return result


def _read(client: redis.Redis, keys: KeySpace, names: Sequence[str],
          ) -> dict[str, tuple[list[str], list[Any], dict[str, Any]]]:
    """Per queue: the labels of its reads, their values (an error read as 0, the counters
    hash last) and its counters hash (empty when it is of another type)."""
    with client.pipeline(transaction=False) as pipe:
        labels = queue_reads(pipe, keys, names)
        with reaching(client):
            values = pipe.execute(raise_on_error=False)
    return _parsed(names, labels, values)


def queue_reads(pipe: Any, keys: KeySpace, names: Sequence[str]) -> list[list[str]]:
    """Queue the O(1) reads of each queue of `names` on a pipeline (of a synchronous or an
    asyncio client); the labels `figures` reads their replies with."""
    return [_queue_commands(pipe, keys, name) for name in names]


def figures(names: Sequence[str], labels: list[list[str]], values: list[Any],
            ) -> dict[str, dict[str, dict[str, int]]]:
    """`read`'s result from the replies of the reads `queue_reads` queued."""
    return {name: _figures(queue_labels, clean) for name, (queue_labels, clean, _) in
            _parsed(names, labels, values).items()}


def _parsed(names: Sequence[str], labels: list[list[str]], values: list[Any],
            ) -> dict[str, tuple[list[str], list[Any], dict[str, Any]]]:
    result, start = {}, 0
    for name, queue_labels in zip(names, labels):
        own = values[start:start + len(queue_labels)]
        start += len(queue_labels)
        clean = [0 if isinstance(value, Exception) else value for value in own]
        counts = own[-1] if isinstance(own[-1], dict) else {}
        clean[-1] = counts
        result[name] = (queue_labels, clean, {str(key): value for key, value in counts.items()})
    return result


def _count(value: object) -> int:
    """A counter's value (0 when unset or not a whole number)."""
    text = str(value) if isinstance(value, (str, int)) else ""
    return int(text) if text.lstrip("-").isdigit() and len(text) < 20 else 0


def _histogram(counts: dict[str, Any], name: str) -> Histogram:
    """The histogram `name` from the fields of a counters hash (see `DURATION_BOUNDS`)."""
    buckets, seen = [], 0
    for bound in (*DURATION_BOUNDS, math.inf):
        seen += max(_count(counts.get(f"{name}.le.{bound:g}")), 0)
        buckets.append((float(bound), seen))
    total = _count(counts.get(f"{name}.sum_us")) / 1e6
    return Histogram(buckets, max(total, 0.0))
