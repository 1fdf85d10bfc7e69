"""`blueque`: the administration command. It wires the subcommands of `operators`
(stats, workers, tasks, inspect, errors, watch, requeue, cancel, delete, purge, clean,
reindex), of `queues` (Tarantool's operations), of `serving` (web, metrics) and
`periodic`; each subcommand is made by one of them only."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any, Callable

from ..exceptions import InvalidName, ProtocolError
from ..models import Queue, use_redis
from ..models.periodic import PeriodicTask, check_name, iso
from ..protocol.keys import QUEUE_NAME_RE, check_queue_name
from ..protocol.values import printable
from . import operators, queues, serving
from .worker_script import (
    OneLineParser,
    add_redis_url_options,
    add_traceback_option,
    hide_secrets_from_ps,
    redis_url,
    run_reporting,
)


def make_parser() -> argparse.ArgumentParser:
    from ..version import __version__

    parser = OneLineParser(prog="blueque", description="Administer a limpyd-blueque installation.")
    add_redis_url_options(parser)
    add_traceback_option(parser)
    parser.add_argument("--version", action="version", version=f"limpyd-blueque {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_periodic_parser(commands)
    queues.add_parsers(commands, checked)
    operators.add_parsers(commands, checked)
    serving.add_parsers(commands)
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
        for task in tasks:
            print(printable(periodic_line(task)))
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
    serving.hide_token_from_ps(sys.argv)
    options = make_parser().parse_args(argv)

    def run() -> int:
        use_redis(redis_url(options))
        commands = {"periodic": periodic_command, **queues.HANDLERS,
                    **operators.HANDLERS, **serving.HANDLERS}
        return commands[options.command](options)

    try:
        return run_reporting("blueque", run, show_traceback=options.traceback)
    except KeyboardInterrupt:  # Ctrl-C at a prompt, or during a long purge
        print("blueque: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`blueque tasks | head`): say nothing
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(main())
