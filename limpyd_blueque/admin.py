"""`blueque`: the administration command (cleaning today; more subcommands to come)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from .cleaning import deep_clean, light_clean, reindex
from .config import OneLineParser
from .connection import DEFAULT_URL, use_redis
from .exceptions import ConfigurationError, LimpydBluequeError
from .models import Queue


def make_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = OneLineParser(prog="blueque", description="Administer a limpyd-blueque installation.")
    parser.add_argument("--redis-url", default=os.environ.get("REDIS_URL", DEFAULT_URL),
                        help="the Redis server (default: $REDIS_URL, else %(default)s)")
    parser.add_argument("--version", action="version", version=f"limpyd-blueque {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    clean = commands.add_parser("clean", help="take back tasks whose holder is gone")
    clean.add_argument("--deep", action="store_true",
                       help="also check every task hash against every list and set (slow)")
    clean.add_argument("--max-attempts", type=int, default=None,
                       help="fail, rather than put back, tasks that used this many attempts")
    commands.add_parser("reindex", help="index the tasks written by other Blueque clients")
    return parser


def reindex_command(options: argparse.Namespace) -> int:
    print("\n".join(reindex(Queue).lines()))
    return 0


def clean(options: argparse.Namespace) -> int:
    if options.deep:
        report = deep_clean(Queue, max_attempts=options.max_attempts)
        print("\n".join(report.lines()))
    recovered = light_clean(Queue, max_attempts=options.max_attempts)
    taken = {task_id: outcome for task_id, outcome in recovered.items() if outcome != "skipped"}
    print(f"expired leases taken back: {len(taken)}")
    for task_id, outcome in sorted(taken.items()):
        print(f"  {task_id}: {outcome}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `blueque`."""
    options = make_parser().parse_args(argv)
    try:
        use_redis(options.redis_url)
        return {"clean": clean, "reindex": reindex_command}[options.command](options)
    except ConfigurationError as error:
        print(f"blueque: error: {error}", file=sys.stderr)
        return 2
    except LimpydBluequeError as error:
        print(f"blueque: error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
