"""`blueque`: the administration command. It wires the subcommands of `operators`
(stats, workers, tasks, inspect, errors, watch, requeue, cancel, delete, purge, clean,
reindex), of `queues` (Tarantool's operations), of `limits`, of `workflows` (workflow), of
`serving` (web, metrics) and `periodic`; each subcommand is made by one of them only.
`blueque --help` lists them by everyday use (`GROUPS`)."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import textwrap
from collections.abc import Sequence
from typing import Any, Callable

from ..exceptions import InvalidName, ProtocolError
from ..models import Queue, use_redis
from ..models.periodic import PeriodicTask, check_name, iso
from ..operations.overview import check_known_queues
from ..protocol.encryption import Keyring
from ..protocol.keys import QUEUE_NAME_RE, check_queue_name
from ..protocol.values import printable
from . import limits, operators, queues, serving, workflows
from .worker_script import (
    OneLineParser,
    add_redis_url_options,
    add_traceback_option,
    hide_secrets_from_ps,
    redis_url,
    run_reporting,
)

#: `blueque --help` lists the subcommands by everyday use: seeing first (the pages that
#: show the same, served), acting next, maintenance last; in each group, the most used
#: first. A subcommand missing here is listed last, under "other".
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("seeing", ("stats", "tasks", "inspect", "workflow", "errors", "workers", "watch",
                "statistics", "peek", "periodic", "limits")),
    ("serving pages", ("web", "metrics")),
    ("acting", ("cancel", "requeue", "delete", "kick", "pause", "resume", "limit")),
    ("maintenance", ("purge", "truncate", "drop", "clean", "reindex", "reencrypt")),
)
#: what each group of `GROUPS` is for, in `blueque --help`
GROUP_HELP = {"seeing": "read only", "acting": "on tasks and queues",
              "maintenance": "deleting in bulk, repairing the keys, reencrypting",
              "serving pages": "until interrupted"}


class GroupedCommands:
    """Stands for argparse's subcommands to the modules that add them, and keeps each
    one's help for the grouped listing of `blueque --help` (argparse lists subcommands in
    the order they are added, in one block). Each subcommand's help is also its own
    description (`blueque stats --help`), unless it has one."""

    def __init__(self, commands: Any) -> None:
        self.commands = commands
        self.helps: dict[str, str] = {}

    def add_parser(self, name: str, **options: Any) -> argparse.ArgumentParser:
        help_text = options.pop("help", None) or ""
        self.helps[name] = help_text
        options.setdefault("description", help_text[:1].upper() + help_text[1:] + "."
                           if help_text else None)
        parser: argparse.ArgumentParser = self.commands.add_parser(name, **options)
        return parser

    def groups(self) -> list[tuple[str, list[str]]]:
        """`GROUPS` with the subcommands added only, then "other" with those it misses."""
        placed = {name for _, names in GROUPS for name in names}
        return [*((title, [name for name in names if name in self.helps])
                  for title, names in GROUPS),
                ("other", [name for name in self.helps if name not in placed])]

    def put_in_order(self) -> None:
        """Order argparse's choices as the groups do: the "choose from" of a mistyped
        subcommand and the generated docs (docs/_ext) follow the help."""
        choices = self.commands.choices
        order = [name for _, names in self.groups() for name in names]
        ordered = {name: choices[name] for name in order}
        ordered.update(choices)  # aliases, if any
        choices.clear()
        choices.update(ordered)

    def listing(self, width: int) -> str:
        """The subcommands by group (`GROUPS`), each with its help, wrapped to `width`."""
        groups = self.groups()
        column = max(len(name) for name in self.helps) + 4
        lines = []
        for title, names in groups:
            if not names:
                continue
            lines.append(f"{title} ({GROUP_HELP[title]}):" if title in GROUP_HELP
                         else f"{title}:")
            for name in names:
                wrapped = textwrap.wrap(self.helps[name], max(width - column, 30)) or [""]
                lines.append(f"  {name:<{column - 2}}{wrapped[0]}")
                lines += [" " * column + line for line in wrapped[1:]]
            lines.append("")
        return "\n".join(lines).rstrip()


def make_parser() -> argparse.ArgumentParser:
    from ..version import __version__

    parser = OneLineParser(prog="blueque", formatter_class=argparse.RawDescriptionHelpFormatter)
    add_redis_url_options(parser)
    queues.add_keys_file_option(parser, None)
    add_traceback_option(parser)
    parser.add_argument("--version", action="version", version=f"limpyd-blueque {__version__}")
    commands = GroupedCommands(parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND",
        help="one of the subcommands above; 'blueque COMMAND --help' tells more of it"))
    queues.add_parsers(commands, checked)
    operators.add_parsers(commands, checked)
    limits.add_parsers(commands, checked)
    workflows.add_parsers(commands, checked)
    add_periodic_parser(commands)
    serving.add_parsers(commands)
    commands.put_in_order()
    width = max(shutil.get_terminal_size().columns - 2, 60)
    parser.description = ("Administer a limpyd-blueque installation.\n\n"
                          + commands.listing(min(width, 100)))
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
    if options.queue:
        check_known_queues([options.queue])
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
        keys = options.encryption_keys_file
        use_redis(redis_url(options),
                  encryption_keys=Keyring.from_file(keys) if keys else None)
        commands = {"periodic": periodic_command, **queues.HANDLERS,
                    **operators.HANDLERS, **limits.HANDLERS, **workflows.HANDLERS,
                    **serving.HANDLERS}
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
