"""Inside a task process: the spare's body (get ready, wait for a task, run it) and
`TaskProcess`, which runs the one task and tells the worker's process how far it got.

A spare is forked ahead by `runners.ForkedRunner` (see `processes.Spare`); it opens no
Redis connection. Once it has its task, the worker's hooks run here (`TaskHost.perform`),
and what they write (the outcome, its `Error`, the progress and checkpoints of the task)
the worker's process writes for them (see `relay`); then the notices pipe tells the
worker that the outcome is stored, and that the process is done. If the worker dies, the
task process renews its own lease (`heartbeat.watch_orphaned`) and records its own
outcome, on a connection of its own; so does the task's own code that uses Redis
(redis-py connects at its first command).
"""

from __future__ import annotations

import logging
import os
import signal
from typing import TYPE_CHECKING, Callable

from ..connection.clients import private_client
from ..exceptions import REDIS_AWAY
from ..protocol.bounds import Bounds
from ..protocol.scripts import Reservation, Scripts
from .heartbeat import watch_orphaned
from .processes import EXIT_REDIS_UNAVAILABLE, Channel, DoneNotices
from .relay import WorkerLink, relay_through
from .running import Origin, RunningTask

if TYPE_CHECKING:
    from ..models import Job
    from .contract import TaskHost
    from .outcomes import OutcomeRecorder


def run_spare(host: TaskHost, notices: DoneNotices | None, channel: Channel,
              hand_over: Callable[[TaskProcess], None]) -> int:
    """The body of a spare: watch for the worker's death, wait for a task on `channel`
    (its end closed when the worker stops or replaces this spare), then run it as a
    `TaskProcess`, handed to `hand_over` first (the runner tells it the outcomes the
    hooks record), the worker writing what it writes (`relay`). Returns the process's
    exit code."""
    parent = os.getppid()
    slot: list[RunningTask] = []
    watch_orphaned(lambda: slot[0] if slot else None,
                   lambda: Scripts(private_client(host.job_model.client()),
                                   host.job_model.keys()),
                   min(host.heartbeat_interval, host.liveness_interval),
                   host.liveness_timeout,
                   lambda task, status: host.log(
                       host.job_lost_message(task.job, task.queue, status), logging.ERROR))
    # a stop told before the task runs is noted, and told to the task once it runs
    early: list[int] = []
    signal.signal(signal.SIGUSR1, lambda signum, frame: early.append(signum))
    payload = channel.receive()
    if payload is None:
        return 0
    bounds = Bounds.from_payload(payload.pop("bounds", None))
    queue_terms = payload.pop("queue_terms", None) or {}
    reservation = Reservation.from_payload(payload)
    host.controls.terms = {reservation.queue: queue_terms}  # as read when it was handed
    job = host.models.job_for(reservation)  # its model, checked by `Worker.prepare`
    slot.append(RunningTask(job, host.queue(reservation.queue), Origin.FORKED,
                            pid=os.getpid()))
    outcomes = (relay_through(host, job, WorkerLink(channel, notices, parent))
                if notices is not None else host.outcomes)
    side = TaskProcess(host, notices, slot[0], outcomes, on_recorded=slot.clear,
                       bounds=bounds, stop_told=early)
    hand_over(side)
    return side.run()


class TaskProcess:
    """Runs a task process's one task and tells the worker how far it got (outcome
    stored, then done)."""

    def __init__(self, host: TaskHost, notices: DoneNotices | None, task: RunningTask,
                 outcomes: OutcomeRecorder, *,
                 on_recorded: Callable[[], None] = lambda: None,
                 bounds: Bounds | None = None, stop_told: list[int] | None = None) -> None:
        self.host = host
        #: the CPU and soft time bounds its task's code runs in (`bounds.holding`)
        self.bounds = bounds or Bounds()
        #: the stops its worker told before `run` (not empty: tell the task at once)
        self.stop_told = stop_told if stop_told is not None else []
        self.notices = notices
        self.task = task
        #: how the hooks record this task's outcomes here: through the worker (`relay`)
        self.outcomes = outcomes
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

    def stop_requested(self, signum: int, frame: object) -> None:
        """Its worker stops and hands the task over: tell the task, in its own thread (a
        failing `on_stop_requested` is logged: it never breaks what runs)."""
        task = self.task
        try:
            task.job.note_stop_requested(task.queue)
        except Exception:  # noqa: BLE001
            self.host.log(f"[{task.queue_name}|{task.task_id}] on_stop_requested failed",
                          logging.ERROR, exc_info=True)

    def run(self) -> int:
        """Run the task; exit code 0 once its outcome is stored."""
        host, task = self.host, self.task
        host.set_task_process_title(task)
        signal.signal(signal.SIGUSR1, self.stop_requested)
        if self.stop_told:
            self.stop_requested(signal.SIGUSR1, None)
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
