"""Task statuses, as stored in the `status` field of a Blueque task hash."""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum


class Status(str, Enum):
    """The life of a task: scheduled -> pending -> reserved -> started -> complete | failed.

    This library adds three: `canceled` (by `Job.cancel`: a waiting task taken out of
    line, or a running one stopped), `buried` (put aside by its holder until kicked back,
    see `Job.bury`) and `expired` (not started within its ttl). Other Blueque clients
    never write them, and never find such a task in a list they pop.
    """

    SCHEDULED = "scheduled"
    PENDING = "pending"
    RESERVED = "reserved"
    STARTED = "started"
    COMPLETE = "complete"
    FAILED = "failed"
    CANCELED = "canceled"
    BURIED = "buried"
    EXPIRED = "expired"

    def __str__(self) -> str:
        return self.value


#: Statuses of a task that a listener holds.
RUNNING = frozenset({Status.RESERVED, Status.STARTED})
#: Statuses of a task waiting for its turn.
WAITING = frozenset({Status.SCHEDULED, Status.PENDING})
#: Statuses after which a task does not run again by itself (it may be deleted, or put
#: back in line by a requeue).
FINISHED = frozenset({Status.COMPLETE, Status.FAILED, Status.CANCELED, Status.EXPIRED})
#: Statuses a task's run ends in, filed by its holder when the task's code returned or
#: failed for good (a canceled or expired task was finished from outside its run).
FINISHED_BY_RUN = frozenset({Status.COMPLETE, Status.FAILED})
#: Statuses a requeue puts back in line as a fresh start, its attempts no longer counted
#: (the `retry` step; a held task is put back by its holder instead).
RETRYABLE = frozenset({Status.FAILED, Status.CANCELED, Status.EXPIRED, Status.BURIED})
ALL = tuple(Status)
#: The status values, to check a stored `status` field without raising.
VALUES = frozenset(status.value for status in Status)


def in_order(statuses: Iterable[Status]) -> tuple[Status, ...]:
    """`statuses` in the order of a task's life (`Status`'s order), for what lists them."""
    wanted = frozenset(statuses)
    return tuple(status for status in Status if status in wanted)
