"""A limpyd index whose storage is the Blueque structures themselves.

Blueque already files every task id by queue and status: the pending and complete
lists, the scheduled sorted set, the started set... plus the lease sorted set this
library keeps for reserved tasks. Filtering `Job.collection(queue=..., status=...)`
reads those structures (checking each id against its hash) into a temporary set, so
no index key is ever written, none can drift from the truth, and tasks written by
another Blueque client are found like ours.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any, ClassVar, Protocol, TypeVar, cast

from limpyd.indexes import BaseIndex

from ..connection import shims
from ..protocol.keys import KeySpace
from ..protocol.statuses import ALL, VALUES, Status

T = TypeVar("T")


def status_sources(keys: KeySpace, queue: str, status: str) -> list[tuple[str, str, str]]:
    """The `(key, kind, status)` sources holding the tasks of `queue` with `status`.

    Read from `keys.STATUS_STRUCTURES`: pending tasks from the Blueque list and the
    prioritized sorted set, reserved tasks through the lease set, started ones through
    the started set. `ValueError` for a status outside the protocol.
    """
    return [(key, kind, Status(status).value) for key, kind in keys.structures_of(queue, status)]


class TaskModel(Protocol):
    """What `WireIndex` needs of the model it indexes (`Job`)."""

    def queue_names(self) -> list[str]: ...

    def materialize(self, pairs: Iterable[tuple[str, str]]) -> str: ...


class WireIndex(BaseIndex):
    """Filter tasks on `queue` or `status` (with `__eq` or `__in`) from Blueque keys."""

    handled_suffixes: ClassVar[set[str | None]] = {None, "eq", "in"}
    supported_key_types: ClassVar[set[str]] = {"set"}

    def _values(self, suffix: str | None, value: Any) -> list[str]:
        if suffix == "in":
            return [str(v) for v in value]
        return [str(value)]

    def get_filtered_keys(self, suffix: str | None, *args: Any,
                          **kwargs: Any) -> list[tuple[str, str, bool]]:
        shims.check_accepted_key_types(self, kwargs.get("accepted_key_types"))
        values = self._values(suffix, args[-1])
        model = cast(TaskModel, self.model)
        if self.field.name == "queue":
            pairs = [(queue, status.value) for queue in values for status in ALL]
        else:
            statuses = [Status(value).value for value in values if value in VALUES]
            pairs = [(queue, status) for queue in model.queue_names() for status in statuses]
        return [(model.materialize(pairs), "set", True)]

    # The protocol steps maintain the Blueque structures: nothing to store here.
    def add(self, pk: Any, *args: Any, **kwargs: Any) -> None:
        pass

    def remove(self, pk: Any, *args: Any, **kwargs: Any) -> None:
        pass

    def get_all_storage_keys(self) -> set[str]:
        return set()

    def clear(self, chunk_size: int = 1000, aggressive: bool = False) -> None:
        pass

    def rebuild(self, chunk_size: int = 1000, aggressive_clear: bool = False) -> None:
        pass


def temporary_key(keys: KeySpace) -> str:
    """A fresh temporary key name for one collection filter."""
    return keys.temporary(uuid.uuid4().hex)


def flatten(sources: Iterable[list[T]]) -> list[T]:
    """The items of every group, in order."""
    return [source for group in sources for source in group]
