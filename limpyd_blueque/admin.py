"""`blueque`: the administration command (cleaning today; more subcommands to come)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

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
from .models import Queue
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
    return parser


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


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `blueque`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    hide_secrets_from_ps()  # after reading them: sys.argv holds masked passwords from here
    options = make_parser().parse_args(argv)

    def run() -> int:
        use_redis(redis_url(options))
        return {"clean": clean, "reindex": reindex_command}[options.command](options)

    return run_reporting("blueque", run, show_traceback=options.traceback)


if __name__ == "__main__":
    sys.exit(main())
