"""The operator's `blueque` subcommands: see (stats, workers, tasks, inspect, errors,
watch) and act (requeue, cancel, delete, purge, clean, reindex).

Each prints a table (`tables`) or, with `--json`, one JSON document whose shape is
documented in docs/admin.rst. What they read comes from `overview`; a mistake raises an
error of the library's tree, which `worker_script.run_reporting` prints in one line.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from rich.live import Live

from ..exceptions import ConfigurationError, LimpydBluequeError
from ..models import Job, Queue
from ..operations.actions import (
    PURGEABLE,
    ActionResult,
    acting,
    cancel_one,
    delete_one,
    purge,
    requeue_failed,
    requeue_one,
)
from ..operations.inspection import (
    Bound,
    ErrorQuery,
    error_type_counts,
    inspect_task,
    parse_bound,
    stored_errors,
)
from ..operations.overview import (
    MAX_LIMIT,
    UnknownQueue,
    check_known_queues,
    did_you_mean,
    live_workers,
    queue_names,
    queue_overviews,
    running_rows,
    task_rows,
    unknown_queues,
)
from ..protocol.keys import check_queue_name
from ..protocol.liveness import server_time
from ..protocol.statuses import Status
from ..protocol.values import check_task_id, printable
from ..upkeep.cleaning import CleanReport, deep_clean, light_clean, reindex
from ..worker.settings import SETTINGS
from . import queues, tables
from .worker_script import number_option

Handler = Callable[[argparse.Namespace], int]
Checked = Callable[[Callable[[str], str]], Callable[[str], str]]
#: the help of the `--json` of most subcommands
JSON_HELP = "print one JSON document (its shape: docs/admin.rst)"
#: the most error types `errors --type` lists when none matches
LISTED_TYPES = 20


# -- parsers -------------------------------------------------------------------------------------
def limit_option(text: str) -> int:
    """The argparse `type=` of `--limit`: a whole number from 1 to `MAX_LIMIT`."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 0 < value <= MAX_LIMIT:
        raise argparse.ArgumentTypeError(f"{text!r} must be from 1 to {MAX_LIMIT}")
    return value


def date_option(text: str) -> Bound:
    """The argparse `type=` of `--since` and `--until` (see `inspection.parse_bound`)."""
    try:
        return parse_bound(text)
    except ConfigurationError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def add_parsers(commands: Any, checked: Checked) -> None:
    """Add the subcommands to `commands` (argparse subparsers); `checked` turns a name
    check into an argparse type."""
    queue_name, task_id = checked(check_queue_name), checked(check_task_id)

    def add(name: str, help_text: str, json_help: str = JSON_HELP) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = commands.add_parser(name, help=help_text)
        parser.add_argument("--json", action="store_true", help=json_help)
        return parser

    queues.add_queue_list(add("stats", "each queue's tasks by status and its activity "
                              "(stalled tasks, listeners, oldest waiting task, tasks finished "
                              "in the last minute and hour), as tables for people; "
                              "'statistics' is the same counts for scripts"), queue_name)
    add_workers_parser(add("workers", "the live workers, with their state, running tasks "
                           "and load; --quiet or --stop gives one an order"))
    tasks = add("tasks", "list tasks, read from the structures that file them")
    tasks.add_argument("--queue", type=queue_name, help="default: every queue")
    tasks.add_argument("--status", choices=[status.value for status in Status])
    tasks.add_argument("--limit", type=limit_option, default=50, help="at most (default 50)")
    inspect = add("inspect", "everything about one task: its fields (times readable), "
                  "attempts, progress, lease and stored errors")
    inspect.add_argument("task", type=task_id, metavar="ID")
    queues.add_keys_file_option(inspect, argparse.SUPPRESS)
    add_errors_parser(add("errors", "the stored errors, newest first"), queue_name, task_id)
    add_action_parsers(add, queue_name, task_id)
    watch = add("watch", "a live view of the queues and running tasks (Ctrl-C ends it)")
    queues.add_queue_list(watch, queue_name)
    watch.add_argument("--iterations", type=limit_option, help="stop after this many refreshes")
    watch.add_argument("--limit", type=limit_option, default=20,
                       help="running tasks shown, at most (default 20)")
    clean = add("clean", "take back tasks whose holder is gone")
    clean.add_argument("--deep", action="store_true",
                       help="also check every task hash against every list and set (slow)")
    max_attempts = next(setting for setting in SETTINGS if setting.name == "max_attempts")
    clean.add_argument("--max-attempts", type=number_option(max_attempts), default=None,
                       help="fail, rather than put back, tasks that used this many attempts")
    add("reindex", "index the tasks written by other Blueque clients")


