"""What an operator sees of an installation, as data: each queue's figures, the live
workers and rows of tasks (`inspection` adds the whole record of one task and the stored
errors).

Nothing here prints: the `blueque` command renders these results as tables, or as JSON
through their `as_dict()` (the shapes are documented in docs/admin.rst), and a web page
may do the same. Every read is bounded (no `SCAN`, no `KEYS`, ranges of a given length)
and grouped in pipelines. What Redis holds is not trusted: a key of another type is left
out and named in the result's `skipped`, a field that is not what it should be reads as
unknown (None), never as an error.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from dataclasses import fields as dataclass_fields
from datetime import datetime, timezone
from typing import Any, Callable, ClassVar, cast

import redis

from ..connection.errors import reaching
from ..exceptions import ConfigurationError, LimpydBluequeError
from ..models import Job
from ..models.limits import closed_queues, held_counts, held_groups, held_lines, with_closed
from ..models.progress import Progress
from ..protocol import statistics
from ..protocol.encryption import is_sealed
from ..protocol.keys import QUEUE_NAME_RE, KeySpace
from ..protocol.liveness import server_time, worker_records
from ..protocol.statuses import RUNNING, Status

#: the finishing statuses shown per minute and hour, among those the scripts count per
#: minute (`KeySpace.throughput`; expired tasks, which never ran, are left out)
THROUGHPUT_FIELDS = (Status.COMPLETE.value, Status.FAILED.value, Status.CANCELED.value)
#: the minutes of the longest window of finished tasks shown, the last hour (see
#: `statistics.THROUGHPUT_WINDOW`)
WINDOW_MINUTES = statistics.THROUGHPUT_WINDOW // 60
#: the task fields a row of `task_rows` reads
ROW_FIELDS = ("status", "queue", "created", "started_at", "attempt", "node", "progress",
              "stalled_at", "cancel_requested")
#: the Error fields an error row holds (the traceback is left out)
ERROR_FIELDS = ("pk", "queue_name", "job_pk", "identifier", "timestamp", "type", "code",
                "message", "attempt")
#: how many task ids of each of its reserved lists a worker row shows at most
WORKER_TASKS = 100
#: the largest `limit` a listing takes
MAX_LIMIT = 10_000


# -- values read from Redis ------------------------------------------------------------------
def number(value: object) -> float | None:
    """A finite number read from Redis, else None."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return None
    try:
        result = float(value)
    except ValueError:
        return None
    return result if math.isfinite(result) else None


def whole(value: object) -> int | None:
    """A whole number read from Redis, else None."""
    result = number(value)
    return int(result) if result is not None and result == int(result) else None


def iso(moment: float | None) -> str | None:
    """Epoch seconds as an ISO 8601 UTC string (None, or a moment out of range: None)."""
    if moment is None:
        return None
    try:
        return datetime.fromtimestamp(moment, timezone.utc).isoformat()
    except (OverflowError, ValueError, OSError):
        return None


def age(now: float, moment: float | None) -> float | None:
    """Seconds from `moment` to `now` (never negative: hosts' clocks differ), or None."""
    return None if moment is None else round(max(now - moment, 0.0), 3)


# -- times as people read them -------------------------------------------------------------------
def short_duration(seconds: float) -> str:
    """A duration as a person reads it: `12.3s`, `4m05s`, `2h07m`, `3d04h`."""
    seconds = max(seconds, 0.0)
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole_seconds = int(seconds)
    for unit, size, sub, sub_size in (("d", 86400, "h", 3600), ("h", 3600, "m", 60),
                                      ("m", 60, "s", 1)):
        if whole_seconds >= size:
            return f"{whole_seconds // size}{unit}{(whole_seconds % size) // sub_size:02d}{sub}"
    return f"{whole_seconds}s"  # pragma: no cover (60 seconds or more is in minutes)


