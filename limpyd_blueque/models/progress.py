"""What a running task says about itself: its progress and its checkpoint.

`ProgressReporter` is the task's side: `set` is cheap enough for a tight loop (writes are
coalesced, at most one per `interval`, the last value written by `flush` when the task
ends), and `checkpoint` stores a JSON-able state at once. Both go through one fenced step
(`lua/report.lua`): an attempt that lost its task writes nothing, and each write tells
whether the task's cancel was asked. `Progress` and `CheckpointRecord` are what the task
hash's `progress` and `checkpoint` fields read back as; any value another client wrote
there reads as None, never as an error.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any, Callable

from ..exceptions import REDIS_AWAY, Canceled, ConfigurationError, InvalidParameters
from ..protocol.codecs import Codec
from ..protocol.encryption import is_sealed
from ..protocol.values import MAX_SECONDS, MAX_TIMESTAMP, check_number

if TYPE_CHECKING:
    #: what a reporter writes through: (progress JSON or None, checkpoint JSON or None) ->
    #: whether the task's cancel was asked, or None when this attempt no longer holds it
    Writer = Callable[[str | None, str | None], bool | None]

#: the longest progress message kept, in characters (a longer one is cut)
MESSAGE_MAX = 500
#: the largest checkpoint, in bytes of JSON (a checkpoint says where to resume, not the
#: data itself: keep large data elsewhere and checkpoint its key)
CHECKPOINT_MAX_BYTES = 16 * 1024 * 1024


#: the largest `done` or `total` a task may report (and that is read back)
PROGRESS_MAX = 1e15
#: what reading a field another client may have written can raise
_UNREADABLE = (ValueError, TypeError, KeyError, AttributeError, OverflowError, RecursionError)


def _moment(value: float) -> datetime:
    return datetime.fromtimestamp(value, timezone.utc)


def _finite(value: Any, maximum: float = PROGRESS_MAX) -> float | None:
    """A number within +-`maximum` (None for anything else: text, NaN, a huge integer)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) and abs(number) <= maximum else None


def _time(value: Any) -> float | None:
    """A moment between 1970 and the year 9999 (None for anything else)."""
    moment = _finite(value, MAX_TIMESTAMP)
    return moment if moment is not None and moment >= 0 else None


@dataclass(frozen=True)
class Progress:
    """How far a task is: `done` out of `total` (None: unknown), a `message`, when it last
    moved, and where this attempt's first report stood (`first_at`, `first_done`), from
    which the rate, hence the time left, is estimated."""

    done: float
    total: float | None
    message: str | None
    moved_at: datetime
    first_at: datetime
    first_done: float
    attempt: int

    @property
    def fraction(self) -> float | None:
        """`done / total`, between 0 and 1 (None without a total)."""
        if not self.total:
            return None
        return max(0.0, min(1.0, self.done / self.total))

    @property
    def time_left(self) -> timedelta | None:
        """The time left at the rate of this attempt so far (None when unknown)."""
        elapsed = (self.moved_at - self.first_at).total_seconds()
        moved = self.done - self.first_done
        if self.total is None or elapsed <= 0 or moved <= 0:
            return None
        left = max(self.total - self.done, 0.0) * elapsed / moved
        return timedelta(seconds=left) if left <= MAX_SECONDS else None

    def as_dict(self) -> dict[str, Any]:
        """A JSON-able form: done, total, fraction, message, moved_at (ISO 8601), time_left
        (seconds or None), attempt."""
        left = self.time_left
        return {"done": self.done, "total": self.total, "fraction": self.fraction,
                "message": self.message, "moved_at": self.moved_at.isoformat(),
                "time_left": left.total_seconds() if left is not None else None,
                "attempt": self.attempt}

    def to_text(self) -> str:
        """The `progress` field's JSON."""
        return json.dumps({"done": self.done, "total": self.total, "message": self.message,
                           "at": self.moved_at.timestamp(), "first_at": self.first_at.timestamp(),
                           "first_done": self.first_done, "attempt": self.attempt})

    @classmethod
    def from_text(cls, text: str | None) -> Progress | None:
        """The progress a `progress` field holds; None when empty or not ours."""
        try:
            data = json.loads(text or "")
            done, at = _finite(data["done"]), _time(data["at"])
            first_at, first_done = _time(data.get("first_at")), _finite(data.get("first_done"))
            message = data.get("message")
            attempt = data.get("attempt")
        except _UNREADABLE:
            return None
        if done is None or at is None or not isinstance(attempt, int):
            return None
        return cls(done, _finite(data.get("total")),
                   message if isinstance(message, str) else None, _moment(at),
                   _moment(first_at if first_at is not None else at),
                   first_done if first_done is not None else done, attempt)