def add_workers_parser(workers: argparse.ArgumentParser) -> None:
    """The orders `workers` may give one worker (`Queue.tell_worker`)."""
    order = workers.add_mutually_exclusive_group()
    order.add_argument("--quiet", metavar="ID", help="tell the worker ID to take no new "
                       "task (its running tasks go on), within a second")
    order.add_argument("--stop", metavar="ID", help="tell the worker ID to stop, as on "
                       "SIGTERM (its running tasks as its on_terminate says)")


def add_errors_parser(errors: argparse.ArgumentParser, queue_name: Callable[[str], str],
                      task_id: Callable[[str], str]) -> None:
    """The filters of `errors`, each through an index of the `Error` model."""
    errors.add_argument("--queue", type=queue_name)
    errors.add_argument("--type", help="the exception's class name, e.g. ValueError (exact "
                        "case; when none matches, the types stored are suggested)")
    errors.add_argument("--code", help="the exception's code attribute")
    errors.add_argument("--since", type=date_option, metavar="DATE",
                        help="YYYY-MM-DD or an ISO 8601 date and time (UTC unless it says)")
    errors.add_argument("--until", type=date_option, metavar="DATE", help="as --since")
    errors.add_argument("--job", type=task_id, metavar="ID", help="one task's errors")
    errors.add_argument("--limit", type=limit_option, default=50, help="at most (default 50)")


def add_action_parsers(add: Callable[..., argparse.ArgumentParser],
                       queue_name: Callable[[str], str], task_id: Callable[[str], str]) -> None:
    """`requeue`, `cancel`, `delete` and `purge` (`add(name, help, json_help=...)` makes a
    subcommand with `--json`)."""
    requeue = add("requeue", "put failed, canceled, expired or buried tasks back in line")
    requeue.add_argument("tasks", nargs="*", type=task_id, metavar="ID")
    requeue.add_argument("--failed", action="store_true", help="every failed task of --queue")
    requeue.add_argument("--queue", type=queue_name)
    add("cancel", "cancel tasks: a waiting one at once, a running one by its worker"
        ).add_argument("tasks", nargs="+", type=task_id, metavar="ID")
    add("delete", "delete tasks (not running ones)", json_help="one JSON document; every id "
        "is tried").add_argument("tasks", nargs="+", type=task_id, metavar="ID")
    purge = add("purge", "delete every task of one status in a queue (not running ones)")
    purge.add_argument("--queue", type=queue_name, required=True)
    purge.add_argument("--status", choices=PURGEABLE, required=True)
    purge.add_argument("--yes", action="store_true", help="do not ask to confirm")


# -- output --------------------------------------------------------------------------------------
def emit(options: argparse.Namespace, document: dict[str, Any],
         *renderables: Any) -> None:
    """Print `document` as JSON with `--json`, else the tables."""
    if options.json:
        print(json.dumps(document))
        return
    tables.show(tables.make_console(), renderables)





# -- seeing --------------------------------------------------------------------------------------
def stats_command(options: argparse.Namespace) -> int:
    overview = queue_overviews(check_known_queues(options.queues) if options.queues else None)
    emit(options, overview.as_dict(), *tables.stats_tables(overview, tables.make_console()),
         *tables.notes(overview.skipped))
    return 0


def workers_command(options: argparse.Namespace) -> int:
    worker_id = options.quiet or options.stop
    if worker_id:
        return order_command(options, worker_id, "quiet" if options.quiet else "stop")
    workers = live_workers()
    emit(options, workers.as_dict(), tables.workers_table(workers),
         *tables.notes(workers.skipped))
    return 0


def order_command(options: argparse.Namespace, worker_id: str, order: str) -> int:
    """`workers --quiet ID` / `--stop ID`: the order given, or an error naming the live
    workers when none has this id."""
    if not Queue.tell_worker(worker_id, order):
        live = sorted(row.id for row in live_workers().workers)
        raise LimpydBluequeError(f"no live worker {worker_id!r}; live workers: "
                            + (", ".join(live) if live else "none"))
    what = ("takes no new task; its running tasks go on" if order == "quiet" else
            "stops as on SIGTERM")
    emit(options, {"worker": worker_id, "order": order},
         tables.cell(f"told worker {worker_id} to {order}: it {what} (within a second)"))
    return 0