def iso_z(moment: float | None) -> str | None:
    """Epoch seconds as ISO 8601 UTC to the second, `2026-11-26T21:04:05Z` (None when
    unknown or out of range)."""
    if moment is None:
        return None
    try:
        return datetime.fromtimestamp(moment, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    except (OverflowError, ValueError, OSError):
        return None


def when_text(moment: float | None, seconds_ago: float | None) -> str:
    """A moment as the `blueque` tables and the dashboard show it, in ISO 8601 UTC with
    how long ago it was: `2026-11-26T21:04:05Z (3m05s ago)`, `... (in 12.0s)` for a
    moment to come, `... (now)` within a tenth of a second; "-" when unknown. The one
    way times read for people: the JSON documents keep their own (see `Result`)."""
    shown = iso_z(moment)
    if shown is None:
        return "-"
    if seconds_ago is None or not math.isfinite(seconds_ago):
        return shown
    if abs(seconds_ago) < 0.1:
        return f"{shown} (now)"
    if seconds_ago > 0:
        return f"{shown} ({short_duration(seconds_ago)} ago)"
    return f"{shown} (in {short_duration(-seconds_ago)})"


def when(moment: object, now: float) -> str:
    """`when_text` of a moment read from Redis (epoch seconds, as a number or a string)
    seen at `now`; "-" when it is not a number."""
    value = number(moment)
    return when_text(value, None if value is None else now - value)


def text(value: object) -> str | None:
    """A string read from Redis, else None (a reply of another kind)."""
    return value if isinstance(value, str) else None


class Result:
    """A result whose `as_dict()` is its JSON shape: its fields by name, those named in
    `TIMES` (epoch seconds) as ISO 8601 text, and results in a list as their own dict."""

    TIMES: ClassVar[tuple[str, ...]] = ("at",)

    def as_dict(self) -> dict[str, Any]:
        shown: dict[str, Any] = {}
        for item in dataclass_fields(cast(Any, self)):
            value = getattr(self, item.name)
            if item.name in self.TIMES:
                value = iso(value)
            elif isinstance(value, list):
                value = [entry.as_dict() if isinstance(entry, Result) else entry
                         for entry in value]
            shown[item.name] = value
        return shown


@dataclass(frozen=True)
class Skipped(Result):
    """A key left out of a result, and why (it holds another type, say)."""

    key: str
    problem: str


def failed(skipped: list[Skipped], key: str, reply: object) -> bool:
    """True, and `skipped` told, when a pipelined reply is an error."""
    if isinstance(reply, Exception):
        skipped.append(Skipped(key, str(reply)))
        return True
    return False


def pipelined(client: redis.Redis, queue: Callable[[Any], object]) -> list[Any]:
    """The replies of the commands `queue(pipe)` puts on one pipeline (an error is a reply:
    the other commands are not stopped by it)."""
    with client.pipeline(transaction=False) as pipe:
        queue(pipe)
        with reaching(client):
            replies: list[Any] = pipe.execute(raise_on_error=False)
            return replies


def task_fields(client: redis.Redis, keys: KeySpace, ids: Sequence[str],
                fields: Sequence[str]) -> list[Any]:
    """`HMGET` of these fields of each task of `ids`, in one round trip (an error, such as
    a key of another type, is a reply)."""
    return pipelined(client, lambda pipe: [pipe.hmget(keys.task(task_id), fields)
                                           for task_id in ids])


def progress_of(value: object) -> dict[str, Any] | None:
    """A task's `progress` field as `Progress.as_dict` gives it; None when it has none or
    it cannot be read."""
    progress = Progress.from_text(value) if isinstance(value, str) else None
    if progress is None:
        return None
    shown = progress.as_dict()
    if is_sealed(shown.get("message")):  # the message of an encrypted task
        shown["message"] = ENCRYPTED
    return shown


#: what is shown of a value of an encrypted task, without its keys
ENCRYPTED = "(encrypted)"


# -- queues ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class QueueOverview(Result):
    """One queue's figures (see `queue_overviews`)."""

    queue: str
    tasks: dict[str, int]
    stalled: int | None
    listeners: int | None
    oldest_waiting: dict[str, Any] | None
    finished: dict[str, dict[str, int]] | None
    #: workers take none of its tasks (`Queue.pause`)
    paused: bool = False
    #: the signals of a scheduler or an autoscaler: tasks ready to run now (pending, less
    #: those `held_back`; not `tasks["waiting"]`, the tasks waiting for others to finish),
    #: tasks held by a worker (reserved or started) and pending tasks held back by their
    #: group's limit (all of them while the queue's own limit is reached)
    waiting: int = 0
    running: int = 0
    held_back: int = 0


@dataclass(frozen=True)
class Overview(Result):
    """The figures of some queues, read at `at` (Redis's clock)."""

    at: float
    queues: list[QueueOverview]
    skipped: list[Skipped] = field(default_factory=list)


def queue_names(job_model: type[Job] = Job) -> list[str]:
    """Every queue `blueque_queues` lists whose name is valid (others are not this
    library's queues, and their names are not used to build keys)."""
    return [name for name in job_model.queue_names() if QUEUE_NAME_RE.match(name)]


#: the most known queue names an `UnknownQueue` message lists
LISTED_QUEUES = 20


class UnknownQueue(LimpydBluequeError, LookupError):
    """A queue name `blueque_queues` does not list: no task was ever enqueued there, no
    worker listened to it (a typo, most often). The message names it, a close match, and
    the queues that are known."""

    def __init__(self, names: Sequence[str], known: Sequence[str], hint: str = "") -> None:
        self.names, self.known = list(names), list(known)
        super().__init__(unknown_queue_message(self.names, self.known) + hint)


def close_matches(word: str, candidates: Sequence[str], count: int = 3) -> list[str]:
    """The candidates that look like `word` (a typo of it), closest first; only those
    that differ from it by case alone, when some do."""
    same = [candidate for candidate in candidates if candidate.lower() == word.lower()
            and candidate != word]
    if same:
        return same[:count]
    by_case = {candidate.lower(): candidate for candidate in candidates}
    alike = [by_case[match] for match in
             difflib.get_close_matches(word.lower(), list(by_case), n=count, cutoff=0.6)]
    return alike


def did_you_mean(word: str, candidates: Sequence[str]) -> str:
    """` (did you mean 'x'?)`, or `'x', 'y' or 'z'`, for the close matches of `word`;
    "" when none is close."""
    matches = [repr(match) for match in close_matches(word, candidates)]
    if not matches:
        return ""
    listed = matches[0] if len(matches) == 1 else f"{', '.join(matches[:-1])} or {matches[-1]}"
    return f" (did you mean {listed}?)"


def unknown_queue_message(names: Sequence[str], known: Sequence[str],
                          lead: str = "unknown queue") -> str:
    """`unknown queue 'x' (did you mean 'y'?); known queues: a, b, y` (the first
    `LISTED_QUEUES` of them), `lead` saying what the names are."""
    shown = ", ".join(f"{name!r}{did_you_mean(name, known)}" for name in names)
    what = f"{lead}{'s' if len(names) > 1 else ''} {shown}"
    if not known:
        return f"{what}: no queue is known yet (none was given a task, a worker or a limit)"
    listed = ", ".join(sorted(known)[:LISTED_QUEUES])
    more = f" and {len(known) - LISTED_QUEUES} more" if len(known) > LISTED_QUEUES else ""
    return f"{what}; known queues: {listed}{more}"


def unknown_queues(names: Sequence[str], job_model: type[Job] = Job) -> list[str]:
    """The names of `names` that `blueque_queues` does not list (none when that key
    cannot be read as a sorted set: then nothing is known to be unknown). One round trip."""
    client, keys = job_model.client(), job_model.keys()
    scores = pipelined(client, lambda pipe: [pipe.zscore(keys.queues, name) for name in names])
    return [name for name, score in zip(names, scores) if score is None]


def check_known_queues(names: Sequence[str], job_model: type[Job] = Job) -> list[str]:
    """`names` when `blueque_queues` lists each of them, else `UnknownQueue` naming those
    it does not (with the known ones). One round trip, two on a miss."""
    unknown = unknown_queues(names, job_model)
    if unknown:
        raise UnknownQueue(unknown, queue_names(job_model))
    return list(names)


def queue_overviews(names: Sequence[str] | None = None,
                    job_model: type[Job] = Job) -> Overview:
    """Per queue (default: every queue): tasks by status and in all, stalled tasks,
    listeners, the oldest waiting task's id and age, the tasks finished in the last
    minute and hour, and the tasks waiting, running and held back (by their group's limit,
    or all of a queue's when its own limit is reached). O(1) per queue (and per group
    held back): five round trips in all (six without `names`, one more when one of the
    queues has a limit of its own)."""
    client, keys = job_model.client(), job_model.keys()
    names = list(names) if names is not None else queue_names(job_model)
    now = server_time(client)
    figures = statistics.read(client, keys, names)
    minute = int(now // 60)

    def read_all(pipe: Any) -> None:
        for name in names:
            _queue_reads(pipe, keys, name, minute)

    replies = pipelined(client, read_all)
    skipped: list[Skipped] = []
    size = len(replies) // len(names) if names else 0
    own = [replies[i * size:(i + 1) * size] for i in range(len(names))]
    held = [[] if failed(skipped, keys.groups_held(name), reads[5]) else held_groups(reads[5])
            for name, reads in zip(names, own)]
    oldest, held_count = _oldest_of(client, keys, names, [reads[3:5] for reads in own], now,
                                    skipped, held)
    held_count = with_closed(held_count, closed_queues(client, keys, names, now),
                             {name: figures[name]["tasks"]["pending"] for name in names})
    return Overview(now, [QueueOverview(
        queue=name, tasks=_task_counts(figures[name]["tasks"]),
        stalled=_count_reply(keys.stalled(name), reads[1], skipped),
        listeners=_count_reply(keys.listeners(name), reads[2], skipped),
        oldest_waiting=oldest[name],
        finished=_finished(now, reads[6:], keys, name, skipped),
        paused=reads[0] == 1,
        waiting=ready(figures[name]["tasks"], held_count[name]),
        running=figures[name]["tasks"]["taken"], held_back=held_count[name])
        for name, reads in zip(names, own)], skipped)


def ready(tasks: dict[str, int], held_back: int) -> int:
    """The tasks ready to run now, from a queue's counts (`statistics.read`) and its tasks
    held back: its pending tasks (the pending list, the prioritized set, the tasks behind
    their utube key's and those of groups) less those held back (the counts are read one
    after the other: never less than 0)."""
    return max(tasks["pending"] - held_back, 0)


def oldest_waiting(client: redis.Redis, keys: KeySpace, names: Sequence[str], now: float,
                   skipped: list[Skipped]) -> dict[str, dict[str, Any] | None]:
    """Per queue of `names`: its oldest waiting task as `{"id", "age"}` (None: nothing
    waits). O(1) per queue: two round trips in all."""
    def read_all(pipe: Any) -> None:
        for name in names:
            _head_reads(pipe, keys, name)

    heads = pipelined(client, read_all)
    return _oldest_of(client, keys, names, [heads[2 * i:2 * i + 2] for i in range(len(names))],
                      now, skipped)[0]


def _oldest_of(client: redis.Redis, keys: KeySpace, names: Sequence[str],
               replies: Sequence[Sequence[Any]], now: float, skipped: list[Skipped],
               held: Sequence[list[str]] = (),
               ) -> tuple[dict[str, dict[str, Any] | None], dict[str, int]]:
    """Each queue's oldest waiting task, from the replies of its `_head_reads`, and the
    tasks waiting in its `held` groups (as `held_groups` reads them; none given: 0), read
    in the same round trip."""
    heads = [_heads(keys, name, reads, skipped) for name, reads in zip(names, replies)]
    held = list(held) or [[] for _ in names]

    def read_all(pipe: Any) -> None:
        for task_id in (task_id for ids in heads for task_id in ids):
            pipe.hget(keys.task(task_id), "created")
        held_lines(pipe, keys, list(names), held)

    created = pipelined(client, read_all)
    result, start = {}, 0
    for name, ids in zip(names, heads):
        result[name] = _oldest(now, ids, created[start:start + len(ids)])
        start += len(ids)
    return result, held_counts(list(names), held, created[start:])


def _head_reads(pipe: Any, keys: KeySpace, name: str) -> None:
    """The reads of the tasks first in line: the pending list's, the prioritized set's."""
    pipe.lindex(keys.pending(name), -1)
    pipe.zrange(keys.prioritized(name), 0, 0)


def _queue_reads(pipe: Any, keys: KeySpace, name: str, minute: int) -> None:
    """One queue's reads: whether it is paused, stalled count, listeners, the heads of
    its line, its groups held back, and its throughput hashes from `WINDOW_MINUTES` ago
    to now (the minute the window begins in too)."""
    pipe.exists(keys.paused(name))
    pipe.zcard(keys.stalled(name))
    pipe.scard(keys.listeners(name))
    _head_reads(pipe, keys, name)
    pipe.zrange(keys.groups_held(name), 0, -1)
    for past in range(WINDOW_MINUTES, -1, -1):
        pipe.hmget(keys.throughput(name, minute - past), *THROUGHPUT_FIELDS)


def _task_counts(tasks: dict[str, int]) -> dict[str, int]:
    counts = {status.value: int(tasks.get(status.value, 0)) for status in Status}
    counts["total"] = sum(counts.values())
    return counts


def _count_reply(key: str, reply: object, skipped: list[Skipped]) -> int | None:
    return None if failed(skipped, key, reply) else whole(reply)


def _heads(keys: KeySpace, name: str, replies: Sequence[Any],
           skipped: list[Skipped]) -> list[str]:
    """The ids first in line in the pending list and in the prioritized set."""
    head, first = replies
    found = []
    if not failed(skipped, keys.pending(name), head) and isinstance(head, str):
        found.append(head)
    if not failed(skipped, keys.prioritized(name), first) and first:
        found.extend(task_id for task_id in first[:1] if isinstance(task_id, str))
    return found


def _oldest(now: float, heads: Sequence[str], created: Sequence[Any]) -> dict[str, Any] | None:
    """The older of the tasks first in line, as `{"id", "age"}` (None: nothing waits)."""
    known = [(moment, task_id) for task_id, reply in zip(heads, created)
             for moment in [number(reply)] if moment is not None]
    if not known:
        return {"id": heads[0], "age": None} if heads else None
    moment, task_id = min(known)
    return {"id": task_id, "age": age(now, moment)}


def _finished(now: float, hashes: Sequence[Any], keys: KeySpace, name: str,
              skipped: list[Skipped]) -> dict[str, dict[str, int]]:
    """Tasks finished in the last minute and hour (`statistics.THROUGHPUT_WINDOW`), by
    status, from per-minute counts.

    The counts of the minute that began before the window are taken pro rata of the part
    of that minute inside the window (a sliding window over whole-minute counters)."""
    minute = int(now // 60)
    inside = 1.0 - (now - minute * 60) / 60  # share of the oldest minute still in a window
    per_minute = []
    for past, reply in zip(range(WINDOW_MINUTES, -1, -1), hashes):
        if failed(skipped, keys.throughput(name, minute - past), reply):
            reply = [None] * len(THROUGHPUT_FIELDS)
        per_minute.append([whole(value) or 0 for value in reply])

    def window(minutes: int) -> dict[str, int]:
        recent = per_minute[-minutes:]
        older = per_minute[-minutes - 1]
        return {status: round(sum(row[i] for row in recent) + older[i] * inside)
                for i, status in enumerate(THROUGHPUT_FIELDS)}

    return {"last_minute": window(1), "last_hour": window(WINDOW_MINUTES)}


# -- workers -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class WorkerRow(Result):
    """One live worker of this library (see `live_workers`)."""

    TIMES = ("since", "last_beat", "alive_until")

    id: str
    host: str | None
    pid: int | None
    queues: list[str]
    running: list[dict[str, str]]
    since: float | None
    last_beat: float | None
    alive_until: float
    #: what it said of itself at its last beat (None: not said, as by an older worker)
    concurrency: int | None = None
    running_count: int | None = None
    load: float | None = None
    state: str | None = None
    paused: list[str] = field(default_factory=list)
    #: the signals of a scheduler or an autoscaler: it runs no task (its last beat said
    #: none, and its reserved lists hold none), it is on its way out (its state says so,
    #: or a `stop` order waits for it: see `is_stopping`)
    idle: bool = True
    stopping: bool = False


#: the states a worker says it is in once it is on its way out (see `Worker.describe`)
STOPPING_STATES = ("stopping", "terminating", "terminated")


def is_stopping(state: str | None, order: str | None) -> bool:
    """Whether a worker is on its way out: its state (as its last beat said) is one of
    `STOPPING_STATES`, or it was told to stop and has not said it is stopping yet (a
    worker takes its order back once it read it)."""
    return state in STOPPING_STATES or order == "stop"


@dataclass(frozen=True)
class Workers(Result):
    """The live workers, read at `at` (Redis's clock)."""

    at: float
    workers: list[WorkerRow]
    skipped: list[Skipped] = field(default_factory=list)


def identity(reply: object) -> dict[str, Any]:
    """A worker's identity JSON as a dict (empty when it cannot be read)."""
    try:
        value = json.loads(reply) if isinstance(reply, str) else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def live_workers(job_model: type[Job] = Job) -> Workers:
    """Each worker whose record says it is alive now, with its identity (host, pid,
    queues, since when), its last heartbeat, the tasks its reserved lists hold, and
    whether it is idle or stopping (see `WorkerRow`). Four round trips, whatever the
    number of workers."""
    client, keys = job_model.client(), job_model.keys()
    now = server_time(client)
    skipped: list[Skipped] = []
    alive = sorted((worker_id, until) for worker_id, until in
                   worker_records(client, keys).items() if until >= now)
    ids = [worker_id for worker_id, _ in alive]
    replies: list[Any] = [[], []]
    if ids:
        replies = pipelined(client, lambda pipe: (pipe.hmget(keys.workers_info, ids),
                                                  pipe.hmget(keys.worker_orders, ids)))
    infos = [] if failed(skipped, keys.workers_info, replies[0]) else replies[0]
    orders = [] if failed(skipped, keys.worker_orders, replies[1]) else replies[1]
    identities = [identity(info) for info in infos] or [{} for _ in ids]
    queues = [_worker_queues(info) for info in identities]
    lists = [(worker_id, queue) for worker_id, names in zip(ids, queues) for queue in names]
    held = pipelined(client, lambda pipe: [pipe.lrange(keys.reserved(queue, worker_id), 0,
                                                       WORKER_TASKS - 1)
                                           for worker_id, queue in lists])
    running: dict[str, list[dict[str, str]]] = {worker_id: [] for worker_id in ids}
    for (worker_id, queue), reply in zip(lists, held):
        if not failed(skipped, keys.reserved(queue, worker_id), reply):
            running[worker_id] += [{"id": task_id, "queue": queue} for task_id in reply]
    rows = [_worker_row(worker_id, until, info, names, running[worker_id], order)
            for (worker_id, until), info, names, order
            in zip(alive, identities, queues, orders or [None for _ in ids])]
    return Workers(now, rows, skipped)


def _worker_queues(info: dict[str, Any]) -> list[str]:
    names = info.get("queues")
    if not isinstance(names, list):
        return []
    return [name for name in names if isinstance(name, str) and QUEUE_NAME_RE.match(name)]


def _worker_row(worker_id: str, until: float, info: dict[str, Any], queues: list[str],
                running: list[dict[str, str]], order: object) -> WorkerRow:
    timeout = number(info.get("liveness_timeout"))
    host = info.get("host")
    said = info.get("state")
    state = said if isinstance(said, str) and said.isidentifier() else None
    paused = info.get("paused")
    running_count = whole(info.get("running_count"))
    return WorkerRow(id=worker_id, host=host if isinstance(host, str) else None,
                     pid=whole(info.get("pid")), queues=queues, running=running,
                     since=number(info.get("since")),
                     last_beat=None if timeout is None else until - timeout, alive_until=until,
                     concurrency=whole(info.get("concurrency")),
                     running_count=running_count,
                     load=number(info.get("load")), state=state,
                     paused=[name for name in paused if isinstance(name, str)
                             and QUEUE_NAME_RE.match(name)] if isinstance(paused, list) else [],
                     # a beat said what it ran a moment ago, its reserved lists say it now:
                     # busy when either says a task
                     idle=not running and not running_count,
                     stopping=is_stopping(state, text(order)))


# -- task rows ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class TaskRow(Result):
    """One task as a listing shows it (see `task_rows`)."""

    TIMES = ("created", "started")

    id: str
    status: str | None
    queue: str | None
    created: float | None
    age: float | None
    started: float | None
    attempt: int
    node: str | None
    progress: dict[str, Any] | None
    stalled: bool
    cancel_requested: bool

    def created_text(self) -> str:
        """When it was created, in ISO 8601 UTC with its age (see `when_text`)."""
        return when_text(self.created, self.age)

    def created_iso(self) -> str:
        """When it was created, in ISO 8601 UTC ("-" when unknown)."""
        return iso_z(self.created) or "-"


@dataclass(frozen=True)
class TaskRows(Result):
    """Some tasks, read at `at` (Redis's clock)."""

    at: float
    tasks: list[TaskRow]
    skipped: list[Skipped] = field(default_factory=list)


def check_limit(limit: int) -> int:
    """`limit` if it is a count a listing takes (1 to `MAX_LIMIT`), else `ConfigurationError`."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 0 < limit <= MAX_LIMIT:
        raise ConfigurationError(f"limit must be a whole number from 1 to {MAX_LIMIT}, "
                                 f"not {limit!r}")
    return limit


def task_rows(queues: Sequence[str] | None = None, status: Status | str | None = None,
              limit: int = 50, job_model: type[Job] = Job) -> TaskRows:
    """Up to `limit` tasks of these queues (default: every queue), of one status (default:
    any), read from the structures that file them, queue by queue and in status order:
    each structure in line order (the next task to run first, the newest finished task
    first), at most `limit` entries of each. With a `status`, a task whose hash has
    another status (it moved meanwhile) is left out. Three round trips (four without
    `queues`)."""
    wanted = None if status is None else Status(status)
    names = list(queues) if queues is not None else queue_names(job_model)
    keys = job_model.keys()
    structures = [entry for name in names for entry in _structures(keys, name, wanted)]
    return _listing(job_model, structures, limit, None if wanted is None else {wanted.value})


def running_rows(queues: Sequence[str], limit: int, job_model: type[Job] = Job) -> TaskRows:
    """The running (reserved or started) tasks of `queues`, at most `limit` of them, read
    from each queue's lease set (the soonest lease end first). Three round trips."""
    held = [(*job_model.keys().held_structure(name), False) for name in queues]
    return _listing(job_model, held, limit, RUNNING)


def _listing(job_model: type[Job], structures: Sequence[tuple[str, str, bool]], limit: int,
             statuses: AbstractSet[str] | None) -> TaskRows:
    """The rows of the tasks these structures list (`limit` entries of each read), of
    these `statuses` (None: any), at most `limit` of them."""
    client, keys = job_model.client(), job_model.keys()
    check_limit(limit)
    now = server_time(client)

    def read_all(pipe: Any) -> None:
        for entry in structures:
            _range(pipe, entry, limit)

    replies = pipelined(client, read_all)
    skipped: list[Skipped] = []
    ids: dict[str, None] = {}  # in order, each once
    for (key, kind, pending), reply in zip(structures, replies):
        if not failed(skipped, key, reply):
            ids.update(dict.fromkeys(_ids(kind, reply, pending)))
    rows = [row for row in read_rows(client, keys, list(ids), now, skipped)
            if statuses is None or row.status in statuses]
    return TaskRows(now, rows[:limit], skipped)


def _structures(keys: KeySpace, name: str,
                status: Status | None) -> list[tuple[str, str, bool]]:
    """`(key, kind, pending)` of each structure filing tasks of `status` (None: of any)."""
    if status is not None:
        return [(key, kind, status is Status.PENDING) for key, kind in
                keys.structures_of(name, status)]
    return [(key, kind, statuses == (Status.PENDING,))
            for key, kind, statuses in keys.status_structures(name)]


def _range(pipe: Any, structure: tuple[str, str, bool], limit: int) -> None:
    """Read at most `limit` entries of a structure, in line order: a pending list is taken
    from its right end, the other lists list the newest first."""
    key, kind, pending = structure
    if kind == "zset":
        pipe.zrange(key, 0, limit - 1)
    elif kind == "started":
        pipe.sscan(key, 0, count=limit)
    else:
        pipe.lrange(key, *((-limit, -1) if pending else (0, limit - 1)))


def _ids(kind: str, reply: Any, pending: bool) -> list[str]:
    """The task ids of a structure's entries, in line order (a started-set entry ends with
    its id; a pending list read from its right end is reversed)."""
    if kind == "started":
        reply = reply[1] if isinstance(reply, (list, tuple)) and len(reply) == 2 else []
        return [entry.rsplit(" ", 1)[-1] for entry in reply if isinstance(entry, str)]
    ids = [entry for entry in reply if isinstance(entry, str)]
    return ids[::-1] if pending and kind == "list" else ids


def read_rows(client: redis.Redis, keys: KeySpace, ids: Sequence[str], now: float,
              skipped: list[Skipped]) -> list[TaskRow]:
    """The row of each task of `ids`, in one round trip; an id without a hash is left
    out (a stale entry), as is a key of another type (named in `skipped`)."""
    rows = []
    for task_id, reply in zip(ids, task_fields(client, keys, ids, ROW_FIELDS)):
        if failed(skipped, keys.task(task_id), reply) or not any(reply):
            continue
        values = dict(zip(ROW_FIELDS, reply))
        created = number(values["created"])
        rows.append(TaskRow(
            id=task_id, status=text(values["status"]), queue=text(values["queue"]),
            created=created, age=age(now, created), started=number(values["started_at"]),
            attempt=whole(values["attempt"]) or 0,
            node=text(values["node"]), progress=progress_of(values["progress"]),
            stalled=bool(values["stalled_at"]), cancel_requested=bool(values["cancel_requested"])))
    return rows


# -- pages of tasks ----------------------------------------------------------------------------
#: the listing `task_page` gives for "running": the lease set, reserved and started alike
RUNNING_PAGE = "running"


@dataclass(frozen=True)
class TaskPage(Result):
    """One page of the tasks a queue files under a status (see `task_page`)."""

    at: float
    tasks: list[TaskRow]
    total: int
    skipped: list[Skipped] = field(default_factory=list)


def page_structures(keys: KeySpace, queue: str, status: str) -> list[tuple[str, str, bool]]:
    """`(key, kind, pending)` of the structures `task_page` reads, in their order."""
    if status == RUNNING_PAGE:
        return [(*keys.held_structure(queue), False)]
    wanted = Status(status)
    return [(key, kind, wanted is Status.PENDING)
            for key, kind in keys.structures_of(queue, wanted)]


def task_page(queue: str, status: str, offset: int, limit: int,
              job_model: type[Job] = Job) -> TaskPage:
    """The tasks at `offset` to `offset + limit` of those `queue` files under `status` (a
    status, or `RUNNING_PAGE` for the held tasks), in line order (see `task_rows`), and
    how many it files in all. Three round trips, whatever the page. A task whose hash is
    gone is left out of the page, one that moved meanwhile is shown with its new status.
    The started set is read through the lease set (`RUNNING_PAGE`): a set has no order."""
    client, keys = job_model.client(), job_model.keys()
    check_limit(limit)
    structures = [entry for entry in page_structures(keys, queue, status)
                  if entry[1] != "started"]
    now = server_time(client)
    sizes = pipelined(client, lambda pipe: [pipe.zcard(key) if kind == "zset" else pipe.llen(key)
                                            for key, kind, _ in structures])
    skipped: list[Skipped] = []
    lengths = [0 if failed(skipped, key, size) else whole(size) or 0
               for (key, _, _), size in zip(structures, sizes)]
    wanted = _slices(structures, lengths, offset, limit)

    def read_all(pipe: Any) -> None:
        for (key, kind, pending), first, stop in wanted:
            if kind == "zset":
                pipe.zrange(key, first, stop - 1)
            elif pending:
                pipe.lrange(key, -stop, -first - 1)
            else:
                pipe.lrange(key, first, stop - 1)

    ids: dict[str, None] = {}
    for ((key, kind, pending), _, _), reply in zip(wanted, pipelined(client, read_all)):
        if not failed(skipped, key, reply):
            ids.update(dict.fromkeys(_ids(kind, reply, pending)))
    return TaskPage(now, read_rows(client, keys, list(ids), now, skipped), sum(lengths), skipped)


def _slices(structures: Sequence[tuple[str, str, bool]], lengths: Sequence[int], offset: int,
            limit: int) -> list[tuple[tuple[str, str, bool], int, int]]:
    """`(structure, first, stop)` of each part of the structures, read one after the
    other, that entries `offset` to `offset + limit` of them all fall into."""
    wanted, start, taken = [], max(offset, 0), 0
    for structure, length in zip(structures, lengths):
        if start < length and taken < limit:
            stop = min(length, start + limit - taken)
            wanted.append((structure, start, stop))
            taken += stop - start
        start = max(start - length, 0)
    return wanted
