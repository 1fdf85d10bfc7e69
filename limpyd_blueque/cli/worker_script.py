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
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Callable

from redis.exceptions import RedisError

from ..connection.clients import DEFAULT_URL
from ..connection.errors import mask_secrets
from ..exceptions import ConfigurationError, LimpydBluequeError
from ..models import BluequeModel, use_redis
from ..models.binding import unconverted
from ..operations.overview import (
    did_you_mean,
    queue_names,
    unknown_queue_message,
    unknown_queues,
)
from ..protocol.bounds import parse_size
from ..protocol.values import printable
from ..worker.settings import SETTINGS, Setting
from ..worker.worker import Worker

LOG_FORMAT = "[%(process)d] %(asctime)s (%(name)s) %(levelname)-8s %(message)s"
#: kinds of setting given on the command line as an import path ("package.module.name")
IMPORTED_KINDS = ("callable", "model", "models")


def import_string(path: str, what: str) -> Any:
    """The object at dotted `path` ("package.module.name"); `ConfigurationError` if not found."""
    module_name, _, name = path.rpartition(".")
    if not module_name:
        raise ConfigurationError(f"cannot import {what} {path!r}: expected 'module.name'")
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # whatever the user's module raises at import
        raise ConfigurationError(f"cannot import {what} {path!r}: "
                                 f"{type(error).__name__}: {error}") from error
    try:
        return getattr(module, name)
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


def size_option(text: str) -> int:
    """The argparse `type=` of a "size" setting: bytes, or `512M`, `2G`..."""
    try:
        return parse_size(text, "the size")
    except ConfigurationError as error:
        raise argparse.ArgumentTypeError(f"{text!r}: {error}") from None


size_option.__name__ = "size"


class OneLineParser(argparse.ArgumentParser):
    """Reports a usage mistake in one line, without the usage block; a value that is not
    among an argument's choices (a subcommand, `--status`) gets the close ones as "did you
    mean"."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {printable(mask_secrets(message))} (see --help)\n")

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        choices = action.choices
        if choices is None or value in choices:
            return
        names = [str(choice) for choice in choices]
        raise argparse.ArgumentError(action, f"invalid choice: {value!r}"
                                     f"{did_you_mean(str(value), names)} (choose from "
                                     f"{', '.join(map(repr, names))})")


def bootstrap_parser() -> argparse.ArgumentParser:
    """The options read before anything is imported: where to find code, which config,
    and whether an error shows its traceback."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--pythonpath", action="append", default=[])
    parser.add_argument("--worker-config")
    add_traceback_option(parser)
    return parser


def add_traceback_option(parser: argparse.ArgumentParser) -> None:
    """`--traceback` (or `-v`): an error shows its traceback, not only its one line."""
    parser.add_argument("--traceback", "-v", action="store_true",
                        help="on an error, also print its traceback")


def add_redis_url_options(parser: argparse.ArgumentParser) -> None:
    """`--redis-url` and `--redis-url-file`: where the Redis server is (see `redis_url`)."""
    parser.add_argument("--redis-url", metavar="URL",
                        help=f"the Redis server (default: $REDIS_URL, else {DEFAULT_URL}); a "
                             "password here is visible to other users until the command masks it")
    parser.add_argument("--redis-url-file", metavar="PATH",
                        help="a file whose first line is the Redis URL, so that a password "
                             "never shows on the command line")


def redis_url(options: argparse.Namespace) -> str:
    """The Redis URL the options give: `--redis-url-file`, `--redis-url`, `$REDIS_URL`, or
    the default. `ConfigurationError` for an unreadable or empty file, or both options."""
    path = getattr(options, "redis_url_file", None)
    if path is None:
        return getattr(options, "redis_url", None) or os.environ.get("REDIS_URL", DEFAULT_URL)
    if getattr(options, "redis_url", None):
        raise ConfigurationError("give --redis-url or --redis-url-file, not both")
    try:
        lines = Path(path).read_text().splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigurationError(f"cannot read the Redis URL file {path!r}: {error}") from None
    url = lines[0].strip() if lines else ""
    if not url:
        raise ConfigurationError(f"the Redis URL file {path!r} is empty: expected the URL on "
                                 "its first line")
    return url


def hide_secrets_from_ps() -> None:
    """Mask Redis passwords (`connection.mask_secrets`) in this process's arguments:
    `sys.argv`, and the command line `ps` and `/proc/<pid>/cmdline` show, which
    `setproctitle` rewrites in place. Nothing changes when no argument holds one."""
    masked = [mask_secrets(argument) for argument in sys.argv]
    if masked == sys.argv:
        return
    sys.argv[:] = masked
    import setproctitle

    setproctitle.setproctitle(mask_secrets(setproctitle.getproctitle()))