def tasks_command(options: argparse.Namespace) -> int:
    rows = task_rows(check_known_queues([options.queue]) if options.queue else None,
                     options.status, options.limit)
    emit(options, rows.as_dict(), tables.tasks_table(rows), *tables.notes(rows.skipped))
    return 0


def inspect_command(options: argparse.Namespace) -> int:
    record = inspect_task(options.task)
    emit(options, record.as_dict(), *tables.record_tables(record))
    return 0


def errors_command(options: argparse.Namespace) -> int:
    query = ErrorQuery(queue=options.queue, type=options.type, code=options.code,
                       job=options.job, since=options.since, until=options.until,
                       limit=options.limit)
    rows = stored_errors(query)
    if not rows and options.queue and unknown_queues([options.queue]):
        # a queue dropped since keeps its errors: only a queue without any is unknown
        raise UnknownQueue([options.queue], queue_names())
    emit(options, {"errors": [row.as_dict() for row in rows]},
         tables.errors_table(rows, now=server_time(Job.client())))
    if not rows and options.type:
        hint = type_hint(replace(query, type=None), options.type)
        if hint:
            print(f"blueque: {printable(hint)}", file=sys.stderr)
    return 0


def type_hint(query: ErrorQuery, wanted: str) -> str | None:
    """What to say when no stored error has the type `wanted` (the other filters of
    `query` kept): the types that do, the close ones as "did you mean"; None when
    `wanted` is one of them (the other filters left nothing)."""
    counts, _, _ = error_type_counts(query)
    stored = [kind for kind in counts if kind != "(none)"]
    if wanted in stored:
        return None
    if not stored:
        return f"no stored error has the type {wanted!r}; none is stored" + (
            " for these filters" if query.filters() else "")
    shown = ", ".join(stored[:LISTED_TYPES]) + (
        f" and {len(stored) - LISTED_TYPES} more" if len(stored) > LISTED_TYPES else "")
    return (f"no stored error has the type {wanted!r}{did_you_mean(wanted, stored)}; "
            f"the types stored{' for these filters' if query.filters() else ''}: {shown}")


def watch_command(options: argparse.Namespace) -> int:
    """Refresh every second until `--iterations` or Ctrl-C (exit code 0 either way). On a
    terminal the view is redrawn in place; elsewhere each refresh is printed after the
    last (with `--json`: one JSON document per line)."""
    console = tables.make_console()
    if options.queues:
        check_known_queues(options.queues)
    live = None if options.json or not console.is_terminal else Live(
        console=console, auto_refresh=False)
    shown = 0
    try:
        if live is not None:
            live.start()
        while True:
            names = options.queues or queue_names()
            overview, running = queue_overviews(names), running_rows(names, options.limit)
            if options.json:
                print(json.dumps({**overview.as_dict(), "running": running.as_dict()["tasks"],
                                  "skipped": [item.as_dict() for item in
                                              (*overview.skipped, *running.skipped)]}),
                      flush=True)
            elif live is not None:
                live.update(tables.watch_frame(overview, running, console), refresh=True)
            else:
                tables.show(console, [tables.watch_frame(overview, running, console)])
            shown += 1
            if options.iterations and shown >= options.iterations:
                return 0
            time.sleep(1.0)
    except KeyboardInterrupt:
        return 0
    finally:
        if live is not None:
            live.stop()


# -- acting on tasks -----------------------------------------------------------------------------
def report_outcomes(options: argparse.Namespace, verb: str, outcomes: Sequence[ActionResult],
                    fine: Sequence[str]) -> int:
    """Print the outcomes (the table titled by what happened to the tasks); an error (one
    line, exit code 1) when any is not in `fine`."""
    results = [outcome.as_dict() for outcome in outcomes]
    done = sum(1 for outcome in outcomes if outcome.outcome == verb)
    emit(options, {verb: done, "results": results},
         tables.outcomes_table(options.command, results))
    problems = [outcome for outcome in outcomes if outcome.outcome not in fine]
    if len(problems) == 1 and len(outcomes) == 1:
        raise LimpydBluequeError(f"task {problems[0].id!r} not {verb}: {problems[0].detail}")
    if problems:
        raise LimpydBluequeError(f"{len(problems)} of {len(outcomes)} tasks not {verb}; the "
                                 f"first, {problems[0].id!r}: {problems[0].detail}")
    return 0


