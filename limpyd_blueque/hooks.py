"""The documented path of the worker's hooks, now methods of `Worker` itself (one
class: the loop, the hooks and their `*_message` log lines, in
`limpyd_blueque.worker.worker`): `WorkerHooks`, the class that held them, is `Worker`
(this module only re-exports it)."""

from .worker.worker import Worker

WorkerHooks = Worker

__all__ = ["WorkerHooks"]
