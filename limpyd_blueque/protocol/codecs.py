"""Codecs: how a task's parameters, result and checkpoints become the bytes Redis stores,
and back.

A codec is a name with two functions: `encode(value) -> bytes` and `decode(bytes) ->
value`. Built in: `"json"` (the default, and the Blueque wire format: a `str` stored as it
is, any other value as compact JSON), `"bytes"` (a `bytes` value stored exactly, any byte
included) and `"msgpack"` (with the `msgpack` extra). `register_codec` adds one. Never
pickle: a stored value is input from any client of the server.

The stored bytes travel as text through this library's clients, which decode Redis's
replies with `surrogateescape`: bytes that are not UTF-8 become lone surrogates, and
become the same bytes again when written (`to_text`, `to_bytes`).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..exceptions import ConfigurationError, InvalidParameters, ProtocolError
from .values import Encoded, shown
from .values import decode as decode_json
from .values import encode as encode_json

#: the codec of a task that names none (what every Blueque client writes)
DEFAULT_CODEC = "json"
#: a codec's name
CODEC_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9._-]{0,63}$")
#: the codecs no application may replace
BUILT_IN = ("json", "bytes", "msgpack")


class UnknownCodec(ConfigurationError):
    """A codec name no `register_codec` made known here: a task written with it fails
    once (never retried), with this error naming the codec."""

    code = "unknown_codec"


class UndecodableValue(ProtocolError):
    """A stored value its codec could not decode: its task fails, naming the codec."""

    code = "undecodable"


@dataclass(frozen=True)
class Codec:
    """A named pair of functions between values and bytes."""

    name: str
    encode_bytes: Callable[[Any], bytes | str]
    decode_bytes: Callable[[bytes], Any]

    def encode(self, value: Any, what: str = "parameters") -> str:
        """The text to store for `value` (its bytes, see `to_text`); `InvalidParameters`,
        naming the codec and the value's type, when the codec cannot encode it."""
        if self.name == DEFAULT_CODEC:
            return encode_json(value, what)
        try:
            data = self.encode_bytes(value)
        except Exception as error:  # noqa: BLE001 - any codec's refusal, named
            # (only the parameters, refused to their producer, are shown: a result or a
            # checkpoint's message is stored, and may be logged)
            seen = f" ({shown(value)}): {error}" if what == "parameters" else ""
            raise InvalidParameters(f"the {self.name!r} codec cannot encode the task {what}, "
                                    f"a {type(value).__name__}{seen}") from None
        if isinstance(data, str):
            data = data.encode("utf-8", "surrogateescape")
        if not isinstance(data, (bytes, bytearray)):
            raise InvalidParameters(f"the {self.name!r} codec gave a {type(data).__name__} "
                                    f"for the task {what}, not bytes")
        return Encoded(to_text(bytes(data)))

    def decode(self, text: str | None, what: str = "parameters") -> Any:
        """The value stored as `text` (None stays None); `UndecodableValue` naming the codec
        when it does not decode."""
        if text is None:
            return None
        if self.name == DEFAULT_CODEC:
            return decode_json(text)
        try:
            return self.decode_bytes(to_bytes(text))
        except Exception as error:  # noqa: BLE001 - any codec's refusal, named
            raise UndecodableValue(f"the stored {what} do not decode with the {self.name!r} "
                                   f"codec: {type(error).__name__}: {error}") from None


def to_text(data: bytes) -> str:
    """Bytes as this library's clients write them (see the module's text)."""
    return data.decode("utf-8", "surrogateescape")


def to_bytes(text: str) -> bytes:
    """The bytes a text read from Redis holds."""
    return text.encode("utf-8", "surrogateescape")


def _bytes_only(value: Any) -> bytes:
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise TypeError(f"expected bytes, got {type(value).__name__}")
    return bytes(value)


def _msgpack() -> Any:
    try:
        msgpack = importlib.import_module("msgpack")
    except ImportError:
        raise ConfigurationError("the 'msgpack' codec needs the msgpack package: "
                                 "pip install 'limpyd-blueque[msgpack]'") from None
    return msgpack


def _msgpack_encode(value: Any) -> bytes:
    packed: bytes = _msgpack().packb(value, use_bin_type=True)
    return packed


def _msgpack_decode(data: bytes) -> Any:
    return _msgpack().unpackb(data, raw=False, strict_map_key=False)


_CODECS: dict[str, Codec] = {
    "json": Codec("json", lambda value: encode_json(value), lambda data: decode_json(
        data.decode("utf-8", "surrogateescape"))),
    "bytes": Codec("bytes", _bytes_only, bytes),
    "msgpack": Codec("msgpack", _msgpack_encode, _msgpack_decode),
}


def register_codec(name: str, encode: Callable[[Any], bytes | str],
                   decode: Callable[[bytes], Any]) -> Codec:
    """Make the codec `name` known to this process (producers and workers alike):
    `encode(value)` gives the bytes to store, `decode(data)` the value back. A name is
    1 to 64 letters, digits, `.`, `_` or `-`, starting with a letter; the built-in codecs
    cannot be replaced. Registering a name again replaces its functions."""
    if not isinstance(name, str) or not CODEC_NAME_RE.match(name):
        raise ConfigurationError(f"a codec name is 1 to 64 letters, digits, '.', '_' or '-', "
                                 f"starting with a letter, not {shown(name)}")
    if name in BUILT_IN:
        raise ConfigurationError(f"the {name!r} codec is built in: register yours under "
                                 "another name")
    if not callable(encode) or not callable(decode):
        raise ConfigurationError("a codec needs an encode and a decode function")
    codec = _CODECS[name] = Codec(name, encode, decode)
    return codec


def codec_named(name: object) -> Codec:
    """The codec called `name` (None or '': the default); `UnknownCodec` naming it."""
    if name is None or name == "":
        return _CODECS[DEFAULT_CODEC]
    codec = _CODECS.get(name) if isinstance(name, str) else None
    if codec is None:
        raise UnknownCodec(f"unknown codec {shown(name)}: known here are "
                           f"{', '.join(sorted(_CODECS))} (see register_codec)")
    return codec


def check_codec(name: object) -> str:
    """`name` when it names a codec known here (see `codec_named`)."""
    return codec_named(name).name
