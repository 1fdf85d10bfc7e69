"""How task parameters and results become the strings Blueque stores, and the rules every
value given to the library (task ids, numbers, timestamps) follows."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Any

from ..exceptions import ConfigurationError, InvalidName, InvalidParameters

#: the longest task id, in characters
TASK_ID_MAX = 200
#: the longest duration any setting may have, in seconds (about 31 years): under
#: `threading.TIMEOUT_MAX`, so any wait derived from a setting can be waited for
MAX_SECONDS = 1_000_000_000
#: the largest count (attempts, loops...): a whole number Redis' Lua numbers hold exactly
MAX_COUNT = 2**53 - 1
#: the latest timestamp accepted as an eta: the end of year 9999, UTC
MAX_TIMESTAMP = 253402300799


#: the JSON encoder of `encode` (compact, no NaN), made once: `json.dumps` with these
#: options would make one per call
_JSON = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


class Encoded(str):
    """Text a codec made already (the bytes of a value, see codecs.py): stored as it is."""

    __slots__ = ()


def encode(value: Any, what: str = "parameters") -> str:
    """Return the string to store for `value`.

    A `str` is stored as it is: the Blueque wire format is a string, and other
    Blueque clients already pass JSON text. Any other value is encoded as compact
    JSON; a value JSON cannot encode (bytes, sets, objects, NaN, nesting deeper than
    Python's recursion limit...) is refused with `InvalidParameters`, as is a `str`
    that is not valid UTF-8 (lone surrogates). An "error" text is a description: its
    characters that are not UTF-8 are escaped instead.
    """
    if isinstance(value, str):
        return str(value) if isinstance(value, Encoded) else _utf8_text(value, what)
    if isinstance(value, (bytes, bytearray, memoryview)):
        raise InvalidParameters(
            f"task {what} cannot be bytes: decode them to str, or pass a JSON-serializable value"
        )
    try:
        return _JSON.encode(value)
    except RecursionError:
        problem = "nested too deeply"
    except (TypeError, ValueError) as error:
        problem = str(error)
    # (a result or a checkpoint is named by its type only: the message is stored, and may
    # be logged, and JSON's own words may quote the value)
    seen = f" {shown(value)}: {problem}" if what == "parameters" else ""
    raise InvalidParameters(f"task {what} must be a str or a JSON-serializable value, "
                            f"not {type(value).__name__}{seen}")


def _utf8_text(text: str, what: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        if what == "error":
            return text.encode("utf-8", "backslashreplace").decode("utf-8")
        bad = text[error.start]
        raise InvalidParameters(f"task {what} must be valid UTF-8 text: {bad!a} at index "
                                f"{error.start} of {shown(text)} is a lone surrogate") from None
    return text


def shown(value: object, limit: int = 80) -> str:
    """The start of `value`'s repr, for a message naming a bad value."""
    try:
        text = repr(value)
    except (RecursionError, ValueError):  # a repr too deep or too long (ints over 4300 digits)
        return f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[:limit] + "..."


def decode(text: str | None) -> Any:
    """The JSON value stored in `text`, or `text` itself when it is not JSON."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def is_text(value: str | None) -> bool:
    """False for a string holding bytes that were not UTF-8 (see BluequeDatabase)."""
    try:
        (value or "").encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def printable(text: object) -> str:
    """`text` fit for one log line: control characters (newlines, ANSI escapes), format
    characters and lone surrogates are shown escaped, as `repr` shows them (`\\n`,
    `\\x1b`, `\\u202e`, `\\udcff`); letters of any script stay as they are."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in text)


# -- task ids ------------------------------------------------------------------------------
def check_task_id(task_id: object) -> str:
    """Return `task_id` if it follows the task id rule, else raise `InvalidName`.

    The rule: a `str` of 1 to 200 characters, each of them printable (`str.isprintable`:
    no control or format character, no lone surrogate, so always valid UTF-8) and none
    of them whitespace. Letters, digits, punctuation and symbols of any script are fine.
    """
    if not isinstance(task_id, str):
        raise InvalidName(f"invalid task id {shown(task_id)}: a task id is a str, not "
                          f"{type(task_id).__name__}")
    if 0 < len(task_id) <= TASK_ID_MAX and task_id.isprintable() and " " not in task_id:
        return task_id
    raise InvalidName(f"invalid task id {shown(task_id)}: use 1 to {TASK_ID_MAX} printable "
                      "characters, without whitespace")


def check_task_ids(task_ids: object, count: int) -> list[str]:
    """`task_ids` as a list of `count` valid ids, each once; `InvalidName` otherwise."""
    if isinstance(task_ids, (str, bytes, bytearray)) or not isinstance(task_ids, Sequence):
        raise InvalidName("task_ids must be a sequence of str, not "
                          f"{type(task_ids).__name__} {shown(task_ids)}")
    ids = [check_task_id(task_id) for task_id in task_ids]
    if len(ids) != count:
        raise InvalidName(f"{len(ids)} task id(s) for {count} task(s): give one id per task")
    seen: set[str] = set()
    for task_id in ids:
        if task_id in seen:
            raise InvalidName(f"task id {task_id!r} is given twice: each task needs its own")
        seen.add(task_id)
    return ids


def check_parameters_list(parameters: object) -> Sequence[Any]:
    """`parameters` if it is a sequence of task parameters (a list, a tuple, a range),
    not a `str`, `bytes` or mapping whose items would be taken for tasks."""
    if (isinstance(parameters, (str, bytes, bytearray, memoryview))
            or not isinstance(parameters, Sequence)):
        raise InvalidParameters("enqueue_many takes a sequence of task parameters (a list or a "
                                f"tuple), not {type(parameters).__name__} {shown(parameters)}")
    return parameters


def chunks(texts: Sequence[str], count: int, size: int) -> Iterator[tuple[int, int]]:
    """`(start, end)` of successive slices of `texts`, each of at most `count` texts and,
    unless one text alone is bigger, at most `size` characters in all."""
    start = 0
    while start < len(texts):
        end, total = start, 0
        while end < len(texts) and end - start < count and (
                end == start or total + len(texts[end]) <= size):
            total += len(texts[end])
            end += 1
        yield start, end
        start = end


# -- numbers -----------------------------------------------------------------------------------
def number_problem(value: object, *, integer: bool = False, minimum: float | None = None,
                   above: bool = False, maximum: float | None = None) -> str | None:
    """Why `value` is not a number within these rules ("must be ..."), or None.

    A number is an `int` (not a `bool`), or with `integer=False` a finite `float` too.
    """
    if isinstance(value, bool) or not isinstance(value, (int,) if integer else (int, float)):
        return "must be a whole number" if integer else "must be a number"
    if isinstance(value, float) and not math.isfinite(value):
        return "must be a finite number"
    if minimum is not None and (value <= minimum if above else value < minimum):
        return f"must be {'above' if above else 'at least'} {minimum}"
    if maximum is not None and value > maximum:
        return f"must be at most {maximum}"
    return None


def read_number(value: object, most: float = MAX_SECONDS) -> float | None:
    """A finite number from 0 to `most` read from a field or a setting (any client may
    have written it), else None: the next source of the value decides."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) and 0 <= number <= most else None


def check_number(name: str, value: Any, **rules: Any) -> Any:
    """`value` if it fits the `number_problem` rules, else `ConfigurationError` naming it."""
    problem = number_problem(value, **rules)
    if problem:
        raise ConfigurationError(f"{name} {problem}, not {shown(value)}")
    return value


def timestamp(name: str, value: object) -> float:
    """A moment as epoch seconds: a finite number, or a `datetime` (a naive one is local
    time, as `datetime.timestamp` takes it). `ConfigurationError` otherwise."""
    if isinstance(value, datetime):
        try:
            value = value.timestamp()
        except (OverflowError, ValueError, OSError) as error:
            raise ConfigurationError(f"{name} {value!r} is not a usable moment: {error}") from None
    checked: float = check_number(name, value, minimum=-MAX_TIMESTAMP, maximum=MAX_TIMESTAMP)
    return checked
