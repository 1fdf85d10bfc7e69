"""Encryption at rest: a task's parameters, result, checkpoints and progress messages
sealed with AES-256-GCM (the `encryption` extra, on the `cryptography` package).

A `Keyring` holds named keys, the first one encrypting; the others still decrypt what
they encrypted (rotation). Each value is stored as an envelope that names its key:
`bqe1:<key id>:<base64 of the nonce, the ciphertext and its tag>`, bound to its task and
its field (the associated data), so that a value moved to another task or field does not
decrypt. A task whose values are sealed has the field `encrypted`; its status, times and
every field the protocol reads stay clear. No key and no clear value is ever part of a
message of this module.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..exceptions import ConfigurationError, LimpydBluequeError, ProtocolError
from .values import Encoded, shown

#: the algorithm a sealed task names in its `encrypted` field
ALGORITHM = "aes-256-gcm"
#: the start of a sealed value
PREFIX = "bqe1:"
#: a key's id: part of every value it seals
KEY_ID_RE = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
#: bytes of a nonce (96 bits: GCM's own size) and of a key (256 bits)
NONCE_BYTES = 12
KEY_BYTES = 32


class UnknownEncryptionKey(LimpydBluequeError):
    """A sealed value names a key this process was not given: its task fails once (kept,
    never retried in a loop), naming the key's id."""

    code = "unknown_key"


class TamperedValue(ProtocolError):
    """A sealed value does not decrypt with its key (changed, moved, or cut): its task
    fails, never run with wrong data."""

    code = "tampered"


def _aesgcm() -> Any:
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError:
        raise ConfigurationError("encryption needs the cryptography package: pip install "
                                 "'limpyd-blueque[encryption]'") from None
    return AESGCM


def _key_bytes(key_id: str, key: object) -> bytes:
    """A key as 32 bytes: given raw, or as base64 or hex text (the message never shows it)."""
    if isinstance(key, (bytes, bytearray)) and len(key) == KEY_BYTES:
        return bytes(key)
    if isinstance(key, str):
        for decode in (base64.b64decode, base64.urlsafe_b64decode, bytes.fromhex):
            try:
                raw = decode(key)
            except (ValueError, binascii.Error):
                continue
            if len(raw) == KEY_BYTES:
                return raw
    raise ConfigurationError(f"encryption key {key_id!r} must be 32 bytes (AES-256), raw or as "
                             "base64 or hex text")


