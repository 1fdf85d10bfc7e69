"""The worker settings, described once: `WorkerSettings` is the table, `Setting` one row.

Each row gives a setting's kind, default, bounds and one line of help. From it come the
class attributes of `Worker` (a subclass may set any of them), the checks of its keyword
arguments (`Setting.check`, `WorkerSettings.configure_settings`), the options of
`blueque-worker` (`worker_script.WorkerConfig`) and the documentation of each setting.

Rules between two settings (fork and concurrency, heartbeat and ttr, defaults derived
from ttr) are the worker's: see `Worker.validate`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import cached_property
from typing import Any, ClassVar, Generic, TypeVar, cast

from ..exceptions import ConfigurationError
from ..models import Error, Job, Queue
from ..protocol.bounds import parse_size
from ..protocol.codecs import check_codec
from ..protocol.keys import check_listener_id, check_queue_name
from ..protocol.options import (
    DEFAULT_ERROR_TTL,
    DEFAULT_FAILURE_TTL,
    DEFAULT_RESULT_TTL,
    FOREVER,
    MAX_PRIORITY,
    RENEWALS_PER_LEASE,
    Retention,
)
from ..protocol.retries import check_names
from ..protocol.values import MAX_COUNT, MAX_SECONDS, number_problem

T = TypeVar("T")

#: the logger a worker logs to unless told otherwise
LOGGER_NAME = "limpyd-blueque"
#: what a stopping worker may do with its running tasks (the `on_terminate` choices)
TERMINATE_MODES = ("wait", "detach", "requeue", "release")


class Setting(Generic[T]):
    """One worker setting: a class attribute whose value is checked and documented here.

    A non-data descriptor: reading it on a class or an instance gives `default`, until the
    instance (`WorkerSettings.configure_settings`) or a subclass sets its own value.

    :param kind: how the value is checked, one of `KINDS`.
    :param default: the value when nothing sets it.
    :param help: one line for `--help` and the documentation.
    :param minimum: the lowest value of a number; `above`: True if it must be greater.
    :param maximum: the highest value of a number (default: `values.MAX_SECONDS` for a
        "float" setting, a number of seconds; `values.MAX_COUNT` for an "int" one).
    :param optional: None is accepted too.
    :param choices: the values a "choice" setting accepts.
    :param cli: `blueque-worker` has an option generated for it.
    :param default_text: how `--help` and the docs show the default (a derived default such
        as "ttr / 3"; "" shows none); None: the default itself.
    :param base: the class a "model" setting must be a subclass of.
    :param validator: called on a "str" value; returns it or raises `ConfigurationError`.
    """

    name: str

    def __init__(self, kind: str, default: T, help: str, *, minimum: float | None = None,
                 above: bool = False, maximum: float | None = None, optional: bool = False,
                 choices: Sequence[str] = (),
                 cli: bool = True, default_text: str | None = None, base: type | None = None,
                 validator: Callable[[str], str] | None = None) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown setting kind {kind!r}: expected one of {', '.join(KINDS)}")
        if (kind in ("model", "models")) != (base is not None) or (
                kind == "choice") != bool(choices):
            raise ValueError("a 'model(s)' setting needs a base, a 'choice' setting choices")
        self.kind = kind
        self.default = default
        self.help = help
        self.minimum = minimum
        self.above = above
        if maximum is None and kind in ("int", "float"):
            maximum = MAX_COUNT if kind == "int" else MAX_SECONDS
        self.maximum = maximum
        self.optional = optional
        self.choices = tuple(choices)
        self.cli = cli
        self.default_text = default_text
        self.base = base
        self.validator = validator

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, instance: object, owner: type | None = None) -> T:
        return self.default

    def __repr__(self) -> str:
        return f"<Setting {getattr(self, 'name', '?')} ({self.kind}, default {self.shown_default})>"

    @property
    def option(self) -> str:
        """The `blueque-worker` option of this setting, e.g. "--max-loops"."""
        return "--" + self.name.replace("_", "-")

    @property
    def shown_default(self) -> str:
        """The default as `--help` and the docs show it ("" when none is shown)."""
        if self.default_text is not None:
            return self.default_text
        value: Any = self.default
        if isinstance(value, type):
            return value.__name__
        if self.kind == "level" and isinstance(value, int):
            return logging.getLevelName(value)
        if isinstance(value, str):
            return value
        if isinstance(value, float):
            return f"{value:g}"
        return repr(value)

    @property
    def help_with_default(self) -> str:
        """`help` followed by the shown default, for `--help`."""
        shown = self.shown_default
        return f"{self.help} (default: {shown})" if shown else self.help

    def check(self, value: object) -> T:
        """The value, normalized ("a,b" -> ["a", "b"], "debug" -> 10), if it fits this setting.

        Raises `ConfigurationError` (or its subclass `InvalidName`) naming the setting.
        """
        if value is None and self.optional:
            return cast(T, None)  # an optional setting's T includes None
        checked: T = KINDS[self.kind](self, value)
        return checked

    def refuse(self, reason: str, value: object) -> ConfigurationError:
        """The error saying that `value` does not fit: "<name> <reason>, not <value>"."""
        return ConfigurationError(f"{self.name} {reason}, not {value!r}")

    def number_problem(self, value: object) -> str | None:
        """Why `value` does not fit this "int" or "float" setting ("must be ..."), or None.

        Used by `check` and by the command line, which shows the text typed instead of
        the setting's name.
        """
        return number_problem(value, integer=self.kind == "int", minimum=self.minimum,
                              above=self.above, maximum=self.maximum)


# -- one check per kind: each returns the normalized value or raises ------------------------
def _check_number(setting: Setting[Any], value: object) -> object:
    problem = setting.number_problem(value)
    if problem:
        raise setting.refuse(problem, value)
    return value


def _check_bool(setting: Setting[Any], value: object) -> object:
    if not isinstance(value, bool):
        raise setting.refuse("must be True or False", value)
    return value


def _check_str(setting: Setting[Any], value: object) -> object:
    if not isinstance(value, str):
        raise setting.refuse("must be a string", value)
    return setting.validator(value) if setting.validator else value


def _check_choice(setting: Setting[Any], value: object) -> object:
    if value not in setting.choices:
        raise setting.refuse(f"must be one of {', '.join(setting.choices)}", value)
    return value


def _check_queues(setting: Setting[Any], value: object) -> object:
    """ "a,b" or a sequence of names -> a list of valid queue names (at least one)."""
    if isinstance(value, str):
        names: list[Any] = value.split(",")
    elif value is None or isinstance(value, Iterable):
        names = list(value or ())
    else:
        raise setting.refuse("must be queue names, comma separated or in a list", value)
    if not [name for name in names if name]:
        raise ConfigurationError("no queues: give at least one queue name")
    return [check_queue_name(name.strip() if isinstance(name, str) else name) for name in names]


def _check_names(setting: Setting[Any], value: object) -> object:
    """ "A,B" or a sequence of exception type names -> a tuple of them (maybe empty)."""
    if value is None:
        raise setting.refuse("must be exception type names, comma separated or in a list",
                             value)
    return check_names(value, setting.name) if value else ()


def _check_codecs(setting: Setting[Any], value: object) -> object:
    """{queue name: codec name} -> the same, each name checked (the codec known here)."""
    if not isinstance(value, Mapping):
        raise setting.refuse("must be a mapping of queue names to codec names", value)
    return {check_queue_name(queue): check_codec(codec) for queue, codec in value.items()}


def _check_keys(setting: Setting[Any], value: object) -> object:
    """{key id: key} -> the same (checked when the worker makes its keyring); never shown."""
    if not isinstance(value, Mapping):
        raise ConfigurationError(f"{setting.name} must be a mapping of key ids to keys")
    return dict(value)


def _check_size(setting: Setting[Any], value: object) -> object:
    """A number of bytes, or text such as "512M" or "2G" -> a whole number of bytes."""
    return parse_size(value, setting.name)


def _check_callable(setting: Setting[Any], value: object) -> object:
    if not callable(value):
        raise setting.refuse("must be callable", value)
    return value


def _check_level(setting: Setting[Any], value: object) -> object:
    """A logging level, as a number or a name in any case ("debug", "INFO") -> its number."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    level = logging.getLevelName(value.upper()) if isinstance(value, str) else None
    if not isinstance(level, int):
        raise ConfigurationError(f"unknown logger level {value!r} for {setting.name}")
    return level


