"""How a task should run, as its producer says when enqueueing it: priority, delay or eta,
identifier, front of the line, job model, and its own fields. Each option is checked
here, before anything is written; `TaskOptions` is what the enqueue step receives.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from types import MappingProxyType
from typing import Any, NamedTuple, Protocol, cast

from ..exceptions import ConfigurationError
from .bounds import parse_size
from .codecs import DEFAULT_CODEC, check_codec
from .retries import check_names
from .values import MAX_COUNT, MAX_SECONDS, check_number, encode, shown, timestamp

#: priorities are whole numbers within these bounds (higher runs sooner); see lua/_line.lua
MAX_PRIORITY = 1_000_000
#: the longest identifier, in characters
IDENTIFIER_MAX = 1000
#: a micro-queue (utube) key
UTUBE_RE = re.compile(r"^[A-Za-z0-9._:@/-]{1,200}$")
#: a group's name (part of key names; `*` names the default limit of a queue's groups)
GROUP_RE = re.compile(r"^[A-Za-z0-9._:-]{1,200}$")
#: a job model's name: a dotted Python name (a class made in a function has '<locals>')
MODEL_NAME_RE = re.compile(r"^[A-Za-z_<][A-Za-z0-9_<>]*(\.[A-Za-z_<][A-Za-z0-9_<>]*)*$")

#: a retention meaning "keep forever" (RQ's convention)
FOREVER = -1
#: how long a finished task and a stored error are kept by default (seconds; see
#: docs/operating.rst): a week for results (Celery keeps them a day and RQ 500 seconds,
#: for tasks that run for seconds; a long task's owner may look days later), 30 days for
#: failures and errors (RQ keeps failed jobs a year; a month covers an incident review)
DEFAULT_RESULT_TTL = 7 * 86400.0
DEFAULT_FAILURE_TTL = 30 * 86400.0
DEFAULT_ERROR_TTL = 30 * 86400.0

_TTL = {"minimum": FOREVER, "maximum": MAX_SECONDS, "forever": True}
#: the terms a queue or a task may set (lease terms, stall timeout, retention), with the
#: rules of their values
TERM_RULES: dict[str, dict[str, Any]] = {
    "ttr": {"minimum": 0, "above": True, "maximum": MAX_SECONDS},
    "ttl": {"minimum": 0, "above": True, "maximum": MAX_SECONDS},
    "max_run_time": {"minimum": 0, "above": True, "maximum": MAX_SECONDS},
    "max_attempts": {"integer": True, "minimum": 1, "maximum": MAX_COUNT},
    "stall_timeout": {"minimum": 0, "above": True, "maximum": MAX_SECONDS},
    "result_ttl": _TTL, "failure_ttl": _TTL, "error_ttl": _TTL,
    # the retry policy (see retries.py)
    "retry_delay": {"minimum": 0, "maximum": MAX_SECONDS},
    "retry_backoff": {"minimum": 0, "above": True, "maximum": 1000},
    "retry_max_delay": {"minimum": 0, "maximum": MAX_SECONDS},
    "retry_jitter": {"minimum": 0, "maximum": 1},
    "retry_deadline": {"minimum": 0, "above": True, "maximum": MAX_SECONDS},
    # the bounds of a forked task (see bounds.py; max_memory also as text: '512M')
    "max_memory": {"integer": True, "minimum": 1, "maximum": MAX_COUNT},
    "cpu_limit": {"minimum": 0, "above": True, "maximum": MAX_SECONDS},
    "soft_time_limit": {"minimum": 0, "above": True, "maximum": MAX_SECONDS},
}

#: how many times a lease is renewed within its length (see `renewal_period`)
RENEWALS_PER_LEASE = 3


def renewal_period(ttr: float) -> float:
    """Seconds between two renewals of a lease of `ttr` seconds: a third of it, so that a
    renewal may come late, or be missed once, before the lease ends."""
    return ttr / RENEWALS_PER_LEASE


class Retention(NamedTuple):
    """How long finished tasks and stored errors are kept, in seconds (`FOREVER`: always):
    the defaults a worker (or a producer) gives the steps that finish tasks."""

    result_ttl: float = DEFAULT_RESULT_TTL
    failure_ttl: float = DEFAULT_FAILURE_TTL
    error_ttl: float = DEFAULT_ERROR_TTL


DEFAULT_RETENTION = Retention()


def ttl_value(value: object) -> float | None:
    """A ttl as read from Redis or given: `-1` or a finite number of seconds at least 0;
    None for anything else (unset, or not a ttl: the next source decides)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(cast("Any", value))
    except (TypeError, ValueError):
        return None
    if number == float(FOREVER) or (number >= 0 and math.isfinite(number)):
        return number
    return None


