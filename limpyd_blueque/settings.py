"""The documented path of the worker's settings table, which lives in
`limpyd_blueque.worker.settings` (this module only re-exports it)."""

from .worker.settings import LOGGER_NAME, SETTINGS, Setting, WorkerSettings

__all__ = ["LOGGER_NAME", "SETTINGS", "Setting", "WorkerSettings"]
