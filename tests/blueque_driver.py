"""Drive the reference `blueque` client from another Python, one JSON line at a time.

Run by the Python of a virtualenv holding `blueque==1.0.1` (which needs redis-py < 6):

    python blueque_driver.py redis://127.0.0.1:6379/0

Each line on stdin is a request such as ``{"cmd": "enqueue", "queue": "q",
"parameters": "{}"}``; each reply is one line on stdout: ``{"ok": true, "value": ...}``,
or ``{"ok": false, "error": "TypeError: ..."}`` when the reference raised. Only the
reference package's own objects touch Redis here; this file adds no protocol logic.

Listeners follow the reference `Listener`: one per queue for this process, named
`<fqdn>_<pid>`, registered when created. `listen` takes at most one task, the way one
turn of `Listener.listen` does, and answers None instead of sleeping when none is
pending.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Callable

from blueque import Client
from blueque.listener import Listener
from blueque.redis_queue import RedisQueue
from blueque.task import Task

TASK_ATTRIBUTES = ("status", "queue", "parameters", "result", "error", "node", "pid",
                   "created", "updated")


class Driver:
    """The commands, each a method taking the request's fields as keyword arguments."""

    def __init__(self, url: str) -> None:
        self.client = Client(url)
        self.listeners: dict[str, Listener] = {}

    # -- helpers ----------------------------------------------------------------------
    def _task(self, task: Task | None) -> dict | None:
        """Every attribute of a task: the reference properties plus every stored field."""
        if task is None:
            return None
        data = {"id": task.id, **{name: getattr(task, name) for name in TASK_ATTRIBUTES}}
        data["fields"] = dict(task._attributes)  # eta, reclaimed_node... have no property
        return data

    def _listener(self, queue: str) -> Listener:
        if queue not in self.listeners:
            self.listeners[queue] = self.client.get_listener(queue)
        return self.listeners[queue]

    def _processor(self, task_id: str):
        return self.client.get_processor(self.client.get_task(task_id))

    # -- commands ---------------------------------------------------------------------
    def pid(self) -> int:
        return os.getpid()

    def reset(self) -> None:
        """Forget this process's listeners (the database was flushed)."""
        self.listeners.clear()

    def enqueue(self, queue: str, parameters: str) -> str:
        return self.client.get_queue(queue).enqueue(parameters)

    def schedule(self, queue: str, parameters: str, eta: float) -> str:
        return self.client.get_queue(queue).schedule(parameters, eta)

    def enqueue_due_tasks(self, queue: str) -> None:
        self.client.get_queue(queue).enqueue_due_tasks()

    def add_listener(self, queue: str) -> str:
        """A new reference `Listener` on `queue` (each one counts in `blueque_queues`)."""
        self.listeners[queue] = self.client.get_listener(queue)
        return self.listeners[queue]._name

    def remove_listener(self, queue: str, listener: str) -> int:
        self.listeners.pop(queue, None)
        return RedisQueue(queue, self.client._redis).remove_listener(listener)

    def listen(self, queue: str) -> dict:
        """One turn of `Listener.listen`: the reserved task, or None when none is pending."""
        listener = self._listener(queue)
        task_id = listener._queue.dequeue(listener._name)
        task = None if task_id is None else listener._task_factory(task_id)
        return {"listener": listener._name, "task": self._task(task)}

    def claim_orphan(self, queue: str) -> dict:
        listener = self._listener(queue)
        return {"listener": listener._name, "task": self._task(listener.claim_orphan())}

    def start(self, task_id: str, pid: int) -> None:
        self._processor(task_id).start(pid)

    def complete(self, task_id: str, result: str) -> None:
        self._processor(task_id).complete(result)

    def fail(self, task_id: str, error: str) -> None:
        self._processor(task_id).fail(error)

    def delete_task(self, queue: str, task_id: str) -> None:
        self.client.get_queue(queue).delete_task(self.client.get_task(task_id))

    def get_task(self, task_id: str) -> dict | None:
        return self._task(self.client.get_task(task_id))


def reply(request_line: str, driver: Driver) -> dict[str, Any]:
    try:
        request = json.loads(request_line)
        name = request.pop("cmd")
        if name.startswith("_") or not hasattr(driver, name):
            raise ValueError(f"unknown command {name!r}")
        command: Callable[..., Any] = getattr(driver, name)
        return {"ok": True, "value": command(**request)}
    except Exception as error:  # noqa: BLE001 - every failure goes back to the caller as data
        return {"ok": False, "error": f"{type(error).__name__}: {error}"}


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: blueque_driver.py REDIS_URL", file=sys.stderr)
        return 2
    driver = Driver(argv[1])
    for line in sys.stdin:
        if line.strip():
            sys.stdout.write(json.dumps(reply(line, driver)) + "\n")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