def resolve_ttl(*sources: object) -> float:
    """The first valid ttl of `sources` (task field, queue setting, default), else `-1`.

    The same rule as the finishing scripts (`lua/_finished.lua`, `retention_ttl`).
    """
    for source in sources:
        ttl = ttl_value(source)
        if ttl is not None:
            return ttl
    return float(FOREVER)


def check_term(label: str, name: str, value: object) -> float:
    """Check the value of the term `name` (see `TERM_RULES`); `label` names it in errors. A
    retention is `FOREVER` or a number of seconds, at least 0."""
    if name == "max_memory" and isinstance(value, str):
        return parse_size(value, label)
    rules = dict(TERM_RULES[name])
    forever = rules.pop("forever", False)
    number: float = check_number(label, value, **rules)
    if forever and FOREVER < number < 0:
        raise ConfigurationError(f"{label} must be {FOREVER} (keep forever) or at least 0, "
                                 f"not {number!r}")
    return number


#: task fields only the protocol steps write (or that have an option of their own)
STEP_FIELDS = frozenset({
    "status", "queue", "parameters", "result", "error", "node", "pid", "created", "updated",
    "eta", "reclaimed_node", "attempt", "priority", "identifier", "model", "pstart",
    "alive_until", "uncounted", "started_at", "periodic", "periodic_tick", "expires_at", "utube",
    "progress", "checkpoint", "cancel_requested", "stalled_at", "group", "parents",
    "deferred", "follow", "workflow", "on_parent_failure", "waited", "peak_rss",
    "encrypted",
})

#: what a task waiting for others becomes when one of them fails for good, is canceled or
#: expires (see `Queue.enqueue`'s `on_parent_failure`)
PARENT_FAILURE_POLICIES = ("cancel", "fail", "run")


class JobModelLike(Protocol):
    """What the options need of a `Job` class."""

    @classmethod
    def has_field(cls, name: str) -> bool: ...


@dataclass(frozen=True)
class TaskOptions:
    """The checked options of one task: its `priority`, its `eta` (None: pending at once),
    its `identifier`, whether it goes to the front of its priority (`prepend`), the
    other fields its hash gets (the job model's name among them), and its `ttl` (None:
    its queue's, if any)."""

    priority: int = 0
    eta: float | None = None
    identifier: str | None = None
    prepend: bool = False
    fields: Mapping[str, str] = field(default_factory=dict)
    ttl: float | None = None
    utube: str | None = None
    group: str | None = None
    #: the ids of the tasks it waits for (None: it waits for none and is in line at once)
    after: tuple[str, ...] | None = None
    #: the workflow it is a node of (it then waits for its submission, see `Workflow`)
    workflow: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", MappingProxyType(dict(self.fields)))
        object.__setattr__(self, "packed", self._pack())

    #: the options as the enqueue script reads them (see `_pack`)
    packed: str = field(init=False, repr=False, compare=False)

    def _pack(self) -> str:
        """The options as the enqueue script reads them: '' when none is set, else a JSON
        object of the ones set (see lua/enqueue.lua)."""
        given: dict[str, Any] = {}
        # the eta as text: a JSON number would reach Lua with 14 digits only
        eta = None if self.eta is None else (repr(self.eta) if isinstance(self.eta, float)
                                             else str(self.eta))
        for name, value in (("p", self.priority), ("e", eta), ("f", int(self.prepend)),
                            ("i", self.identifier), ("t", self.ttl), ("u", self.utube),
                            ("g", self.group)):
            if value:
                given[name] = value
        if self.fields:
            given["x"] = [item for pair in self.fields.items() for item in pair]
        if self.after is not None or self.workflow:
            given["a"] = list(self.after or ())
        if self.workflow:
            given["w"] = self.workflow
        return json.dumps(given, separators=(",", ":")) if given else ""


