"""The documented path of the worker, which lives in
`limpyd_blueque.worker.worker` (this module only re-exports it)."""

from .exceptions import TaskKilled, WorkerInterrupted
from .worker.worker import Worker

__all__ = ["TaskKilled", "Worker", "WorkerInterrupted"]
