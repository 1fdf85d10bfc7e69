"""The documented path of the worker, which lives in
`limpyd_blueque.worker.worker` (this module only re-exports it)."""

from .worker.worker import Worker

__all__ = ["Worker"]
