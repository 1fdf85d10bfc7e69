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
from typing import Iterable

from limpyd.indexes import BaseIndex

from .statuses import ALL, Status


def status_sources(keys, queue: str, status: str) -> list[tuple[str, str, str]]:
    """The `(key, kind, status)` sources holding the tasks of `queue` with `status`."""
    status = Status(status)
    key, kind = {
        Status.SCHEDULED: (keys.scheduled(queue), "zset"),
        Status.PENDING: (keys.pending(queue), "list"),
        Status.RESERVED: (keys.leases(queue), "zset"),
        Status.STARTED: (keys.started(queue), "started"),
        Status.COMPLETE: (keys.complete(queue), "list"),
        Status.FAILED: (keys.failed(queue), "list"),
    }[status]
    return [(key, kind, status.value)]


class WireIndex(BaseIndex):
    """Filter tasks on `queue` or `status` (with `__eq` or `__in`) from Blueque keys."""

    handled_suffixes = {None, "eq", "in"}
    supported_key_types = {"set"}

    def _values(self, suffix: str | None, value: object) -> list[str]:
        if suffix == "in":
            return [str(v) for v in value]  # type: ignore[union-attr]
        return [str(value)]

    def get_filtered_keys(self, suffix, *args, **kwargs):
        self._check_key_accepted_key_types(kwargs.get("accepted_key_types"))
        values = self._values(suffix, args[-1])
        model = self.field._model
        if self.field.name == "queue":
            pairs = [(queue, status.value) for queue in values for status in ALL]
        else:
            statuses = [Status(value).value for value in values if value in Status._value2member_map_]
            pairs = [(queue, status) for queue in model.queue_names() for status in statuses]
        return [(model.materialize(pairs), "set", True)]

    # The protocol steps maintain the Blueque structures: nothing to store here.
    def add(self, pk, *args, **kwargs):
        pass

    def remove(self, pk, *args, **kwargs):
        pass

    def get_all_storage_keys(self):
        return set()

    def clear(self, chunk_size=1000, aggressive=False):
        pass

    def rebuild(self, chunk_size=1000, aggressive_clear=False):
        pass


def temporary_key(keys) -> str:
    return keys.temporary(uuid.uuid4().hex)


def flatten(sources: Iterable[list]) -> list:
    return [source for group in sources for source in group]
