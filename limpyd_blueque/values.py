"""How task parameters and results become the strings Blueque stores."""

from __future__ import annotations

import json
from typing import Any

from .exceptions import InvalidParameters


def encode(value: Any, what: str = "parameters") -> str:
    """Return the string to store for `value`.

    A `str` is stored as it is: the Blueque wire format is a string, and other
    Blueque clients already pass JSON text. Any other value is encoded as compact
    JSON; a value JSON cannot encode (bytes, sets, objects...) is refused.
    """
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        raise InvalidParameters(
            f"task {what} cannot be bytes: decode them to str, or pass a JSON-serializable value"
        )
    try:
        return json.dumps(value, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as error:
        raise InvalidParameters(
            f"task {what} must be a str or a JSON-serializable value, "
            f"not {type(value).__name__}: {error}"
        ) from None


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
