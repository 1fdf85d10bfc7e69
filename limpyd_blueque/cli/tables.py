"""The tables the `blueque` command prints, drawn with `rich` from `overview`'s results.

Every value read from Redis goes into a cell as plain `Text`, escaped with
`values.printable`: no markup, no emoji code and no control character of a task id or
message reaches the terminal. Colour comes only when the output is a terminal (rich's
`Console` decides); anywhere else the tables are plain text, wide enough not to wrap.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from rich import box
from rich.console import Console, Group, RenderableType
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from ..operations.inspection import ErrorRow, TaskRecord
from ..operations.overview import (
    STOPPING_STATES,
    Overview,
    Skipped,
    TaskRows,
    WorkerRow,
    Workers,
    short_duration,
    when_text,
)
from ..protocol.statuses import ALL, RUNNING
from ..protocol.values import printable

#: the width of the tables when the output is not a terminal (a file, a pipe)
PLAIN_WIDTH = 200
#: the longest field value `record_table` shows in full (longer ones are cut, with a note)
SHOWN_VALUE = 500
#: the width of a progress bar in `running_table`
BAR_WIDTH = 30


def make_console() -> Console:
    """The console of the command: rich's own choices on a terminal; elsewhere no colour
    and a fixed wide width (rich would take 80 columns and wrap)."""
    console = Console(markup=False, emoji=False, highlight=False)
    if console.is_terminal:
        return console
    return Console(markup=False, emoji=False, highlight=False, width=PLAIN_WIDTH)


def show(console: Console, renderables: Iterable[RenderableType]) -> None:
    """Print to `console`; when it is not a terminal, without the spaces rich pads each
    line with (plain text for files, pipes and `grep`)."""
    if console.is_terminal:
        _print(console, renderables)
        return
    with console.capture() as captured:
        _print(console, renderables)
    lines = [line.rstrip() for line in captured.get().splitlines()]
    console.file.write("".join(f"{line}\n" for line in lines))
    console.file.flush()


def cell(value: object) -> Text:
    """A table cell showing `value` as inert text ("-" for None)."""
    return Text("-" if value is None else printable(value))


def duration(seconds: float | None) -> str:
    """A duration as a person reads it: `12.3s`, `4m05s`, `2h07m`, `3d04h` ("-": unknown)."""
    return "-" if seconds is None else short_duration(seconds)


def _print(console: Console, renderables: Iterable[RenderableType]) -> None:
    """Print each renderable, a blank line before each table but the first thing printed."""
    for index, renderable in enumerate(renderables):
        if index and isinstance(renderable, Table):
            console.print()
        console.print(renderable)


def table(title: str, *columns: str, right: Iterable[str] = ()) -> Table:
    """An empty table with these columns (those in `right` aligned right, for numbers)."""
    numbers = set(right)
    result = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                   show_edge=False)
    for name in columns:
        result.add_column(name, justify="right" if name in numbers else "left",
                          overflow="fold")
    return result


def none_if_empty(result: Table) -> Table:
    """`result`, saying "none" under its header when it has no row."""
    if not result.row_count:
        result.caption, result.caption_justify = "none", "left"
    return result


def notes(skipped: Sequence[Skipped]) -> list[Text]:
    """One line per key a result left out."""
    return [cell(f"skipped {item.key}: {item.problem}") for item in skipped]


# -- stats ---------------------------------------------------------------------------------------
STATUS_COLUMNS = (*(status.value for status in ALL), "total")
#: the headers of `counts_table` when the full names do not fit the console's width
SHORT_HEADERS = ("sched", "pend", "resv", "start", "done", "fail", "canc", "bur", "exp",
                 "total")


def stats_tables(overview: Overview, console: Console) -> list[Table]:
    """The queues' figures in two tables: tasks by status, then activity (stalled,
    listeners, oldest waiting task, tasks finished lately). The first has shorter headers
    when its full ones would not fit `console`."""
    counts = counts_table(overview, STATUS_COLUMNS)
    unbounded = console.options.update(max_width=10 * console.width)
    if console.measure(counts, options=unbounded).maximum > console.width:
        counts = counts_table(overview, SHORT_HEADERS)
    return [counts, activity_table(overview)]


def counts_table(overview: Overview, headers: Sequence[str]) -> Table:
    """One row per queue: how many tasks each status holds, and in all."""
    result = table("tasks by status", "queue", *headers, right=headers)
    for row in overview.queues:
        result.add_row(cell(row.queue), *(cell(row.tasks.get(name)) for name in STATUS_COLUMNS))
    return none_if_empty(result)


def activity_table(overview: Overview) -> Table:
    """One row per queue: stalled tasks, listeners, how long the task first in line has
    waited, and the tasks finished in the last minute and hour (complete/failed)."""
    numbers = ("stalled", "listeners", "oldest waiting", "last minute", "last hour")
    result = table("activity", "queue", *numbers, right=numbers)
    for row in overview.queues:
        oldest, finished = row.oldest_waiting, row.finished or {}
        result.add_row(cell(f"{row.queue} (paused)" if row.paused else row.queue),
                       cell(row.stalled), cell(row.listeners),
                       cell(duration(oldest["age"]) if oldest else None),
                       *(cell(_done_failed(finished.get(window)))
                         for window in ("last_minute", "last_hour")))
    result.caption = "last minute, last hour: complete/failed" if result.row_count else "none"
    result.caption_justify = "left"
    return result


def _done_failed(counts: dict[str, int] | None) -> str | None:
    return None if counts is None else f"{counts['complete']}/{counts['failed']}"


# -- workers -------------------------------------------------------------------------------------
def workers_table(workers: Workers) -> Table:
    """One row per live worker: its state, concurrency and load as its last beat said
    (`-` from a worker that does not say them; `told to stop` beside its state while a
    stop order waits for it)."""
    result = table("workers", "id", "host", "pid", "queues", "state", "running", "load",
                   "up for", "last beat", right=("pid", "load", "up for", "last beat"))
    for row in workers.workers:
        running = ", ".join(task["id"] for task in row.running)
        slots = f"/{row.concurrency}" if row.concurrency is not None else ""
        result.add_row(cell(row.id), cell(row.host), cell(row.pid), cell(",".join(row.queues)),
                       cell(_state(row)),
                       cell(f"{len(row.running)}{slots}: {running}" if running
                            else f"0{slots}"),
                       cell(None if row.load is None else f"{row.load:.2f}"),
                       cell(_ago(workers.at, row.since)),
                       cell(_ago(workers.at, row.last_beat, " ago")))
    return none_if_empty(result)


def _state(row: WorkerRow) -> str | None:
    if row.stopping and row.state not in STOPPING_STATES:
        return f"{row.state or '-'} (told to stop)"
    return row.state


def _ago(now: float, moment: float | None, suffix: str = "") -> str | None:
    return None if moment is None else duration(max(now - moment, 0.0)) + suffix


# -- tasks ---------------------------------------------------------------------------------------
def tasks_table(rows: TaskRows, title: str = "tasks") -> Table:
    """One row per task: id, status, queue, created (ISO 8601 UTC, with its age), attempt,
    progress."""
    result = table(title, "id", "status", "queue", "created", "attempt", "progress",
                   right=("attempt",))
    for row in rows.tasks:
        result.add_row(cell(row.id), cell(_status(row.status, row.stalled, row.cancel_requested)),
                       cell(row.queue), cell(row.created_text()), cell(row.attempt),
                       cell(progress_text(row.progress, row.status in RUNNING)))
    return none_if_empty(result)


def _status(status: str | None, stalled: bool, cancel_requested: bool) -> str | None:
    marks = [mark for mark, on in (("stalled", stalled), ("cancel requested", cancel_requested))
             if on]
    return f"{status} ({', '.join(marks)})" if marks and status in RUNNING else status


def progress_text(progress: dict[str, Any] | None, running: bool = True) -> str | None:
    """`42% 420/1000 3m left message` (or `420 message` without a total; the time left
    only for a task that runs); None without progress."""
    if not progress:
        return None
    fraction, done, total = progress.get("fraction"), progress.get("done"), progress.get("total")
    parts = [f"{fraction * 100:.0f}%"] if isinstance(fraction, (int, float)) else []
    parts.append(f"{done:g}/{total:g}" if isinstance(total, (int, float)) else f"{done:g}"
                 if isinstance(done, (int, float)) else "?")
    if running and isinstance(progress.get("time_left"), (int, float)):
        parts.append(f"{duration(progress['time_left'])} left")
    if progress.get("message"):
        parts.append(str(progress["message"]))
    return " ".join(parts)


def running_table(rows: TaskRows) -> Table:
    """The running tasks, each with a progress bar (a task without a total: its count)."""
    result = table("running tasks", "id", "queue", "status", "running for", "progress", "",
                   right=("running for",))
    for row in rows.tasks:
        progress = row.progress or {}
        fraction = progress.get("fraction")
        bar: RenderableType = (ProgressBar(total=1.0, completed=fraction, width=BAR_WIDTH)
                               if isinstance(fraction, (int, float)) else cell(None))
        result.add_row(cell(row.id), cell(row.queue),
                       cell(_status(row.status, row.stalled, row.cancel_requested)),
                       cell(_ago(rows.at, row.started)), bar,
                       cell(progress_text(row.progress)))
    return none_if_empty(result)


def watch_frame(overview: Overview, running: TaskRows, console: Console) -> Group:
    """One refresh of `blueque watch`: the time, the queues, then the running tasks."""
    at = overview.as_dict()["at"]
    return Group(cell(f"blueque watch, {at[:19].replace('T', ' ') if at else '?'} UTC "
                      "(Ctrl-C to stop)"),
                 *stats_tables(overview, console), running_table(running),
                 *notes([*overview.skipped, *running.skipped]))


# -- one task ------------------------------------------------------------------------------------
def record_tables(record: TaskRecord) -> list[RenderableType]:
    """A task's fields, then its attempts, progress, checkpoint and lease, then its errors."""
    fields = table("fields", "field", "value")
    for name, value in record.shown_fields():
        shown = value if len(value) <= SHOWN_VALUE else (
            f"{value[:SHOWN_VALUE]}... ({len(value)} characters in all; --json shows them)")
        fields.add_row(cell(name), cell(shown))
    summary = table("state", "what", "value")
    attempts = record.attempts
    next_at = attempts.get("next_at")
    summary.add_row(cell("attempts"), cell(
        f"{attempts['attempt']} (uncounted {attempts['uncounted']}, max "
        f"{attempts['max_attempts'] or 'default'})"
        + ("" if next_at is None else
           f"; the next one {when_text(next_at, record.at - next_at)}")))
    summary.add_row(cell("progress"), cell(progress_text(
        record.progress, record.fields.get("status") in RUNNING)))
    checkpoint = record.checkpoint
    summary.add_row(cell("checkpoint"), cell(None if checkpoint is None else (
        f"{checkpoint['size']} bytes, attempt {checkpoint['attempt']}, at {checkpoint['at']}")))
    summary.add_row(cell("lease"), cell(_lease_text(record.lease, record.at)))
    return [cell(f"task {record.id}"), fields, summary,
            errors_table(record.errors, "stored errors", record.at), *notes(record.skipped)]


