"""The documented path of the task statuses and their named sets, which lives in
`limpyd_blueque.protocol.statuses` (this module only re-exports it)."""

from .protocol.statuses import (
    ALL,
    FINISHED,
    FINISHED_BY_RUN,
    RETRYABLE,
    RUNNING,
    UNFINISHED,
    VALUES,
    WAITING,
    Status,
    in_order,
)

__all__ = ["ALL", "FINISHED", "FINISHED_BY_RUN", "RETRYABLE", "RUNNING", "UNFINISHED", "VALUES",
           "WAITING", "Status", "in_order"]
