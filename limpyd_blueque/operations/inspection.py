"""What an operator sees of one task (its whole record) and of the stored errors, as
data; see `overview` for the rules every read here follows."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, cast

from limpyd.exceptions import DoesNotExist
from redis.exceptions import ResponseError

from ..connection.errors import reaching
from ..exceptions import ConfigurationError, LimpydBluequeError, ProtocolError, TaskNotFound
from ..models import Error, Job
from ..models.progress import CheckpointRecord
from ..protocol.bounds import size_text
from ..protocol.encryption import Keyring, context, sealed_values
from ..protocol.keys import QUEUE_NAME_RE
from ..protocol.liveness import server_time
from ..protocol.statuses import RUNNING, Status
from .overview import (
    ENCRYPTED,
    ERROR_FIELDS,
    Result,
    Skipped,
    check_limit,
    failed,
    iso,
    number,
    pipelined,
    progress_of,
    text,
    when,
    whole,
)

#: the statuses of a task that runs, and of one that waits to run
RUNNING_STATUSES = frozenset(status.value for status in RUNNING)
WAITING_STATUSES = frozenset((Status.SCHEDULED.value, Status.PENDING.value))


# -- errors ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ErrorRow(Result):
    """One stored error (an `Error` record), without its traceback."""

    pk: str
    queue: str | None
    job: str | None
    identifier: str | None
    at: float | None
    type: str | None
    code: str | None
    message: str | None
    attempt: int | None

    @classmethod
    def from_values(cls, values: dict[str, Any]) -> ErrorRow:
        return cls(pk=str(values.get("pk")), queue=text(values.get("queue_name")),
                   job=text(values.get("job_pk")),
                   identifier=text(values.get("identifier")) or None,
                   at=number(values.get("timestamp")), type=text(values.get("type")),
                   code=text(values.get("code")) or None, message=text(values.get("message")),
                   attempt=whole(values.get("attempt")))


@dataclass(frozen=True)
class Bound:
    """A bound of a date filter: its day (`YYYY-MM-DD`, what the index holds) and, when a
    time was given, the exact moment (epoch seconds)."""

    day: str
    moment: float | None = None


def parse_bound(value: str) -> Bound:
    """`YYYY-MM-DD`, or an ISO 8601 date and time (`2026-11-22T10:30`, `...Z`,
    `...+02:00`; without an offset it is UTC), as a `Bound`; `ConfigurationError` else."""
    given = value.strip()
    try:
        if len(given) == 10:
            return Bound(datetime.strptime(given, "%Y-%m-%d").date().isoformat())
        moment = datetime.fromisoformat(given[:-1] + "+00:00" if given.endswith(("Z", "z"))
                                        else given)
    except ValueError:
        raise ConfigurationError(f"invalid date {value!r}: use YYYY-MM-DD or an ISO 8601 date "
                                 "and time such as 2026-11-22T10:30:00Z") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    utc = moment.astimezone(timezone.utc)
    return Bound(utc.date().isoformat(), utc.timestamp())


@dataclass(frozen=True)
class ErrorQuery:
    """The filters of `stored_errors`, each optional."""

    queue: str | None = None
    type: str | None = None
    code: str | None = None
    job: str | None = None
    since: Bound | None = None
    until: Bound | None = None
    limit: int = 50

    def __post_init__(self) -> None:
        if self.since is not None and self.until is not None and (
                (self.since.day, self.since.moment or 0.0)
                > (self.until.day, self.until.moment or float("inf"))):
            raise ConfigurationError(f"--since ({self.since.day}) is after --until "
                                     f"({self.until.day}): no error can match")

    def filters(self) -> dict[str, Any]:
        """The `Error.collection` filters, through the fields' indexes."""
        named = {"queue_name": self.queue, "type": self.type, "code": self.code,
                 "job_pk": self.job,
                 "date__gte": self.since.day if self.since else None,
                 "date__lte": self.until.day if self.until else None}
        return {name: value for name, value in named.items() if value is not None}

    def keeps(self, row: ErrorRow) -> bool:
        """False for a row outside an exact bound (the index only knows days)."""
        if self.since is not None and self.since.moment is not None and (
                row.at is None or row.at < self.since.moment):
            return False
        return not (self.until is not None and self.until.moment is not None
                    and (row.at is None or row.at > self.until.moment))


