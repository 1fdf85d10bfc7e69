"""The documented path of the worker script's configuration (`WorkerConfig`), which lives in
`limpyd_blueque.cli.worker_script` (this module only re-exports it)."""

from .cli.worker_script import LOG_FORMAT, WorkerConfig, main

__all__ = ["LOG_FORMAT", "WorkerConfig", "main"]
