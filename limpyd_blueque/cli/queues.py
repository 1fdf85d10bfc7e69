"""`blueque` subcommands for Tarantool's queue operations: statistics, peek, kick,
truncate and drop (`delete` is with the operator's actions, in `operators`). Each prints
lines escaped with `values.printable` (ids and values read from Redis may hold anything),
and `statistics` and `peek` take `--json`."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from ..exceptions import ConfigurationError
from ..models import Job, Queue
from ..operations.actions import reencrypt
from ..operations.overview import check_known_queues
from ..protocol.keys import check_queue_name
from ..protocol.statistics import CALLS
from ..protocol.values import check_task_id, printable

Handler = Callable[[argparse.Namespace], int]


def add_parsers(commands: Any, checked: Callable[[Callable[[str], str]], Any]) -> None:
    """Add the subcommands to `commands` (argparse subparsers); `checked` turns a name
    check into an argparse type."""
    queue_name = checked(check_queue_name)
    task_id = checked(check_task_id)
    stats = commands.add_parser(
        "statistics", help="each queue's tasks by status (Tarantool's names too) and its "
        "operations counted, in the shape of Tarantool's statistics(), one line each or "
        "JSON, for scripts; 'stats' is the same counts with the activity, as tables")
    add_queue_list(stats, queue_name)
    stats.add_argument("--json", action="store_true", help="one JSON object by queue name")
    peek = commands.add_parser("peek", help="a task's fields as stored, one line each "
                               "(Tarantool's peek; 'inspect' tells more)")
    peek.add_argument("task", type=task_id, metavar="ID")
    peek.add_argument("--json", action="store_true", help="the task's fields as JSON")
    for name, what in (("pause", "pause a queue: workers take none of its tasks from about "
                                 "a second from now; running tasks go on, producers still "
                                 "enqueue"),
                       ("resume", "let the workers take a paused queue's tasks again")):
        command = commands.add_parser(name, help=what)
        command.add_argument("queue", type=queue_name, metavar="QUEUE")
        command.add_argument("--json", action="store_true",
                             help='{"queue": ..., "paused": ..., "changed": ...}')
    reseal = commands.add_parser(
        "reencrypt", help="seal again with the current key what older keys encrypted, in "
        "every task of a queue (give the keys with --encryption-keys-file)")
    reseal.add_argument("queue", type=queue_name, metavar="QUEUE")
    reseal.add_argument("--json", action="store_true",
                        help='{"queue", "rewritten", "values", "unopened"}')
    add_keys_file_option(reseal, argparse.SUPPRESS)
    kick = commands.add_parser("kick", help="put buried tasks back in line, oldest first")
    kick.add_argument("queue", type=queue_name)
    kick.add_argument("--count", type=int, default=1, help="how many (default 1)")
    for name, what in (("truncate", "delete every waiting task of a queue"),
                       ("drop", "delete a queue and all its tasks (no listener, no task "
                                "running)")):
        command = commands.add_parser(name, help=what)
        command.add_argument("queue", type=queue_name)
        command.add_argument("--yes", action="store_true", help="do not ask to confirm")


def add_queue_list(parser: argparse.ArgumentParser, queue_name: Callable[[str], str]) -> None:
    """The `QUEUE...` argument of a subcommand that shows some queues (`statistics`,
    `stats`, `watch`): `options.queues`, empty for every queue."""
    parser.add_argument("queues", nargs="*", type=queue_name, metavar="QUEUE",
                        help="default: every queue")


def statistics_command(options: argparse.Namespace) -> int:
    figures = ({name: Queue.named(name).statistics()
                for name in check_known_queues(options.queues)}
               if options.queues else Queue.statistics_all())
    if options.json:
        print(json.dumps(figures, sort_keys=True))
        return 0
    for name, stats in sorted(figures.items()):
        tasks = " ".join(f"{status}={count}" for status, count in stats["tasks"].items())
        calls = " ".join(f"{call}={stats['calls'].get(call, 0)}" for call in CALLS)
        print(printable(f"{name}: {tasks}"))
        print(printable(f"{' ' * len(name)}  calls: {calls}"))
    return 0


def peek_command(options: argparse.Namespace) -> int:
    data = Job.load(options.task).data()
    fields = {name: value for name, value in asdict(data).items() if name != "extra"}
    fields.update(data.extra)
    if options.json:
        print(json.dumps(fields, sort_keys=True))
    else:
        for name, value in fields.items():
            print(printable(f"{name}: {value}"))
    return 0


def pausing(pause: bool) -> Handler:
    """The handler of `pause` (`pause` True) or `resume`: one line saying what changed, or
    that nothing had to."""
    def command(options: argparse.Namespace) -> int:
        name = check_known_queues([options.queue])[0]
        queue = Queue.named(name)
        changed = queue.pause() if pause else queue.resume()
        if options.json:
            print(json.dumps({"queue": name, "paused": pause, "changed": changed}))
        elif pause:
            print(printable(f"paused: {name} (workers take none of its tasks; "
                            f"'blueque resume {name}' lets them)" if changed
                            else f"{name} was paused already"))
        else:
            print(printable(f"resumed: {name}" if changed else f"{name} was not paused"))
        return 0
    return command


def kick_command(options: argparse.Namespace) -> int:
    check_known_queues([options.queue])
    print(f"kicked: {Queue.named(options.queue).kick(options.count)}")
    return 0


def confirmed(options: argparse.Namespace, what: str) -> bool:
    """True with `--yes`, or when the user types 'yes' at the prompt."""
    if options.yes:
        return True
    if not sys.stdin.isatty():
        raise ConfigurationError(f"{what}: add --yes to confirm (no terminal to ask)")
    return input(f"{what}? type 'yes' to confirm: ").strip() == "yes"


def emptying(what: str, method: str) -> Handler:
    """The handler of `truncate` or `drop`: confirm `what`, then call the queue's `method`."""
    def command(options: argparse.Namespace) -> int:
        check_known_queues([options.queue])
        if not confirmed(options, what.format(queue=options.queue)):
            print("nothing deleted")
            return 1
        print(f"deleted: {getattr(Queue.named(options.queue), method)()}")
        return 0
    return command


def add_keys_file_option(parser: argparse.ArgumentParser, default: object) -> None:
    """`--encryption-keys-file` of `blueque`, given before its subcommand (`default`:
    None) or after those that read encrypted tasks (`argparse.SUPPRESS`: the one given
    before stands)."""
    parser.add_argument("--encryption-keys-file", metavar="FILE", default=default,
                        help="a JSON file of {key id: base64 key}: encrypted tasks are "
                        "shown (and reencrypted) with them; else shown as (encrypted)")


def reencrypt_command(options: argparse.Namespace) -> int:
    """`blueque --encryption-keys-file=F reencrypt QUEUE`: what an older key sealed, sealed
    again with the current one (see `actions.reencrypt`)."""
    check_known_queues([options.queue])
    done = reencrypt(options.queue)
    if options.json:
        print(json.dumps(asdict(done)))
    else:
        print(f"reencrypted: {done.rewritten} task(s), {done.values} value(s)"
              + (f"; {len(done.unopened)} task(s) not opened (first: "
                 f"{printable(done.unopened[0])})" if done.unopened else ""))
    return 1 if done.unopened else 0


HANDLERS: dict[str, Handler] = {
    "statistics": statistics_command, "peek": peek_command, "kick": kick_command,
    "reencrypt": reencrypt_command,
    "pause": pausing(True), "resume": pausing(False),
    "truncate": emptying("delete every waiting task of queue {queue}", "truncate"),
    "drop": emptying("delete queue {queue} and all its tasks", "drop"),
}