def requeue_command(options: argparse.Namespace) -> int:
    if options.failed == bool(options.tasks) or options.failed != bool(options.queue):
        raise ConfigurationError("requeue takes task ids, or --failed --queue QUEUE")
    if not options.failed:
        outcomes = [acting(task_id, requeue_one) for task_id in options.tasks]
        return report_outcomes(options, "requeued", outcomes, ("requeued",))
    requeued, left = requeue_failed(check_known_queues([options.queue])[0])
    results = [outcome.as_dict() for outcome in left]
    emit(options, {"requeued": requeued, "results": results},
         tables.cell(f"requeued {requeued} failed task(s) of queue {options.queue}"),
         *([tables.outcomes_table("not requeued", results)] if left else []))
    if left:
        raise LimpydBluequeError(f"{len(left)} failed task(s) of queue {options.queue!r} not "
                                 f"requeued; the first, {left[0].id!r}: {left[0].detail}")
    return 0


def cancel_command(options: argparse.Namespace) -> int:
    outcomes = [acting(task_id, cancel_one) for task_id in options.tasks]
    return report_outcomes(options, "canceled", outcomes,
                           ("canceled", "cancel_requested", "already_finished"))


def delete_command(options: argparse.Namespace) -> int:
    """Without `--json`, one line per task deleted, stopping at the first that cannot be
    deleted (its error ends the command); with it, every id is tried and reported."""
    if options.json:
        outcomes = [acting(task_id, delete_one) for task_id in options.tasks]
        return report_outcomes(options, "deleted", outcomes, ("deleted",))
    for task_id in options.tasks:
        Job.load(task_id).delete()
        print(printable(f"deleted {task_id}"))
    return 0


def purge_command(options: argparse.Namespace) -> int:
    check_known_queues([options.queue])
    what = f"delete every {options.status} task of queue {options.queue}"
    if not queues.confirmed(options, what):
        print("nothing deleted")
        return 1
    deleted, passed = purge(options.queue, Status(options.status))
    emit(options, {"queue": options.queue, "status": options.status, "deleted": deleted,
                   "passed_over": passed},
         tables.cell(f"deleted {deleted} {options.status} task(s) of queue {options.queue}"
                     + (f"; {passed} entries passed over (their task has another status, or "
                        "none)" if passed else "")))
    return 0


# -- cleaning ------------------------------------------------------------------------------------
def report_dict(report: CleanReport) -> dict[str, Any]:
    """A cleaning report in its JSON shape (docs/admin.rst)."""
    return {
        "relisted": [{"id": task_id, "key": key} for task_id, key in report.relisted],
        "indexed": list(report.indexed),
        "recovered": dict(report.recovered),
        "dropped": [{"key": key, "member": member} for key, member in report.dropped],
        "unknown_status": [{"id": task_id, "status": status}
                           for task_id, status in report.unknown_status],
        "listeners_removed": [{"queue": queue, "listener": listener}
                              for queue, listener in report.listeners_removed],
        "broken": [{"key": key, "problem": problem} for key, problem in report.broken],
        "retained": report.retained,
    }


def clean_command(options: argparse.Namespace) -> int:
    report = deep_clean(Queue, max_attempts=options.max_attempts) if options.deep else None
    recovered = light_clean(Queue, max_attempts=options.max_attempts)
    taken = {task_id: outcome for task_id, outcome in recovered.items() if outcome != "skipped"}
    if options.json:
        print(json.dumps({"taken_back": taken,
                          "deep": None if report is None else report_dict(report)}))
        return 0
    lines = [*(report.lines() if report is not None else []),
             f"expired leases taken back: {len(taken)}",
             *(f"  {task_id}: {outcome}" for task_id, outcome in sorted(taken.items()))]
    for line in lines:
        print(printable(line))
    return 0


def reindex_command(options: argparse.Namespace) -> int:
    report = reindex(Queue)
    if options.json:
        print(json.dumps(report_dict(report)))
    else:
        for line in report.lines():
            print(printable(line))
    return 0


HANDLERS: dict[str, Handler] = {
    "stats": stats_command, "workers": workers_command, "tasks": tasks_command,
    "inspect": inspect_command, "errors": errors_command, "watch": watch_command,
    "requeue": requeue_command, "cancel": cancel_command, "delete": delete_command,
    "purge": purge_command, "clean": clean_command, "reindex": reindex_command,
}