def _lease_text(lease: dict[str, Any] | None, now: float) -> str | None:
    if lease is None:
        return None
    if lease["expires_in"] is None:
        return f"held by {lease['holder']}, never expires"
    left = max(lease["expires_in"], 0.0)
    return f"held by {lease['holder']}, ends {when_text(now + left, -left)}"


# -- errors and actions --------------------------------------------------------------------------
def errors_table(rows: Sequence[ErrorRow], title: str = "errors",
                 now: float | None = None) -> Table:
    """One row per stored error, newest first; when it happened in ISO 8601 UTC (with how
    long ago, given `now`)."""
    result = table(title, "when", "queue", "task", "attempt", "type", "code", "message",
                   right=("attempt",))
    for row in rows:
        ago = None if now is None or row.at is None else now - row.at
        result.add_row(cell(when_text(row.at, ago)), cell(row.queue),
                       cell(row.job), cell(row.attempt), cell(row.type), cell(row.code),
                       cell(row.message))
    return none_if_empty(result)


def outcomes_table(action: str, outcomes: Sequence[dict[str, Any]]) -> Table:
    """One row per task `action` (`cancel`, `requeue`...) was asked for: its id, what
    happened, why; titled by what happened to the rows, `cancel: 1 canceled, 1 not
    found` (never by what was asked)."""
    counts: dict[str, int] = {}
    for outcome in outcomes:
        word = outcome_word(outcome["outcome"])
        counts[word] = counts.get(word, 0) + 1
    title = ", ".join(f"{count} {word}" for word, count in counts.items()) or "no task"
    result = table(f"{action}: {title}", "id", "outcome", "detail")
    for outcome in outcomes:
        result.add_row(cell(outcome["id"]), cell(outcome_word(outcome["outcome"])),
                       cell(outcome["detail"] or ""))
    return result


def outcome_word(outcome: object) -> str:
    """An action's outcome (a word of docs/admin.rst) as the tables say it: `not found`,
    `cancel requested`."""
    return str(outcome).replace("_", " ")