def run_reporting(prog: str, action: Callable[[], int], show_traceback: bool = False) -> int:
    """`action()`, whose error of our tree or of Redis is printed in one line: exit code 2
    for a user mistake (`ConfigurationError`), 1 for any other. The traceback too with
    `show_traceback`. Passwords are masked, control characters escaped."""
    try:
        return action()
    except (LimpydBluequeError, RedisError) as raised:
        error = raised if isinstance(raised, LimpydBluequeError) else unconverted(raised)
        if show_traceback:
            lines = traceback.format_exception(type(raised), raised, raised.__traceback__)
            sys.stderr.write(mask_secrets("".join(lines)))
        print(f"{prog}: error: {printable(mask_secrets(str(error)))}", file=sys.stderr)
        return 2 if isinstance(error, ConfigurationError) else 1


class WorkerConfig:
    """Parses the command line and runs the worker it describes."""

    #: options that configure the script itself, not the worker
    script_options = ("pythonpath", "worker_config", "print_options", "dry_run", "worker_class",
                      "redis_url", "redis_url_file", "no_title", "traceback")

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
        from ..version import __version__

        add = parser.add_argument
        S = argparse.SUPPRESS
        add("--pythonpath", action="append", default=S, metavar="DIR",
            help="a directory to add to the Python path (repeatable)")
        add("--worker-config", default=S, metavar="PATH",
            help="the WorkerConfig subclass to use, e.g. my.module.MyWorkerConfig")
        add("--print-options", action="store_true",
            help="print the worker's options first, before Redis is contacted")
        add("--dry-run", action="store_true", help="set everything up, run no task, exit")
        add("--version", action="version", version=f"limpyd-blueque {__version__}")
        add("--no-title", action="store_true", help="do not change the process title")
        add_redis_url_options(parser)
        add("--worker-class", default=S, metavar="PATH", help="a Worker subclass")
        add_traceback_option(parser)

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
        elif setting.kind == "size":
            options["type"], options["metavar"] = size_option, "SIZE"
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
                what = setting.name.replace("_", " ")
                paths = options[setting.name]
                options[setting.name] = ([import_string(path.strip(), what)
                                          for path in paths.split(",") if path.strip()]
                                         if setting.kind == "models"
                                         else import_string(paths, what))
        options["update_title"] = not self.options.no_title
        return options

    def setup_logging(self, worker: Worker) -> None:
        """Log to stderr when nothing else handles the worker's logger."""
        if not worker.logger.handlers and not logging.getLogger().handlers:
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter(LOG_FORMAT))
            worker.logger.addHandler(handler)

    def build_worker(self) -> Worker:
        """The worker the options describe, every option checked; Redis is not contacted."""
        return self.worker_class()(**self.worker_options())

    def make_worker(self) -> Worker:
        """The worker, its models bound to the Redis server of the options (pinged)."""
        worker = self.build_worker()  # every option is checked before the server is contacted
        use_redis(redis_url(self.options))
        for model in (worker.job_model, *worker.job_models, worker.queue_model,
                      worker.error_model):
            if model.database is not BluequeModel.database:
                model.use_database(BluequeModel.database)
        return worker

    def execute(self) -> int:
        """Build the worker and run it; the exit code of the script.

        `--print-options` prints the worker's options before Redis is contacted (an
        unreachable server does not keep them from showing), then the worker runs, or the
        dry run, as without it. A queue that Redis has never seen (`blueque_queues` does
        not list it: a typo, most often) is logged as one warning naming the known
        queues, in a dry run too."""
        if self.options.print_options:
            self.print_options(self.build_worker())
        worker = self.make_worker()
        self.setup_logging(worker)
        self.warn_unknown_queues(worker)
        if self.options.dry_run:
            print(f"dry run: worker ready on queues {','.join(worker.queues)}; no task run")
            return 0
        worker.run()
        return 0

    def print_options(self, worker: Worker) -> None:
        """One line `name=value` per worker parameter, and the Redis URL (password masked)."""
        for name in worker.parameters:
            value = getattr(worker, name)
            if name == "encryption_keys":  # their ids only, never a key
                value = {key_id: "***" for key_id in value}
            print(f"{name}={value!r}")
        print(f"redis_url={mask_secrets(redis_url(self.options))}", flush=True)

    def warn_unknown_queues(self, worker: Worker) -> None:
        """Log one warning when some of the worker's queues were never seen by Redis (no
        task enqueued, no listener, no periodic task): it would wait for tasks that no
        producer sends, silently."""
        unknown = unknown_queues(worker.queues, worker.job_model)
        if unknown:
            worker.logger.warning("%s", unknown_queue_message(
                unknown, queue_names(worker.job_model), lead="never seen queue"))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `blueque-worker`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    hide_secrets_from_ps()  # after reading them: sys.argv holds masked passwords from here
    boot, _ = bootstrap_parser().parse_known_args(argv)
    for path in reversed(boot.pythonpath):
        sys.path.insert(0, path)

    def run() -> int:
        config_cls = WorkerConfig
        if boot.worker_config:
            config_cls = import_string(boot.worker_config, "worker config")
            if not (isinstance(config_cls, type) and issubclass(config_cls, WorkerConfig)):
                raise ConfigurationError(f"{boot.worker_config!r} is not a WorkerConfig subclass")
        return config_cls(argv).execute()

    return run_reporting("blueque-worker", run, show_traceback=boot.traceback)
