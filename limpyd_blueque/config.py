"""`WorkerConfig`: turns `blueque-worker` options into a configured, running `Worker`.

Subclass it to run code before the worker class is loaded (e.g. `django.setup()`), or
to add options, and pass it with `--worker-config=my.module.MyWorkerConfig`.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any, Callable

from .connection import DEFAULT_URL, use_redis
from .exceptions import ConfigurationError
from .models import BluequeModel
from .settings import SETTINGS, Setting
from .workers import Worker

LOG_FORMAT = "[%(process)d] %(asctime)s (%(name)s) %(levelname)-8s %(message)s"
#: kinds of setting given on the command line as an import path ("package.module.name")
IMPORTED_KINDS = ("callable", "model")


def import_string(path: str, what: str) -> Any:
    """The object at dotted `path` ("package.module.name"); `ConfigurationError` if not found."""
    module_name, _, name = path.rpartition(".")
    if not module_name:
        raise ConfigurationError(f"cannot import {what} {path!r}: expected 'module.name'")
    try:
        return getattr(importlib.import_module(module_name), name)
    except ImportError as error:
        raise ConfigurationError(f"cannot import {what} {path!r}: {error}") from None
    except AttributeError:
        raise ConfigurationError(f"cannot import {what} {path!r}: "
                                 f"module {module_name!r} has no {name!r}") from None


def number_option(setting: Setting[Any]) -> Callable[[str], Any]:
    """The argparse `type=` of an "int" or "float" setting: the text as a number that fits.

    The setting's own rules decide (`Setting.number_problem`); the message shows the text
    typed, e.g. "'0' must be at least 1".
    """
    kind: type = int if setting.kind == "int" else float

    def convert(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not {'a whole number' if kind is int else 'a number'}") from None
        problem = setting.number_problem(value)
        if problem:
            raise argparse.ArgumentTypeError(f"{text!r} {problem}")
        return setting.check(value)
    convert.__name__ = kind.__name__
    return convert


class OneLineParser(argparse.ArgumentParser):
    """Reports a usage mistake in one line, without the usage block."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def bootstrap_parser() -> argparse.ArgumentParser:
    """The options read before anything is imported: where to find code, which config."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--pythonpath", action="append", default=[])
    parser.add_argument("--worker-config")
    return parser


class WorkerConfig:
    """Parses the command line and runs the worker it describes."""

    #: options that configure the script itself, not the worker
    script_options = ("pythonpath", "worker_config", "print_options", "dry_run", "worker_class",
                      "redis_url", "no_title")

    def __init__(self, argv: Sequence[str] | None = None) -> None:
        self.parser = self.make_parser()
        self.options = self.parser.parse_args(argv)

    def make_parser(self) -> argparse.ArgumentParser:
        """The parser of `blueque-worker`: the script's options, then one per worker setting."""
        parser = OneLineParser(prog="blueque-worker",
                               description="Run a limpyd-blueque worker on some queues.")
        self.add_script_options(parser)
        for setting in SETTINGS:
            if setting.cli:
                self.add_setting_option(parser, setting)
        return parser

    def add_script_options(self, parser: argparse.ArgumentParser) -> None:
        """The options of the script itself (`script_options`), not of the worker."""
        from . import __version__

        add = parser.add_argument
        S = argparse.SUPPRESS
        add("--pythonpath", action="append", default=S, metavar="DIR",
            help="a directory to add to the Python path (repeatable)")
        add("--worker-config", default=S, metavar="PATH",
            help="the WorkerConfig subclass to use, e.g. my.module.MyWorkerConfig")
        add("--print-options", action="store_true", help="print the worker's options")
        add("--dry-run", action="store_true", help="set everything up, run no task, exit")
        add("--version", action="version", version=f"limpyd-blueque {__version__}")
        add("--no-title", action="store_true", help="do not change the process title")
        add("--redis-url", default=os.environ.get("REDIS_URL", DEFAULT_URL),
            help="the Redis server (default: $REDIS_URL, else %(default)s)")
        add("--worker-class", default=S, metavar="PATH", help="a Worker subclass")

    def add_setting_option(self, parser: argparse.ArgumentParser, setting: Setting[Any]) -> None:
        """The option of one worker setting, as its kind asks; absent, the worker's default."""
        if setting.kind == "bool":
            on, off = setting.help, f"the opposite of {setting.option}"
            if setting.default:
                on += " (default)"
            else:
                off += " (default)"
            self.add_flag(parser, setting.option[2:], on, off)
            return
        options: dict[str, Any] = {"default": argparse.SUPPRESS,
                                   "help": setting.help_with_default.replace("%", "%%")}
        if setting.kind in ("int", "float"):
            options["type"] = number_option(setting)
        elif setting.kind == "choice":
            options["choices"] = setting.choices
        elif setting.kind in IMPORTED_KINDS:
            options["metavar"] = "PATH"
        parser.add_argument(setting.option, **options)

    @staticmethod
    def add_flag(parser: argparse.ArgumentParser, name: str, help_on: str, help_off: str) -> None:
        """Add `--<name>` and `--no-<name>`, setting one boolean worker option."""
        dest = name.replace("-", "_")
        parser.add_argument(f"--{name}", dest=dest, action="store_true", default=argparse.SUPPRESS,
                            help=help_on)
        parser.add_argument(f"--no-{name}", dest=dest, action="store_false",
                            default=argparse.SUPPRESS, help=help_off)

    # -- building the worker ---------------------------------------------------------------
    def worker_class(self) -> type[Worker]:
        path = getattr(self.options, "worker_class", None)
        if not path:
            return Worker
        cls = import_string(path, "worker class")
        if not (isinstance(cls, type) and issubclass(cls, Worker)):
            raise ConfigurationError(f"worker class {path!r} is not a subclass of Worker")
        return cls

    def worker_options(self) -> dict[str, Any]:
        """The worker parameters the command line sets (the others keep their defaults)."""
        options = {name: value for name, value in vars(self.options).items()
                   if name not in self.script_options}
        for setting in SETTINGS:
            if setting.kind in IMPORTED_KINDS and setting.name in options:
                options[setting.name] = import_string(options[setting.name],
                                                      setting.name.replace("_", " "))
        options["update_title"] = not self.options.no_title
        return options

    def setup_logging(self, worker: Worker) -> None:
        """Log to stderr when nothing else handles the worker's logger."""
        if not worker.logger.handlers and not logging.getLogger().handlers:
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter(LOG_FORMAT))
            worker.logger.addHandler(handler)

    def make_worker(self) -> Worker:
        # every option is checked before the server is contacted
        worker = self.worker_class()(**self.worker_options())
        use_redis(self.options.redis_url)
        for model in (worker.job_model, worker.queue_model, worker.error_model):
            if model.database is not BluequeModel.database:
                model.use_database(BluequeModel.database)
        return worker

    def execute(self) -> int:
        """Build the worker and run it; the exit code of the script."""
        worker = self.make_worker()
        self.setup_logging(worker)
        if self.options.print_options:
            for name in worker.parameters:
                print(f"{name}={getattr(worker, name)!r}")
            print(f"redis_url={self.options.redis_url}")
        if self.options.dry_run:
            print(f"dry run: worker ready on queues {','.join(worker.queues)}; no task run")
            return 0
        worker.run()
        return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `blueque-worker`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    boot, _ = bootstrap_parser().parse_known_args(argv)
    for path in reversed(boot.pythonpath):
        sys.path.insert(0, path)
    try:
        config_cls = WorkerConfig
        if boot.worker_config:
            config_cls = import_string(boot.worker_config, "worker config")
            if not (isinstance(config_cls, type) and issubclass(config_cls, WorkerConfig)):
                raise ConfigurationError(f"{boot.worker_config!r} is not a WorkerConfig subclass")
        return config_cls(argv).execute()
    except ConfigurationError as error:
        print(f"blueque-worker: error: {error}", file=sys.stderr)
        return 2
    except Exception as error:  # any other library error, in one line
        from .exceptions import LimpydBluequeError

        if isinstance(error, LimpydBluequeError):
            print(f"blueque-worker: error: {error}", file=sys.stderr)
            return 1
        raise
