"""Retry policies: whether a failed attempt is tried again, and after how long.

A policy is resolved per task, most specific first: the task's own fields, its queue's
settings (`Queue.configure`), the worker's settings. Its parts:

* `retries`: how many failed attempts go back in line: the worker's `requeue_times`;
  when that is 0 and some retry term is set (the task's, its queue's or the worker's),
  every attempt but the last of its `max_attempts`;
* `retry_delay`: the delay before the second attempt (unset: the worker's
  `requeue_delay_delta`), multiplied by `retry_backoff` at each further attempt, at most
  `retry_max_delay`, and jittered within `retry_jitter` (a fraction) of it: the delay
  before attempt k+1 is `min(retry_delay * retry_backoff**(k-1), retry_max_delay)`;
* `retry_deadline`: no new attempt once this many seconds have passed since the task was
  first enqueued (its `created`);
* `no_retry_for`: the names of exception types that fail the task at once (a class
  matches its own name and the names of its bases).

A task that raises `Retry(delay=...)` chooses the delay before its next attempt: an
attempt like any failure, tried again while the task has retries left, or, when none is
set, while it has attempts left (`max_attempts`), so that `Retry` works without a policy.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..exceptions import ConfigurationError
from .values import MAX_SECONDS, read_number, shown

#: the retry terms a task or a queue may set (see options.TERM_RULES for their rules)
RETRY_TERMS = ("retry_delay", "retry_backoff", "retry_max_delay", "retry_jitter",
               "retry_deadline")
#: an exception type's name in `no_retry_for`
NAME_MAX = 200
#: the largest backoff factor (as options.TERM_RULES says)
MAX_BACKOFF = 1000.0


def check_names(value: object, label: str = "no_retry_for") -> tuple[str, ...]:
    """Exception type names: a list of names, or one text of names separated by commas;
    each a dotted Python name of at most `NAME_MAX` characters."""
    names = value.split(",") if isinstance(value, str) else value
    if not isinstance(names, (list, tuple, set, frozenset)):
        raise ConfigurationError(f"{label} must be a list of exception type names, not "
                                 f"{shown(value)}")
    checked = []
    for name in names:
        text = name.strip() if isinstance(name, str) else name
        if (not isinstance(text, str) or not text or len(text) > NAME_MAX
                or not all(part.isidentifier() for part in text.split("."))):
            raise ConfigurationError(f"{label} holds {shown(name)}: expected an exception "
                                     "type's name, such as 'ValueError'")
        checked.append(text)
    return tuple(dict.fromkeys(checked))


def names_of(exception: BaseException) -> set[str]:
    """The names an exception answers to in `no_retry_for`: its class's and its bases',
    each bare and with its module."""
    names = set()
    for cls in type(exception).__mro__:
        names.add(cls.__name__)
        names.add(f"{cls.__module__}.{cls.__qualname__}")
    return names


@dataclass(frozen=True)
class RetryPolicy:
    """A task's retry policy, resolved (see the module's text)."""

    retries: int = 0
    retry_delay: float = 30.0
    retry_backoff: float = 1.0
    retry_max_delay: float | None = None
    retry_jitter: float = 0.0
    retry_deadline: float | None = None
    no_retry_for: frozenset[str] = field(default_factory=frozenset)

    def delay_before(self, attempt: int,
                     uniform: Callable[[float, float], float] = random.uniform) -> float:
        """Seconds before the attempt after failed attempt number `attempt` (from 1);
        `uniform(a, b)` draws the jitter."""
        longest = MAX_SECONDS if self.retry_max_delay is None else min(self.retry_max_delay,
                                                                        MAX_SECONDS)
        try:
            delay = min(self.retry_delay * self.retry_backoff ** max(attempt - 1, 0), longest)
        except OverflowError:  # a backoff past any float: the longest delay
            delay = longest
        if self.retry_jitter:  # jittered, never past the longest delay
            delay = min(delay * (1 + uniform(-self.retry_jitter, self.retry_jitter)), longest)
        return max(delay, 0.0)

    def next_delay(self, exception: BaseException, attempt: int, created: float | None,
                   now: float, *, asked: float | None = None,
                   max_attempts: int | None = None, counted: bool = True) -> float | None:
        """The delay before the next attempt of a task whose attempt number `attempt`
        failed with `exception` (`asked`: the delay it asked for, raising `Retry`); None
        when it fails for good: its type is in `no_retry_for`, its retries are spent
        (`Retry` with no retries set: its `max_attempts`, None for no limit; not checked
        without `counted`, when the caller decided so), or the next attempt would start
        past its `retry_deadline`."""
        if self.no_retry_for & names_of(exception):
            return None
        retries = self.retries
        if asked is not None and not retries:
            retries = (max_attempts - 1) if max_attempts is not None else attempt
        if counted and attempt > retries:
            return None
        delay = self.delay_before(attempt) if asked is None else asked
        if (self.retry_deadline is not None and created is not None
                and now + delay > created + self.retry_deadline):
            return None
        return delay


def resolve(own: Mapping[str, Any], queue: Mapping[str, Any],
            worker: Mapping[str, Any], max_attempts: int | None = None) -> RetryPolicy:
    """The policy of a task: each part from its own fields (`own`), else its queue's
    settings (`queue`), else the worker's (`worker`: `requeue_times`,
    `requeue_delay_delta`, and each retry setting); a value that does not read as one is
    unset (any client may have written the fields). `max_attempts`: the task's (None: no
    limit)."""
    def number(name: str) -> float | None:
        for source in (own, queue, worker):
            value = read_number(source.get(name))
            if value is not None:
                return value
        return None

    delay = number("retry_delay")
    if delay is None:
        delay = read_number(worker.get("requeue_delay_delta")) or 0.0
    names: Iterable[str] = ()
    for source in (own, queue, worker):
        found = source.get("no_retry_for")
        if found is None:
            continue
        try:  # ('' or []: none, set on purpose over a less specific list)
            names = check_names(found) if found else ()
        except ConfigurationError:
            continue
        break
    retries = int(read_number(worker.get("requeue_times")) or 0)
    if not retries and any(number(name) is not None for name in RETRY_TERMS):
        retries = (max_attempts - 1) if max_attempts else 1_000_000
    return RetryPolicy(
        retries=retries, retry_delay=delay,
        retry_backoff=min(number("retry_backoff") or 1.0, MAX_BACKOFF),
        retry_max_delay=number("retry_max_delay"),
        retry_jitter=min(number("retry_jitter") or 0.0, 1.0),
        retry_deadline=number("retry_deadline"), no_retry_for=frozenset(names))


def asked_delay(value: object) -> float | None:
    """The delay a `Retry` asked for, when it is one (seconds from 0 to `MAX_SECONDS`);
    else None (the policy's delay applies)."""
    return read_number(value)
