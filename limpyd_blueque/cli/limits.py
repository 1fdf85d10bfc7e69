"""`blueque limits [QUEUE...]` (each queue's limits with its running and waiting tasks,
the busiest groups first, the groups under the default each on its row; `--json`: the
limits only) and `blueque limit QUEUE GROUP ...` (set one, or
`--remove` it). GROUP `*` is the default of a queue's groups, `queue` the queue as a
whole (docs/limits.rst)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from ..exceptions import ConfigurationError
from ..models import Queue
from ..models.limits import busiest_first, read_limits_and_groups, shown_limits
from ..operations.overview import UnknownQueue, check_known_queues
from ..protocol.keys import check_queue_name
from ..protocol.options import WHOLE_QUEUE
from .tables import cell, make_console, show, table

Handler = Callable[[argparse.Namespace], int]
#: the options of `blueque limit` that set a limit (not with `--remove`)
LIMIT_OPTIONS = ("max_running", "max_starts", "per", "weight")


def add_parsers(commands: Any, checked: Callable[[Callable[[str], str]], Any]) -> None:
    """Add `limits` and `limit` to `commands` (argparse subparsers)."""
    queue_name = checked(check_queue_name)
    limits = commands.add_parser(
        "limits", help="each queue's limits across all workers, with the tasks running and "
        "waiting under each (the busiest first)")
    limits.add_argument("queues", nargs="*", type=queue_name, metavar="QUEUE",
                        help="default: every queue")
    limits.add_argument("--json", action="store_true",
                        help='{queue: [{"group": ..., "max_running": ..., "max_starts": ..., '
                        '"per": ..., "weight": ..., "running": ..., "waiting": ...}]}')
    limit = commands.add_parser(
        "limit", help="set (or --remove) the limit of a group of a queue, across all "
        "workers: GROUP is a group's name, '*' every group without its own, 'queue' the "
        "queue as a whole")
    limit.add_argument("queue", type=queue_name, metavar="QUEUE")
    limit.add_argument("group", metavar="GROUP")
    limit.add_argument("--max-running", type=int, metavar="N",
                       help="at most N of its tasks running at once")
    limit.add_argument("--max-starts", type=int, metavar="N",
                       help="at most N starts in any window of --per seconds")
    limit.add_argument("--per", type=float, metavar="S", help="the window of --max-starts")
    limit.add_argument("--weight", type=float, metavar="W",
                       help="its share of the starts when groups compete (default 1)")
    limit.add_argument("--remove", action="store_true", help="remove the group's limit")
    limit.add_argument("--new-queue", action="store_true",
                       help="QUEUE has had no task nor worker yet: set its limit ahead")
    limit.add_argument("--json", action="store_true",
                       help='{"queue": ..., "group": ..., "limit": ... or null, "changed": ...}')


def group_of(text: str) -> str | None:
    """The group a command line names (`queue`: the queue as a whole, None)."""
    return None if text == WHOLE_QUEUE else text


def shown_group(group: str | None) -> str:
    return WHOLE_QUEUE if group is None else group


def limits_command(options: argparse.Namespace) -> int:
    names = (check_known_queues(options.queues) if options.queues
             else sorted(Queue.listener_counts()))
    if options.json:
        print(json.dumps({name: [asdict(limit) for limit in
                                 busiest_first(Queue.named(name).limits())]
                          for name in names}, sort_keys=True))
        return 0
    found = {name: shown_limits(*read_limits_and_groups(Queue.client(), Queue.keys(), name))
             for name in names}
    result = table("Limits across all workers", "queue", "group", "max running",
                   "max starts", "per (s)", "weight", "running", "waiting",
                   right=("max running", "max starts", "per (s)", "weight", "running",
                          "waiting"))
    for name, (rows, more) in found.items():
        for limit, governed in rows:
            group = shown_group(limit.group) + (" (the default)" if governed else "")
            result.add_row(cell(name), cell(group),
                           *(cell(value) for value in (
                               limit.max_running, limit.max_starts,
                               None if limit.per is None else f"{limit.per:g}",
                               None if limit.weight is None else f"{limit.weight:g}",
                               limit.running, limit.waiting)))
        if more:
            result.add_row(cell(name), cell(f"and {more} more group(s) under the default"),
                           *(cell(None) for _ in range(6)))
    if not result.row_count:
        print("no limit set" + (f" on {', '.join(names)}" if options.queues else ""))
        return 0
    show(make_console(), [result])
    return 0


def limit_command(options: argparse.Namespace) -> int:
    """Set or remove one limit. A queue not known yet (no task, worker nor limit) is refused as a
    typo unless `--new-queue` says it is new: its limit is then set ahead of its tasks."""
    given = [f"--{name.replace('_', '-')}" for name in LIMIT_OPTIONS
             if getattr(options, name) is not None]
    if options.remove and given:
        raise ConfigurationError(f"--remove takes no limit setting ({', '.join(given)} "
                                 "given): remove the limit, or set it")
    name = options.queue
    if not options.new_queue or options.remove:
        try:
            check_known_queues([name])
        except UnknownQueue as unknown:
            hint = "" if options.remove else " (--new-queue: limit it before its first task)"
            raise UnknownQueue([name], unknown.known, hint) from None
    queue, group = Queue.named(name), group_of(options.group)
    if options.remove:
        changed = queue.remove_limit(group)
    else:
        changed = queue.set_limit(group, max_running=options.max_running,
                                  max_starts=options.max_starts, per=options.per,
                                  weight=options.weight)
    limit = queue.limits().get(group)
    if options.json:
        print(json.dumps({"queue": name, "group": group,
                          "limit": asdict(limit) if limit else None, "changed": changed}))
    elif limit is None:
        print(f"removed: the limit of {shown_group(group)} in {name}" if changed
              else f"{shown_group(group)} in {name} had no limit")
    else:
        settings = ", ".join(f"{field}={value:g}" for field, value in (
            ("max_running", limit.max_running), ("max_starts", limit.max_starts),
            ("per", limit.per), ("weight", limit.weight)) if value is not None)
        print(f"{'set' if changed else 'unchanged'}: {shown_group(group)} in {name}: "
              f"{settings} ({limit.running} running, {limit.waiting} waiting)")
    return 0


HANDLERS: dict[str, Handler] = {"limits": limits_command, "limit": limit_command}