class Keyring:
    """Named AES-256 keys; the first one encrypts, every one decrypts what it sealed."""

    def __init__(self, keys: Mapping[str, Any]) -> None:
        if not isinstance(keys, Mapping) or not keys:
            raise ConfigurationError("encryption_keys must be a mapping of key ids to keys, "
                                     "the one that encrypts first")
        checked: dict[str, Any] = {}
        aesgcm = _aesgcm()
        for key_id, key in keys.items():
            if not isinstance(key_id, str) or not KEY_ID_RE.match(key_id):
                # (not shown: a key given where its id goes would be printed)
                raise ConfigurationError(
                    "an encryption key id (a key of the mapping, before its key) is 1 to 64 "
                    f"letters, digits, '.', '_' or '-', not a {type(key_id).__name__} of "
                    f"{len(key_id) if isinstance(key_id, (str, bytes)) else '?'} characters")
            checked[key_id] = aesgcm(_key_bytes(key_id, key))
        self._ciphers = checked
        #: the id of the key that encrypts
        self.current = next(iter(checked))

    def __repr__(self) -> str:  # never the keys
        return f"<Keyring {', '.join(self._ciphers)}>"

    @property
    def ids(self) -> list[str]:
        return list(self._ciphers)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Keyring:
        """The keys of a JSON file: an object of key ids to base64 (or hex) keys, the one
        that encrypts first. Its contents never reach a message."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as error:
            raise ConfigurationError(f"cannot read the encryption keys file {str(path)!r}: "
                                     f"{error.strerror}") from None
        except ValueError:
            raise ConfigurationError(f"the encryption keys file {str(path)!r} is not a JSON "
                                     "object of key ids to keys") from None
        if not isinstance(data, dict):
            raise ConfigurationError(f"the encryption keys file {str(path)!r} is not a JSON "
                                     "object of key ids to keys")
        return cls(data)

    def seal(self, text: str, context: str) -> Encoded:
        """The envelope of `text` (its bytes: any value a codec made), bound to `context`
        (its task and field), sealed with the current key."""
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._ciphers[self.current].encrypt(
            nonce, text.encode("utf-8", "surrogateescape"), context.encode())
        body = base64.b64encode(nonce + sealed).decode("ascii")
        return Encoded(f"{PREFIX}{self.current}:{body}")

    def open(self, stored: str, context: str) -> str:
        """The text an envelope sealed for `context`; `UnknownEncryptionKey` naming a key
        not given here, `TamperedValue` when it does not decrypt."""
        key_id, body = parse(stored)
        cipher = self._ciphers.get(key_id)
        if cipher is None:
            raise UnknownEncryptionKey(f"the value is encrypted with the key {key_id!r}, which "
                                       "this process was not given")
        from cryptography.exceptions import InvalidTag

        try:
            clear: bytes = cipher.decrypt(body[:NONCE_BYTES], body[NONCE_BYTES:],
                                          context.encode())
        except (InvalidTag, ValueError):
            raise TamperedValue(f"a value encrypted with the key {key_id!r} does not decrypt: "
                                "changed, moved to another task or field, or cut") from None
        return Encoded(clear.decode("utf-8", "surrogateescape"))

    def reseal(self, stored: str, context: str) -> str | None:
        """`stored` sealed again with the current key, or None when it is already."""
        key_id, _ = parse(stored)
        if key_id == self.current:
            return None
        return self.seal(self.open(stored, context), context)


def is_sealed(text: object) -> bool:
    """True for an envelope (see the module's text)."""
    return isinstance(text, str) and text.startswith(PREFIX)


def key_id_of(stored: str) -> str:
    """The id of the key an envelope names."""
    return parse(stored)[0]


def parse(stored: str) -> tuple[str, bytes]:
    """The key id and the bytes of an envelope; `TamperedValue` when it is none."""
    if not is_sealed(stored):
        raise TamperedValue("a value of an encrypted task is not encrypted: written by "
                            "another client, or changed")
    key_id, _, body = stored[len(PREFIX):].partition(":")
    try:
        raw = base64.b64decode(body.encode("ascii"), validate=True)
    except (ValueError, binascii.Error, UnicodeEncodeError):
        raise TamperedValue(f"a value encrypted with the key {shown(key_id)} is not "
                            "readable: changed or cut") from None
    if len(raw) <= NONCE_BYTES:
        raise TamperedValue(f"a value encrypted with the key {shown(key_id)} is cut")
    return key_id, raw


@dataclass(frozen=True)
class StoredValue:
    """One value a sealed task keeps sealed, as stored: its field, the field's text, and
    the sealed value within it (the whole text, or one key of its JSON record)."""

    field: str
    text: str
    value: str
    record: dict[str, Any] | None = None
    inner: str | None = None

    def replaced(self, value: str) -> str:
        """The field's text with `value` in place of the sealed one."""
        if self.record is None or self.inner is None:
            return value
        return json.dumps({**self.record, self.inner: value})


#: the values a sealed task keeps sealed: its fields, and the key within those holding a
#: JSON record (a checkpoint's state, a progress message)
SEALED_VALUES = (("parameters", None), ("result", None), ("checkpoint", "state"),
                 ("progress", "message"))


def sealed_values(stored: Mapping[str, str | None]) -> Iterator[StoredValue]:
    """The sealed values among a task's fields `stored` (any other is left out)."""
    for field, inner in SEALED_VALUES:
        text = stored.get(field)
        if text is None:
            continue
        if inner is None:
            if is_sealed(text):
                yield StoredValue(field, text, text)
            continue
        try:
            record = json.loads(text)
        except ValueError:
            continue
        if isinstance(record, dict) and is_sealed(record.get(inner)):
            yield StoredValue(field, text, record[inner], record, inner)


def context(task_id: str, field: str) -> str:
    """What a sealed value is bound to: its task and its field."""
    return f"{task_id}\x00{field}"
