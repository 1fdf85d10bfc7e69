"""Task statuses, as stored in the `status` field of a Blueque task hash."""

from __future__ import annotations

from enum import Enum


class Status(str, Enum):
    """The life of a task: scheduled -> pending -> reserved -> started -> complete | failed."""

    SCHEDULED = "scheduled"
    PENDING = "pending"
    RESERVED = "reserved"
    STARTED = "started"
    COMPLETE = "complete"
    FAILED = "failed"

    def __str__(self) -> str:
        return self.value


#: Statuses of a task that a listener holds.
RUNNING = frozenset({Status.RESERVED, Status.STARTED})
#: Statuses after which a task never changes again (it may only be deleted).
FINISHED = frozenset({Status.COMPLETE, Status.FAILED})
ALL = tuple(Status)
#: The status values, to check a stored `status` field without raising.
VALUES = frozenset(status.value for status in Status)