def check_priority(value: object, name: str = "priority") -> int:
    """`value` if it is a whole number within `MAX_PRIORITY`, else `ConfigurationError`."""
    checked: int = check_number(name, value, integer=True, minimum=-MAX_PRIORITY,
                                maximum=MAX_PRIORITY)
    return checked


def priority_of(text: str | None) -> int:
    """The priority a task's `priority` field records (0 when unset or not a whole number
    within bounds), as the scripts read it (lua/_line.lua)."""
    try:
        value = float(text) if text else 0.0
    except ValueError:
        return 0
    if value.is_integer() and abs(value) <= MAX_PRIORITY:
        return int(value)
    return 0


def seconds(name: str, value: object) -> float:
    """A delay: a number of seconds or a `timedelta`, finite and not negative."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    checked: float = check_number(name, value, minimum=0, maximum=MAX_SECONDS)
    return checked


def eta_of(now: float, delay: object = None, eta: object = None) -> float | None:
    """When a task may run: `now + delay`, or `eta` (epoch seconds or a `datetime`); None
    when neither is given, or the moment is not in the future."""
    if delay is not None and eta is not None:
        raise ConfigurationError("give a delay or an eta, not both")
    if delay is not None:
        wait = seconds("delay", delay)
        return now + wait if wait > 0 else None
    if eta is not None:
        moment = timestamp("eta", eta)
        return moment if moment > now else None
    return None


def check_identifier(value: object) -> str | None:
    """An identifier: None, or text of 1 to `IDENTIFIER_MAX` characters (valid UTF-8)."""
    if value is None:
        return None
    if not isinstance(value, str) or not 0 < len(value) <= IDENTIFIER_MAX:
        raise ConfigurationError(f"identifier must be a str of 1 to {IDENTIFIER_MAX} "
                                 f"characters, not {shown(value)}")
    return encode(value, "identifier")


def check_utube(value: object) -> str | None:
    """A micro-queue (utube) key: None, or 1 to 200 characters among letters, digits and
    `. _ - : @ /` (it is part of a key name)."""
    if value is None:
        return None
    if not isinstance(value, str) or not UTUBE_RE.match(value):
        raise ConfigurationError(f"utube must be 1 to 200 characters among letters, digits "
                                 f"and . _ - : @ /, not {shown(value)}")
    return value


#: the word by which a command line names the limit of a queue as a whole (`blueque
#: limit QUEUE queue ...`): no group is named so
WHOLE_QUEUE = "queue"


def check_group(value: object) -> str | None:
    """A group's name: None (no group), or 1 to 200 characters among letters, digits and
    `. _ - :` (it is part of key names), other than `WHOLE_QUEUE`."""
    if value is None:
        return None
    if not isinstance(value, str) or not GROUP_RE.match(value):
        raise ConfigurationError(f"group must be 1 to 200 characters among letters, digits "
                                 f"and . _ - :, not {shown(value)}")
    if value == WHOLE_QUEUE:
        raise ConfigurationError(f"group {WHOLE_QUEUE!r} is reserved: it names the queue as "
                                 "a whole (its limit) on the command line")
    return value


def model_name(model: object) -> str:
    """The name a task records for its job model: a `Job` subclass's `get_model_repr()`,
    or a name given as text (a dotted Python name; nothing is ever imported from it)."""
    if isinstance(model, str):
        if not MODEL_NAME_RE.match(model) or len(model) > 300:
            raise ConfigurationError(f"invalid job model name {shown(model)}: expected a "
                                     "dotted Python name such as 'app.jobs.Export'")
        return model
    repr_of = getattr(model, "get_model_repr", None)
    if not isinstance(model, type) or repr_of is None:
        raise ConfigurationError(f"model must be a Job subclass or its name, not {shown(model)}")
    return model_name(repr_of())


def field_values(job_model: JobModelLike, fields: Mapping[str, Any]) -> dict[str, str]:
    """The text of each extra field of a task: a field of `job_model` that no protocol step
    writes. Lease terms follow `TERM_RULES`; `cancel_on_error` is kept only when true."""
    values: dict[str, str] = {}
    for name, value in fields.items():
        if name in STEP_FIELDS or not job_model.has_field(name) or name in ("pk", "id"):
            raise ConfigurationError(
                f"unknown task option or field {name!r}" if not job_model.has_field(name)
                else f"the {name!r} field is written by the queue, not given on enqueue")
        if name in TERM_RULES:
            values[name] = repr(check_term(f"task {name}", name, value))
        elif name == "no_retry_for":
            if value is not None:
                values[name] = ",".join(check_names(value))
        elif name == "cancel_on_error":
            if value:
                values[name] = "1"
        elif name == "codec":  # (the default one is not written: what Blueque reads)
            if check_codec(value) != DEFAULT_CODEC:
                values[name] = check_codec(value)
        elif value is not None:
            values[name] = encode(value, name)
    return values


def task_options(job_model: JobModelLike, now: float, *, priority: object = 0,
                 delay: object = None, eta: object = None, identifier: object = None,
                 prepend: object = False, model: object = None, ttl: object = None,
                 utube: object = None, group: object = None, after: object = None,
                 on_parent_failure: object = None, **fields: Any) -> TaskOptions:
    """Check the options of one task (see `Queue.enqueue`); `ConfigurationError` names the
    first bad one, before anything is written."""
    if not isinstance(prepend, bool):
        raise ConfigurationError(f"prepend must be True or False, not {shown(prepend)}")
    values = field_values(job_model, fields)
    if model is not None:
        values["model"] = model_name(model)
    moment = eta_of(now, delay, eta)
    if moment is not None and not math.isfinite(moment):
        raise ConfigurationError(f"eta must be a finite moment, not {shown(moment)}")
    lifetime: float | None = None
    if ttl is not None:
        lifetime = check_number("ttl", seconds("ttl", ttl), minimum=0, above=True)
    parents = check_after(after)
    if on_parent_failure is not None:
        if on_parent_failure not in PARENT_FAILURE_POLICIES:
            raise ConfigurationError(f"on_parent_failure must be one of "
                                     f"{', '.join(map(repr, PARENT_FAILURE_POLICIES))}, not "
                                     f"{shown(on_parent_failure)}")
        if on_parent_failure != "cancel":  # (a task that waits for none never needs it)
            values["on_parent_failure"] = str(on_parent_failure)
    checked_identifier = check_identifier(identifier)
    if parents is not None and checked_identifier is not None:
        raise ConfigurationError("a task enqueued with after=[...] takes no identifier: an "
                                 "identifier maps to a task in line")
    return TaskOptions(check_priority(priority), moment, checked_identifier,
                       prepend, values, lifetime, check_utube(utube), check_group(group),
                       parents)


def check_after(after: object) -> tuple[str, ...] | None:
    """The ids of the tasks a task waits for: `after` is a sequence of tasks (anything
    with a `task_id`, a `Job` or a workflow's node) or task ids; None when it is None or
    empty."""
    if after is None:
        return None
    if isinstance(after, (str, bytes)) or not isinstance(after, (list, tuple, set, frozenset)):
        raise ConfigurationError(f"after must be a list of tasks or task ids, not "
                                 f"{shown(after)}")
    ids: dict[str, None] = {}  # (in order, each once)
    for item in after:
        task_id = getattr(item, "task_id", item)
        if not isinstance(task_id, str) or not task_id or len(task_id) > 1000:
            raise ConfigurationError(f"after holds {shown(item)}: expected a task (a Job) or "
                                     "a task id")
        ids[task_id] = None
    return tuple(ids) or None
