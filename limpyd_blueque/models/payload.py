"""How one task's stored values become values and back: its parameters, its result, its
checkpoint's state and its progress message, through its codec (see protocol/codecs.py)
and, when the task is sealed, its encryption (see protocol/encryption.py).

`TaskValues` is made for one task from what the task says of itself (its `codec` and
`encrypted` fields) and the keys of the process reading it; `Job` holds one per task
and delegates its `payload`, `result_value`, checkpoints and progress to it.
"""

from __future__ import annotations

from typing import Any

from ..protocol.codecs import DEFAULT_CODEC, Codec, codec_named
from ..protocol.encryption import Keyring, UnknownEncryptionKey, context, key_id_of


class TaskValues:
    """The codec and the encryption of one task's values."""

    def __init__(self, task_id: str, codec: str | None, encrypted: str | None,
                 default_codec: str = DEFAULT_CODEC, keyring: Keyring | None = None) -> None:
        self.task_id = task_id
        #: the codec it was written with, else the reader's default (`UnknownCodec`
        #: names one not known here)
        self.codec: Codec = codec_named(codec or default_codec)
        #: True when its values are encrypted
        self.sealed = bool(encrypted)
        self.keyring = keyring

    @property
    def plain(self) -> bool:
        """True for a task of the default codec written clear (Blueque's wire format)."""
        return self.codec.name == DEFAULT_CODEC and not self.sealed

    def open(self, text: str | None, field: str) -> str | None:
        """The clear text of the stored value of `field` (parameters, result, checkpoint,
        progress): as stored for a task written clear; `UnknownEncryptionKey` or
        `TamperedValue` for a sealed one this process cannot open."""
        if text is None or not self.sealed:
            return text
        return self._keys(field, text).open(text, context(self.task_id, field))

    def seal(self, text: str, field: str) -> str:
        """`text` as the task stores it in `field`: sealed when its values are."""
        if not self.sealed:
            return text
        return self._keys(field).seal(text, context(self.task_id, field))

    def decode(self, text: str | None, field: str) -> Any:
        """The value stored in `field`, opened and decoded with its codec (None: none)."""
        return self.codec.decode(self.open(text, field), field)

    def encode(self, value: Any, field: str) -> str:
        """What the task stores in `field` for `value`: encoded with its codec, sealed when
        its values are (`InvalidParameters` when its codec cannot encode it)."""
        return self.seal(self.codec.encode(value, field), field)

    def _keys(self, field: str, text: str | None = None) -> Keyring:
        if self.keyring is None:
            named = f"with the key {key_id_of(text)!r}" if text is not None else "sealed"
            raise UnknownEncryptionKey(f"the task's {field} are {named}, and this process "
                                       "was given no encryption key")
        return self.keyring
