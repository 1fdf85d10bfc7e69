"""`blueque`: the administration command: cleaning, reindexing, periodic tasks."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any, Callable

from . import queue_commands
from .cleaning import deep_clean, light_clean, reindex
from .config import (
    OneLineParser,
    add_redis_url_options,
    add_traceback_option,
    hide_secrets_from_ps,
    number_option,
    redis_url,
    run_reporting,
)
from .connection import use_redis
from .exceptions import InvalidName, ProtocolError
from .keys import QUEUE_NAME_RE, check_queue_name
from .models import Queue
from .periodic import PeriodicTask, check_name, iso
from .settings import SETTINGS
from .values import printable


def make_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = OneLineParser(prog="blueque", description="Administer a limpyd-blueque installation.")
    add_redis_url_options(parser)
    add_traceback_option(parser)
    parser.add_argument("--version", action="version", version=f"limpyd-blueque {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    clean = commands.add_parser("clean", help="take back tasks whose holder is gone")
    clean.add_argument("--deep", action="store_true",
                       help="also check every task hash against every list and set (slow)")
    max_attempts = next(setting for setting in SETTINGS if setting.name == "max_attempts")
    clean.add_argument("--max-attempts", type=number_option(max_attempts), default=None,
                       help="fail, rather than put back, tasks that used this many attempts")
    commands.add_parser("reindex", help="index the tasks written by other Blueque clients")
    add_periodic_parser(commands)
    queue_commands.add_parsers(commands, checked)
    return parser


def add_periodic_parser(commands: Any) -> None:
    """`blueque periodic list [--queue Q]` and `blueque periodic remove QUEUE NAME`."""
    periodic = commands.add_parser("periodic", help="list or remove periodic tasks")
    actions = periodic.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="one line per periodic task: queue, name, "
                                 "schedule, next tick (UTC), overlap, last task id")
    listing.add_argument("--queue", type=checked(check_queue_name),
                         help="only this queue's (default: every queue's)")
    removing = actions.add_parser("remove", help="remove a periodic task (a run already "
                                  "enqueued is left alone)")
    removing.add_argument("queue", type=checked(check_queue_name))
    removing.add_argument("name", type=checked(check_name))


def checked(check: Callable[[str], str]) -> Callable[[str], str]:
    """An argparse `type=` turning a check's `InvalidName` into a usage error."""
    def convert(text: str) -> str:
        try:
            return check(text)
        except InvalidName as error:
            raise argparse.ArgumentTypeError(str(error)) from None
    convert.__name__ = "name"
    return convert


def print_lines(lines: Sequence[str]) -> None:
    """Print a report, each line escaped: it names keys and ids read from Redis."""
    for line in lines:
        print(printable(line))


def reindex_command(options: argparse.Namespace) -> int:
    print_lines(reindex(Queue).lines())
    return 0


def clean(options: argparse.Namespace) -> int:
    if options.deep:
        report = deep_clean(Queue, max_attempts=options.max_attempts)
        print_lines(report.lines())
    recovered = light_clean(Queue, max_attempts=options.max_attempts)
    taken = {task_id: outcome for task_id, outcome in recovered.items() if outcome != "skipped"}
    print(f"expired leases taken back: {len(taken)}")
    for task_id, outcome in sorted(taken.items()):
        print(f"  {printable(task_id)}: {outcome}")
    return 0


def periodic_command(options: argparse.Namespace) -> int:
    """`list`: one line per periodic task (exit code 1 if a queue's keys are broken, the
    others listed all the same); `remove`: exit code 1 when there is no such task."""
    if options.action == "remove":
        if not Queue.named(options.queue).remove_periodic(options.name):
            print(f"blueque: error: no periodic task {options.name!r} in queue {options.queue!r}",
                  file=sys.stderr)
            return 1
        print(f"removed periodic task {options.name} of queue {options.queue}")
        return 0
    names = [options.queue] if options.queue else sorted(Queue.listener_counts())
    failed = 0
    for name in names:
        if not QUEUE_NAME_RE.match(name):  # another client's queue: it has no periodic task
            continue
        try:
            tasks = Queue.named(name).periodic_tasks()
        except ProtocolError as error:  # one broken queue: the others are listed
            print(f"blueque: error: queue {printable(name)}: {printable(error)}", file=sys.stderr)
            failed = 1
            continue
        print_lines([periodic_line(task) for task in tasks])
    return failed


def periodic_line(task: PeriodicTask) -> str:
    """One periodic task in one line: queue, name, schedule, next tick, overlap, last task."""
    schedule = repr(task.schedule) if isinstance(task.schedule, str) else f"{task.schedule:g}s"
    return (f"{task.queue} {task.name} schedule={schedule} next={iso(task.next_tick)} "
            f"overlap={'yes' if task.overlap else 'no'} last_task={task.last_task or '-'}")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `blueque`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    hide_secrets_from_ps()  # after reading them: sys.argv holds masked passwords from here
    options = make_parser().parse_args(argv)

    def run() -> int:
        use_redis(redis_url(options))
        commands = {"clean": clean, "reindex": reindex_command, "periodic": periodic_command,
                    **queue_commands.HANDLERS}
        return commands[options.command](options)

    return run_reporting("blueque", run, show_traceback=options.traceback)


if __name__ == "__main__":
    sys.exit(main())
