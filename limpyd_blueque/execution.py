"""The documented path of how a task runs (the runners a worker's `runner_class` returns),
which live in `limpyd_blueque.worker.runners` (this module only re-exports it)."""

from .worker.runners import ForkedRunner, InProcessRunner, TaskRunner

__all__ = ["ForkedRunner", "InProcessRunner", "TaskRunner"]