@dataclass(frozen=True)
class CheckpointRecord:
    """A task's last checkpoint: its `state`, the attempt that stored it, when, and the
    size of the stored JSON in bytes."""

    state: Any
    attempt: int
    at: datetime
    size: int
    #: the codec `state` is written with (None: it is the JSON state itself)
    codec: str | None = None
    #: `state` is encrypted (see protocol/encryption.py)
    sealed: bool = False

    @classmethod
    def from_text(cls, text: str | None) -> CheckpointRecord | None:
        """The checkpoint a `checkpoint` field holds; None when empty or not ours."""
        try:
            data = json.loads(text or "")
            state, attempt, at = data["state"], data["attempt"], _time(data["at"])
        except _UNREADABLE:
            return None
        if not isinstance(attempt, int) or at is None:
            return None
        codec = data.get("codec")
        coded = isinstance(codec, str) and isinstance(state, str)
        return cls(state, attempt, _moment(at), len((text or "").encode()),
                   codec if coded else None, coded and data.get("sealed") is True)




def _checked(done: object, total: object) -> tuple[float, float | None]:
    """`done` and `total` as reported, checked: numbers within `PROGRESS_MAX`, `total`
    not below 0 (`InvalidParameters` names a bad one)."""
    try:
        checked = check_number("progress done", done, minimum=-PROGRESS_MAX,
                               maximum=PROGRESS_MAX)
        if total is None:
            return checked, None
        return checked, check_number("progress total", total, minimum=0, maximum=PROGRESS_MAX)
    except ConfigurationError as error:
        raise InvalidParameters(str(error)) from None


class ProgressReporter:
    """The reports of one attempt of a running task, coalesced (see the module)."""

    def __init__(self, write: Writer, attempt: int, interval: float,
                 clock: Callable[[], float] = time.time) -> None:
        self.write = write
        self.attempt = attempt
        self.interval = interval
        self.clock = clock
        self.canceled = False  # its cancel was asked
        self.lost = False  # another attempt holds the task: nothing is written any more
        self.writes = 0
        self._pending: Progress | None = None
        self._first: tuple[float, float] | None = None  # (at, done) of the first report
        self._moved: tuple[float, float, float | None] | None = None  # (at, done, total)
        self._next_write = 0.0

    def set(self, done: float, total: float | None = None, message: str | None = None) -> None:
        """Record how far the task is; written now if the last write is `interval` old.
        Raises `Canceled` once the task's cancel was asked."""
        if self.canceled:
            raise Canceled("the task's cancel was asked")
        done, total = _checked(done, total)
        if message is not None:
            message = message if is_sealed(message) else str(message)[:MESSAGE_MAX]
        now = self.clock()
        if self._first is None:
            self._first = (now, done)
        if self._moved is None or self._moved[1:] != (done, total):
            self._moved = (now, done, total)  # a report that says the same is no move
        self._pending = Progress(done, total, message, _moment(self._moved[0]),
                                 _moment(self._first[0]), self._first[1], self.attempt)
        if now >= self._next_write:
            try:
                self.flush()
            except REDIS_AWAY:
                pass  # not worth failing the task: tried again after `interval`
        if self.canceled:
            raise Canceled("the task's cancel was asked")

    def flush(self, checkpoint: str | None = None) -> bool:
        """Write the progress not written yet (and `checkpoint`, a JSON text); False when
        this attempt no longer holds the task. `RedisFull` or `RedisUnavailable` when Redis
        cannot take it now: the progress stays to be written next time."""
        pending = self._pending
        if self.lost or (pending is None and checkpoint is None):
            return not self.lost
        self._next_write = self.clock() + self.interval
        self.writes += 1
        asked = self.write(pending.to_text() if pending is not None else None, checkpoint)
        self._pending = None  # written (a task reports from one thread)
        if asked is None:
            self.lost = True
            return False
        self.canceled = self.canceled or asked
        return True

    def checkpoint(self, state: Any, codec: Codec | None = None,
                   seal: Callable[[str], str] | None = None) -> bool:
        """Store `state` (JSON-able; with a `codec`, anything it encodes, kept as the text
        of its bytes, and sealed by `seal` when given) as the task's checkpoint now, with
        the progress not written yet; False when this attempt no longer holds the task."""
        record: dict[str, Any] = {"state": state, "attempt": self.attempt, "at": self.clock()}
        if codec is not None:
            text = codec.encode(state, "checkpoint")
            record.update(state=seal(text) if seal else text, codec=codec.name)
            if seal:
                record["sealed"] = True
        try:
            text = json.dumps(record, allow_nan=False)
        except (TypeError, ValueError) as error:
            raise InvalidParameters(f"a checkpoint must be JSON-able: {error}") from None
        if len(text.encode()) > CHECKPOINT_MAX_BYTES:
            raise InvalidParameters(f"a checkpoint is at most {CHECKPOINT_MAX_BYTES} bytes "
                                    "of JSON")
        return self.flush(checkpoint=text)
