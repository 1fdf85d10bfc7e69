"""Inside a task process: the spare's body (get ready, wait for a task, run it) and
`TaskProcess`, which runs the one task and tells the worker's process how far it got.

A spare is forked ahead by `runners.ForkedRunner` (see `processes.Spare`). Once it has
its task, the outcome steps of the worker's hooks (run here, by `TaskHost.perform`) are
told to the worker's process on the notices pipe: first that the outcome is stored, then
that the process is done. If the worker dies, the task process renews its own lease and
records its own outcome (`heartbeat.watch_orphaned`).
"""

from __future__ import annotations

import logging
import os
import signal
from typing import TYPE_CHECKING, Any, Callable

from ..connection.clients import open_connection, private_client
from ..exceptions import REDIS_AWAY
from ..protocol.scripts import Reservation, Scripts
from .heartbeat import watch_orphaned
from .processes import EXIT_REDIS_UNAVAILABLE, DoneNotices
from .running import Origin, RunningTask

if TYPE_CHECKING:
    from ..models import Job
    from .contract import TaskHost


def run_spare(host: TaskHost, notices: DoneNotices | None,
              receive: Callable[[], dict[str, Any] | None],
              hand_over: Callable[[TaskProcess], None]) -> int:
    """The body of a spare: connect, watch for the worker's death, wait for a task
    (`receive`: None when the worker stops or replaces this spare), then run it as a
    `TaskProcess`, handed to `hand_over` first (the runner tells it the outcomes the
    hooks record). Returns the process's exit code."""
    open_connection(host.job_model.client())
    slot: list[RunningTask] = []
    watch_orphaned(lambda: slot[0] if slot else None,
                   lambda: Scripts(private_client(host.job_model.client()),
                                   host.job_model.keys()),
                   min(host.heartbeat_interval, host.liveness_interval),
                   host.liveness_timeout,
                   lambda task, status: host.log(
                       host.job_lost_message(task.job, task.queue, status), logging.ERROR))
    payload = receive()
    if payload is None:
        return 0
    reservation = Reservation.from_payload(payload)
    job = host.models.job_for(reservation)  # its model, checked by `Worker.prepare`
    slot.append(RunningTask(job, host.queue(reservation.queue), Origin.FORKED,
                            pid=os.getpid()))
    side = TaskProcess(host, notices, slot[0], on_recorded=slot.clear)
    hand_over(side)
    return side.run()


class TaskProcess:
    """Runs a task process's one task and tells the worker how far it got (outcome
    stored, then done)."""

    def __init__(self, host: TaskHost, notices: DoneNotices | None, task: RunningTask, *,
                 on_recorded: Callable[[], None] = lambda: None) -> None:
        self.host = host
        self.notices = notices
        self.task = task
        self.on_recorded = on_recorded
        self._told = False

    def recorded(self, job: Job) -> None:
        """The outcome is stored: tell the worker, and stop keeping the lease (the task may
        have put itself back in line: its lease is no longer this process's)."""
        if not self._told:
            self._told = True
            self.on_recorded()
            if self.notices is not None:
                self.notices.notify(DoneNotices.RECORDED)

    @staticmethod
    def spare_from_stop() -> None:
        """The outcome is stored: the SIGTERM of a cancel no longer cuts the hooks short."""
        signal.signal(signal.SIGTERM, signal.SIG_IGN)

    def run(self) -> int:
        """Run the task; exit code 0 once its outcome is stored."""
        host, task = self.host, self.task
        host.set_task_process_title(task)
        try:
            host.perform(task.job, task.queue)
            self.recorded(task.job)  # in case no outcome step said so (a skipped task)
            if self.notices is not None:
                self.notices.notify(DoneNotices.DONE)
        except REDIS_AWAY:
            host.log(f"[{task.queue_name}|{task.task_id}] could not record its outcome",
                     logging.ERROR, exc_info=True)
            return EXIT_REDIS_UNAVAILABLE
        return 0
