"""Task statuses, as stored in the `status` field of a Blueque task hash."""

from __future__ import annotations

from collections.abc import Iterable
from enum import Enum


class Status(str, Enum):
    """The life of a task: scheduled -> pending -> reserved -> started -> complete | failed.

    This library adds four: `waiting` (for the tasks it was enqueued `after` to finish:
    in no line until then, see `Queue.enqueue`), `canceled` (by `Job.cancel`: a waiting
    task taken out of line, or a running one stopped), `buried` (put aside by its holder
    until kicked back, see `Job.bury`) and `expired` (not started within its ttl).
    Other Blueque clients never write them, and never find such a task in a list they
    pop.
    """

    WAITING = "waiting"
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
#: Statuses of a task in line, waiting for its turn (a task of status `waiting` waits for
#: other tasks first: it is in no line yet).
WAITING = frozenset({Status.SCHEDULED, Status.PENDING})
#: Statuses after which a task does not run again by itself (it may be deleted, or put
#: back in line by a requeue).
FINISHED = frozenset({Status.COMPLETE, Status.FAILED, Status.CANCELED, Status.EXPIRED})
#: Statuses a task's run ends in, filed by its holder when the task's code returned or
#: failed for good (a canceled or expired task was finished from outside its run).
#: Statuses of a task that may still run by itself (none of `FINISHED`, nor `buried`).
UNFINISHED = frozenset({Status.WAITING, Status.SCHEDULED, Status.PENDING, Status.RESERVED,
                        Status.STARTED})
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