def _check_models(setting: Setting[Any], value: object) -> object:
    """A sequence of subclasses of the setting's base -> a tuple of them (maybe empty)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise setting.refuse(f"must be a list of {setting.base.__name__ if setting.base else ''} "
                             "subclasses", value)
    models = tuple(value)
    for model in models:
        _check_model(setting, model)
    return models


def _check_model(setting: Setting[Any], value: object) -> object:
    assert setting.base is not None  # ensured by Setting.__init__
    if not (isinstance(value, type) and issubclass(value, setting.base)):
        raise setting.refuse(f"must be a subclass of {setting.base.__name__}", value)
    return value


#: the kinds of setting, each with its check
KINDS: dict[str, Callable[[Setting[Any], object], Any]] = {
    "int": _check_number, "float": _check_number, "bool": _check_bool, "str": _check_str,
    "choice": _check_choice, "queues": _check_queues, "callable": _check_callable,
    "level": _check_level, "model": _check_model, "models": _check_models,
    "names": _check_names, "size": _check_size, "codecs": _check_codecs,
    "keys": _check_keys,
}


class WorkerSettings:
    """The settings of a worker: this class body is the table of them, in this order.

    `Worker` derives from it. Each setting is a class attribute a subclass may set
    (`concurrency = 4`) and a constructor keyword; `configure_settings` checks them all.
    """

    #: the names of the settings, in table order (a subclass may add plain attributes)
    parameters: ClassVar[tuple[str, ...]]

    queues: Setting[Sequence[str]] = Setting(
        "queues", (), "queue names, comma separated, in order of preference", default_text="")
    #: instead of `Job.run`
    callback: Setting[Callable[[Job, Queue], Any] | None] = Setting(
        "callable", None, "function(job, queue) doing the work", optional=True,
        default_text="Job.run")
    job_model: Setting[type[Job]] = Setting(
        "model", Job, "the Job subclass of the tasks that name no model", base=Job)
    #: a task whose `model` field names a class not given here is failed, never imported
    job_models: Setting[Sequence[type[Job]]] = Setting(
        "models", (), "the other Job subclasses its tasks may name, comma separated",
        base=Job, default_text="none")
    queue_model: Setting[type[Queue]] = Setting("model", Queue, "the Queue subclass", base=Queue)
    error_model: Setting[type[Error]] = Setting("model", Error, "the Error subclass", base=Error)
    logger_name: Setting[str] = Setting("str", LOGGER_NAME, "logger of the worker")
    logger_level: Setting[int | str] = Setting(
        "level", logging.INFO, "its level: debug, info, warning, error (any case) or a number")
    save_errors: Setting[bool] = Setting("bool", True, "store an Error per failure")
    save_tracebacks: Setting[bool] = Setting("bool", True, "store the traceback in each Error")
    #: None: never
    max_loops: Setting[int | None] = Setting(
        "int", 1000, "stop after taking this many tasks", minimum=1, optional=True)
    max_duration: Setting[float | None] = Setting(
        "float", None, "stop after this many seconds", minimum=0, above=True, optional=True)
    terminate_gracefully: Setting[bool] = Setting(
        "bool", True, "catch SIGTERM/SIGINT to stop cleanly, as on_terminate says")
    #: "detach" leaves the task processes running, for the next worker of the host;
    #: "requeue" interrupts them and puts the tasks back at the front of their queue
    on_terminate: Setting[str] = Setting(
        "choice", "wait", "when stopping: wait for running tasks, detach or requeue them",
        choices=TERMINATE_MODES)
    #: with on_terminate="release": seconds a task has to return `Release` once told
    #: to stop (`Job.stop_requested`), before its processes are killed and it is put back
    release_timeout: Setting[float] = Setting(
        "float", 20.0, "with on_terminate=release: seconds a running task has to save its "
        "place and return Release before it is stopped and put back", minimum=0)
    #: None: no limit
    terminate_timeout: Setting[float | None] = Setting(
        "float", None, "with on_terminate=wait and fork: seconds before requeuing the tasks "
        "still running",
        minimum=0, optional=True)
    timeout: Setting[float] = Setting(
        "float", 30, "longest wait for a task (seconds) before checking whether to stop",
        minimum=0, above=True)
    requeue_times: Setting[int] = Setting(
        "int", 0, "times a failed task goes back in line (0 with a retry policy set: "
        "every attempt but the last of its max_attempts)", minimum=0)
    requeue_delay_delta: Setting[float] = Setting(
        "float", 30, "seconds before a failed task is retried", minimum=0)
    #: the retry policy (see protocol/retries.py); a task's or its queue's own comes first
    retry_delay: Setting[float | None] = Setting(
        "float", None, "seconds before a failed task's second attempt, multiplied by "
        "retry_backoff at each further one", minimum=0, optional=True,
        default_text="requeue_delay_delta")
    retry_backoff: Setting[float | None] = Setting(
        "float", None, "factor applied to the retry delay at each attempt", minimum=0,
        above=True, maximum=1000, optional=True, default_text="1")
    retry_max_delay: Setting[float | None] = Setting(
        "float", None, "longest delay between two attempts (seconds)", minimum=0,
        optional=True, default_text="no limit")
    retry_jitter: Setting[float | None] = Setting(
        "float", None, "fraction of each retry delay it may vary by, at random", minimum=0,
        maximum=1, optional=True, default_text="0")
    retry_deadline: Setting[float | None] = Setting(
        "float", None, "no new attempt once this many seconds have passed since the task "
        "was enqueued", minimum=0, above=True, optional=True, default_text="none")
    no_retry_for: Setting[Sequence[str]] = Setting(
        "names", (), "exception type names that fail a task at once, comma separated",
        default_text="none")
    requeue_priority_delta: Setting[int] = Setting(
        "int", -1, "priority change of a retried task", minimum=-2 * MAX_PRIORITY,
        maximum=2 * MAX_PRIORITY)
    concurrency: Setting[int] = Setting(
        "int", 1, "tasks run at once, each in its own process", minimum=1)
    fork: Setting[bool] = Setting(
        "bool", True, "run each task in a forked process, not in the worker process")
    #: a task whose lease is not renewed for this long is taken back by other workers;
    #: None: leases never expire
    ttr: Setting[float | None] = Setting(
        "float", 60, "lease length in seconds", minimum=0, above=True, optional=True)
    #: None: `renewal_period(ttr)`, a third of it
    heartbeat_interval: Setting[float | None] = Setting(
        "float", None, "seconds between lease renewals", minimum=0, above=True, optional=True,
        default_text=f"ttr / {RENEWALS_PER_LEASE}")
    #: the worker's own heartbeat, apart from its tasks' leases: a dead worker's tasks come
    #: back once it misses it (at once on its machine, where its process is checked)
    liveness_interval: Setting[float] = Setting(
        "float", 1.0, "seconds between two beats saying this worker is alive", minimum=0,
        above=True)
    liveness_timeout: Setting[float] = Setting(
        "float", 10.0, "seconds without a beat after which workers of other machines take "
        "this worker for dead and take back its tasks", minimum=0, above=True)
    #: a task's or its queue's own `max_attempts` comes first; None: no limit
    max_attempts: Setting[int | None] = Setting(
        "int", 5, "attempts before a task whose holder is lost is failed", minimum=1,
        optional=True)
    #: a task's or its queue's own `max_run_time` comes first; None: no limit
    max_run_time: Setting[float | None] = Setting(
        "float", None, "seconds a task may run before it is killed and failed", minimum=0,
        above=True, optional=True)
    #: the bounds of a forked task; a task's or its queue's own come first (see
    #: protocol/bounds.py); None: no bound
    max_memory: Setting[int | None] = Setting(
        "size", None, "bytes (or 512M, 2G) a task's processes may use before they are "
        "stopped and the task failed", optional=True, default_text="no limit")
    cpu_limit: Setting[float | None] = Setting(
        "float", None, "CPU seconds a task's process may use before the task is failed",
        minimum=0, above=True, optional=True, default_text="no limit")
    soft_time_limit: Setting[float | None] = Setting(
        "float", None, "seconds a task runs before SoftTimeLimitExceeded is raised in it",
        minimum=0, above=True, optional=True, default_text="no limit")
    #: a task records the codec it was written with; these decode the tasks that name
    #: none (see protocol/codecs.py)
    codec: Setting[str] = Setting(
        "str", "json", "codec of the tasks that name none (json, bytes, msgpack, or one "
        "registered with register_codec)", validator=check_codec)
    codecs: Setting[Mapping[str, str]] = Setting(
        "codecs", {}, "{queue: codec}: a queue's own codec, over codec", cli=False,
        default_text="{}")
    #: never on the command line: a file, or Python (see protocol/encryption.py)
    encryption_keys: Setting[Mapping[str, Any]] = Setting(
        "keys", {}, "{key id: key}, the one that encrypts first", cli=False,
        default_text="none")
    encryption_keys_file: Setting[str | None] = Setting(
        "str", None, "a JSON file of {key id: base64 key}, the one that encrypts first",
        optional=True, default_text="none")
    schedule_interval: Setting[float] = Setting(
        "float", 1.0, "seconds between moves of due scheduled tasks", minimum=0, above=True)
    #: light cleans take back expired leases; None: half of `ttr`
    clean_interval: Setting[float | None] = Setting(
        "float", None, "seconds between light cleans and adoptions", minimum=0, above=True,
        optional=True, default_text="ttr / 2")
    #: a task's progress is written at most once per this many seconds (the last value
    #: always, when it ends)
    progress_interval: Setting[float] = Setting(
        "float", 1.0, "seconds between two writes of a task's progress", minimum=0)
    #: a task's or its queue's own `stall_timeout` comes first; None: no stall detection
    stall_timeout: Setting[float | None] = Setting(
        "float", None, "seconds a running task's progress may stay still before it is "
        "flagged stalled", minimum=0, above=True, optional=True, default_text="off")
    cancel_grace: Setting[float] = Setting(
        "float", 10.0, "seconds a canceled task's process has after SIGTERM, before SIGKILL",
        minimum=0)
    #: a task's or its queue's own `result_ttl` comes first; -1: forever
    result_ttl: Setting[float] = Setting(
        "float", DEFAULT_RESULT_TTL, "seconds a complete task is kept (-1: forever)",
        minimum=FOREVER, default_text="604800: 7 days")
    #: for failed, canceled and expired tasks; a task's or its queue's own comes first
    failure_ttl: Setting[float] = Setting(
        "float", DEFAULT_FAILURE_TTL, "seconds a failed, canceled or expired task is kept "
        "(-1: forever)", minimum=FOREVER, default_text="2592000: 30 days")
    #: a task's or its queue's own `error_ttl` comes first
    error_ttl: Setting[float] = Setting(
        "float", DEFAULT_ERROR_TTL, "seconds a stored Error is kept (-1: forever)",
        minimum=FOREVER, default_text="2592000: 30 days")
    #: so that a long task finished during a Redis restart is not run again
    outcome_retry_timeout: Setting[float] = Setting(
        "float", 60, "seconds an outcome is retried while Redis cannot be reached", minimum=0)
    listener_id: Setting[str | None] = Setting(
        "str", None, "the Blueque listener id", optional=True, validator=check_listener_id,
        default_text="<host>_<pid>")
    #: the script turns it on unless given --no-title
    update_title: Setting[bool] = Setting(
        "bool", False, "show the worker's state in its process title", cli=False,
        default_text="False; blueque-worker: True, unless --no-title")

    def configure_settings(self, overrides: Mapping[str, Any]) -> None:
        """Set the `overrides` on this instance, then check and normalize every setting.

        Each value is the override, else the class attribute of a subclass, else the
        default. Raises `ConfigurationError` for a name not in `parameters` or a bad value.
        """
        unknown = sorted(set(overrides) - set(self.parameters))
        if unknown:
            raise ConfigurationError(f"unknown worker option(s): {', '.join(unknown)}")
        for name, value in overrides.items():
            setattr(self, name, value)
        for setting in SETTINGS:
            self.__dict__[setting.name] = setting.check(getattr(self, setting.name))
        for name in ("result_ttl", "failure_ttl", "error_ttl"):
            if FOREVER < getattr(self, name) < 0:
                raise ConfigurationError(f"{name} must be {FOREVER} (keep forever) or at "
                                         f"least 0, not {getattr(self, name)!r}")

    @cached_property
    def retention(self) -> Retention:
        """How long the tasks and errors this worker finishes are kept, by default."""
        return Retention(self.result_ttl, self.failure_ttl, self.error_ttl)


#: every worker setting, in table order
SETTINGS: tuple[Setting[Any], ...] = tuple(
    value for value in vars(WorkerSettings).values() if isinstance(value, Setting))
WorkerSettings.parameters = tuple(setting.name for setting in SETTINGS)
