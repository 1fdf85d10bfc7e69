"""The bounds of a forked task: its memory, its CPU time and its soft time limit.

Each is resolved per task, most specific first: the task's own field, its queue's
setting (`Queue.configure`), the worker's setting; a value that does not read as one
is unset (any client may have written the fields).

* `max_memory` (bytes): the memory of the task's process group (its process and every
  process it started), summed over its processes: the pages each holds on its own
  (private), so that the worker's pages a forked task shares are not counted;
* `cpu_limit` (CPU seconds of the task process);
* `soft_time_limit` (seconds): `SoftTimeLimitExceeded` is raised in the task.

`max_run_time`, the hard time limit, is a lease term resolved by the reserve step.
Sizes are given in bytes, or as text with a unit (`512M`, `2G`, `1.5GB`, `300KiB`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from ..exceptions import ConfigurationError
from .values import MAX_COUNT, read_number, shown

#: the bounds a task, a queue or a worker may set (see options.TERM_RULES for their rules)
BOUND_TERMS = ("max_memory", "cpu_limit", "soft_time_limit")
#: the largest memory bound, in bytes (a whole number Lua and JSON hold exactly)
MAX_MEMORY = MAX_COUNT

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?B?)\s*$", re.IGNORECASE)
_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


def parse_size(value: object, label: str = "max_memory") -> int:
    """A size in bytes: a whole number, or text such as `512M`, `2G`, `1.5GB`, `300KiB`
    (units are powers of 1024); `ConfigurationError` names a bad one."""
    if isinstance(value, bool):
        raise ConfigurationError(f"{label} must be a size in bytes (or text such as '512M'), "
                                 f"not {shown(value)}")
    if isinstance(value, (int, float)):
        number = float(value)
    elif isinstance(value, str) and _SIZE_RE.match(value):
        match = _SIZE_RE.match(value)
        assert match is not None
        number = float(match.group(1)) * _UNITS[match.group(2).upper()]
    else:
        raise ConfigurationError(f"{label} must be a size in bytes, or a number with a unit "
                                 f"such as '512M' or '2G', not {shown(value)}")
    if not math.isfinite(number) or number < 1 or number > MAX_MEMORY:
        raise ConfigurationError(f"{label} must be from 1 byte to {MAX_MEMORY} bytes, not "
                                 f"{shown(value)}")
    return int(number)


def size_text(size: float) -> str:
    """A size for people: `512 MiB`, `1.5 GiB`, `300 B`."""
    for unit, factor in (("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2),
                         ("KiB", 1024)):
        if size >= factor:
            return f"{size / factor:.4g} {unit}"
    return f"{int(size)} B"


@dataclass(frozen=True)
class Bounds:
    """The bounds of one task, resolved (None: no bound)."""

    max_memory: int | None = None
    cpu_limit: float | None = None
    soft_time_limit: float | None = None

    def __bool__(self) -> bool:
        return any(value is not None for value in asdict(self).values())

    def to_payload(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_payload(cls, message: Mapping[str, Any] | None) -> Bounds:
        message = message or {}
        return cls(_size(message.get("max_memory")), _seconds(message.get("cpu_limit")),
                   _seconds(message.get("soft_time_limit")))


def resolve(own: Mapping[str, Any], queue: Mapping[str, Any],
            worker: Mapping[str, Any]) -> Bounds:
    """The bounds of a task: each from its own fields (`own`), else its queue's settings
    (`queue`), else the worker's (`worker`)."""
    def first(name: str, read: Any) -> Any:
        for source in (own, queue, worker):
            value = read(source.get(name))
            if value is not None:
                return value
        return None

    return Bounds(first("max_memory", _size), first("cpu_limit", _seconds),
                  first("soft_time_limit", _seconds))


def _size(value: object) -> int | None:
    """A size in bytes read from a field or a setting, else None."""
    if value is None:
        return None
    try:
        return parse_size(value)
    except ConfigurationError:
        return None


def _seconds(value: object) -> float | None:
    """A number of seconds above 0 read from a field or a setting, else None."""
    return read_number(value) or None