def stored_errors(query: ErrorQuery, error_model: type[Error] = Error) -> list[ErrorRow]:
    """The stored errors matching `query`, newest first, at most `query.limit` of them.

    Filtered by the indexes of `Error` (queue, type, code, job, and the day range); an
    exact time bound then drops what falls outside it on its bound days, reading on in
    pages of `limit` until `limit` rows are found."""
    check_limit(query.limit)
    filters = query.filters()
    rows: list[ErrorRow] = []
    start = 0
    while len(rows) < query.limit:
        with reaching(error_model.client()):
            page = error_model.newest_values(filters, ERROR_FIELDS, start,
                                             start + query.limit)
        rows += [row for row in map(ErrorRow.from_values, page) if query.keeps(row)]
        if len(page) < query.limit:
            break
        start += query.limit
    return rows[:query.limit]


# -- one task ----------------------------------------------------------------------------------
#: the task fields holding a moment (epoch seconds, Redis's clock or the writer's)
TIME_FIELDS = frozenset(("created", "updated", "eta", "started_at", "periodic_tick",
                         "expires_at", "stalled_at", "cancel_requested", "alive_until"))


def previous_error_label(fields: dict[str, str]) -> str | None:
    """`previous error (attempt N)` when the task's `error` field was left by an earlier
    attempt: the task waits to run again, or runs again (the attempt that failed is then
    the one before the current one); None when the error is the task's own outcome (a
    failed or buried task), or it has none."""
    if not fields.get("error"):
        return None
    status = fields.get("status")
    attempt = whole(fields.get("attempt")) or 0
    if status in RUNNING_STATUSES:
        attempt -= 1
    elif status not in WAITING_STATUSES:
        return None
    return f"previous error (attempt {attempt})" if attempt > 0 else "previous error"


@dataclass(frozen=True)
class TaskRecord(Result):
    """Everything about one task (see `inspect_task`)."""

    id: str
    at: float
    fields: dict[str, str]
    attempts: dict[str, int | float | None]
    progress: dict[str, Any] | None
    checkpoint: dict[str, Any] | None
    lease: dict[str, Any] | None
    errors: list[ErrorRow]
    skipped: list[Skipped] = field(default_factory=list)
    #: the peak memory of its last forked process, in bytes (None: not noted)
    peak_rss: int | None = None

    def shown_fields(self) -> list[tuple[str, str]]:
        """The task's fields by name as people read them (the `blueque inspect` table,
        the dashboard's task page): each moment (`TIME_FIELDS`) in ISO 8601 UTC with its
        age, and the `error` of a task that runs again (or waits to) named as the
        previous attempt's (`previous_error_label`). The values are otherwise as stored."""
        shown = []
        for name, value in sorted(self.fields.items()):
            if name in TIME_FIELDS and when(value, self.at) != "-":  # else as stored
                value = when(value, self.at)
            elif name == "error":
                name = previous_error_label(self.fields) or name
            elif name == "peak_rss" and value.isdigit():
                value = f"{size_text(int(value))} ({value} bytes)"
            shown.append((name, value))
        return shown


