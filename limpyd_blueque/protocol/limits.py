"""Limits across all workers (see docs/limits.rst and lua/_groups.lua): how many tasks of
a group, or of a queue as a whole, run at once and start per window, and each group's
share of the starts. `Limit` is what `Queue.limits` gives; `stored_limit` checks the
settings of one, before anything is written, and gives the text the scripts read."""

from __future__ import annotations

from dataclasses import dataclass

from ..exceptions import ConfigurationError
from .options import check_group
from .values import MAX_COUNT, MAX_SECONDS, check_number, shown

#: whose limit: the queue as a whole (`None`), the default of its groups (`DEFAULT_GROUP`),
#: or a group's name
DEFAULT_GROUP = "*"
#: the weights a group may have (a share of the starts against the default weight of 1):
#: within a million to one, the fair share's turns keep their precision
MIN_WEIGHT, MAX_WEIGHT = 0.001, 1000.0


@dataclass(frozen=True)
class Limit:
    """The limit of a group (`group`: its name, `"*"` the default of the queue's groups,
    None the queue as a whole): at most `max_running` of its tasks running at once, at
    most `max_starts` starts in any window of `per` seconds, and its share of the starts
    when groups compete, `weight` (None each when unset). `running` and `waiting` are its
    tasks running (holding a lease) and waiting, when the limit was read."""

    group: str | None
    max_running: int | None = None
    max_starts: int | None = None
    per: float | None = None
    weight: float | None = None
    running: int = 0
    waiting: int = 0


def limit_field(group: object) -> str:
    """The field of a queue's limits hash holding the limit of `group` ('' for None)."""
    if group is None:
        return ""
    if group == DEFAULT_GROUP:
        return DEFAULT_GROUP
    checked = check_group(group)
    assert checked is not None
    return checked


def stored_limit(group: object, max_running: object = None, max_starts: object = None,
                 per: object = None, weight: object = None) -> str:
    """The text a limit is stored as (`max_running max_starts per weight`, `-` for each
    unset), after checking every value; `ConfigurationError` names the first bad one."""
    limit_field(group)
    if (max_starts is None) != (per is None):
        raise ConfigurationError(
            "max_starts and per go together: at most max_starts starts in any window of per "
            f"seconds (got max_starts={shown(max_starts)}, per={shown(per)})")
    if max_running is None and max_starts is None and weight is None:
        raise ConfigurationError("a limit needs at least one of max_running, max_starts "
                                 "(with per) and weight")
    if weight is not None and group is None:
        raise ConfigurationError("weight is a group's share among the groups of its queue: "
                                 "the queue as a whole (group=None) has none")
    values = [
        None if max_running is None else check_number(
            "max_running", max_running, integer=True, minimum=0, maximum=MAX_COUNT),
        None if max_starts is None else check_number(
            "max_starts", max_starts, integer=True, minimum=1, maximum=MAX_COUNT),
        None if per is None else check_number("per", per, minimum=0, above=True,
                                              maximum=MAX_SECONDS),
        None if weight is None else check_number("weight", weight, minimum=MIN_WEIGHT,
                                                 maximum=MAX_WEIGHT),
    ]
    return " ".join("-" if value is None else repr(value) for value in values)


def parsed_limit(group: str | None, text: str | None, running: int = 0,
                 waiting: int = 0) -> Limit | None:
    """The `Limit` a stored text stands for; None when it is no limit (a value written by
    another client: the scripts read it as no limit either)."""
    if not isinstance(text, str):
        return None
    parts = text.split()
    if len(parts) != 4:
        return None
    numbers: list[float | None] = []
    for part in parts:
        try:
            numbers.append(None if part == "-" else float(part))
        except ValueError:
            return None
    max_running, max_starts, per, weight = numbers
    return Limit(group, None if max_running is None else int(max_running),
                 None if max_starts is None else int(max_starts), per, weight,
                 running, waiting)