def inspect_task(task_id: str, errors: int = 20, job_model: type[Job] = Job,
                 error_model: type[Error] = Error) -> TaskRecord:
    """Every field of a task, its attempts, progress, checkpoint (its size, not its
    state), peak memory, lease (when it ends, who holds it) and its `errors` newest stored errors.
    `TaskNotFound` when there is no such task, `ProtocolError` when its key is not a hash."""
    client, keys = job_model.client(), job_model.keys()
    job_model.load(task_id)  # TaskNotFound
    now = server_time(client)
    reply = pipelined(client, lambda pipe: pipe.hgetall(keys.task(task_id)))[0]
    if not reply:  # deleted since `load` found it
        raise TaskNotFound(task_id)
    if isinstance(reply, Exception):
        raise ProtocolError(f"task {task_id!r}: its key {keys.task(task_id)!r} is not a hash: "
                            f"{reply}")
    values = opened_fields(task_id, {str(name): str(value) for name, value in
                                     cast("dict[Any, Any]", reply).items()},
                           job_model.keyring())
    skipped: list[Skipped] = []
    queue = values.get("queue", "")
    valid = bool(QUEUE_NAME_RE.match(queue))
    if not valid:
        skipped.append(Skipped(keys.task(task_id), f"its queue {queue!r} is not a queue name"))
    reads = pipelined(client, lambda pipe: [
        pipe.zscore(keys.leases(queue), task_id), pipe.hget(keys.queue_settings(queue),
                                                             "max_attempts")] if valid else [])
    lease_score, queue_max = reads if valid else (None, None)
    return TaskRecord(
        id=task_id, at=now, fields=values,
        attempts={"attempt": whole(values.get("attempt")) or 0,
                  "uncounted": whole(values.get("uncounted")) or 0,
                  "max_attempts": whole(values.get("max_attempts")) or whole(queue_max),
                  # when its next attempt may start (a retry waiting for its delay)
                  "next_at": number(values.get("eta"))
                  if values.get("status") == "scheduled" else None},
        progress=progress_of(values.get("progress")),
        checkpoint=_checkpoint(values.get("checkpoint")),
        lease=_lease(now, values, keys.leases(queue), lease_score, skipped),
        errors=stored_errors(ErrorQuery(job=task_id, limit=errors), error_model)
        if errors else [], skipped=skipped,
        peak_rss=whole(values.get("peak_rss")))


#: the fields an encrypted task keeps sealed (its progress message too, in `progress`)
SEALED_FIELDS = ("parameters", "result", "checkpoint")


def opened_fields(task_id: str, values: dict[str, str],
                  keyring: Keyring | None) -> dict[str, str]:
    """The fields of a task as they are shown: those an encrypted task seals opened with
    `keyring`, or `ENCRYPTED` without it (never an error: a value that does not open is
    shown as such)."""
    if not values.get("encrypted"):
        return values
    shown = dict(values)
    for stored in sealed_values(values):
        try:
            clear = (keyring.open(stored.value, context(task_id, stored.field))
                     if keyring is not None else ENCRYPTED)
        except LimpydBluequeError:
            clear = ENCRYPTED
        shown[stored.field] = stored.replaced(clear)
    return shown


def _lease(now: float, values: dict[str, str], key: str, score: object,
           skipped: list[Skipped]) -> dict[str, Any] | None:
    """A held task's lease as `{"holder", "expires_at", "expires_in"}`; the two times are
    None for a lease that never expires. None when it has no lease entry."""
    if score is None or failed(skipped, key, score):
        return None
    ends = number(score)
    return {"holder": values.get("node"), "expires_at": iso(ends),
            "expires_in": None if ends is None else round(ends - now, 3)}


def _checkpoint(value: str | None) -> dict[str, Any] | None:
    """A checkpoint's size in bytes, attempt and moment (not its state: it may be large)."""
    record = CheckpointRecord.from_text(value)
    if record is None:
        return None
    return {"size": record.size, "attempt": record.attempt, "at": record.at.isoformat()}


def error_type_counts(query: ErrorQuery, cap: int = 2_000,
                      error_model: type[Error] = Error) -> tuple[dict[str, int], int, bool]:
    """How many stored errors matching `query` (its limit aside) there are of each type,
    counted over the newest `cap` of them, the most frequent type first; how many were
    counted; and True when there were more than `cap`."""
    with reaching(error_model.client()):
        page = error_model.newest_values(query.filters(), ("type", "timestamp"), 0, cap + 1)
    counts: dict[str, int] = {}
    seen = 0
    for values in page[:cap]:
        row = ErrorRow.from_values({**values, "pk": ""})
        if query.keeps(row):
            seen += 1
            kind = row.type or "(none)"
            counts[kind] = counts.get(kind, 0) + 1
    ordered = dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))
    return ordered, seen, len(page) > cap


def error_tracebacks(pks: list[str], error_model: type[Error] = Error) -> dict[str, str | None]:
    """The traceback of each stored error of `pks` (None when it has none)."""
    result: dict[str, str | None] = {}
    with reaching(error_model.client()):
        for pk in pks:
            try:
                value = error_model(pk).traceback.hget()
            except (DoesNotExist, ResponseError):  # gone meanwhile, or not a hash: none
                value = None
            result[pk] = text(value)
    return result
