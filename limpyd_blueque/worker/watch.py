"""What a worker learns of its running tasks at each beat: a cancel asked, progress that
moved, a task that stalled.

The lease keeper's beat (one script for all, see `scripts.Upkeep.renew`) reads which
running tasks of the worker's queues were asked to cancel (one set per queue), and the
`progress` of the tasks `to_read` names: only tasks with a stall timeout, each every
tenth of that timeout (at least every `liveness_interval`), so that what a beat costs
Redis does not grow with the tasks a worker runs. `TaskWatch.seen` applies it, in the
keeper's thread. A cancel is posted to the worker's thread (which stops the task's
process, see `runners.TaskRunner.apply`) and told to the job at once (a task run in
the worker's own process stops at its next `set_progress`). A task whose progress stayed
still for its stall timeout is flagged in Redis and handed to the worker's `job_stalled`
hook, here, in the keeper's thread: the worker's own thread may be running that very task.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Callable

from ..models.progress import Progress
from ..protocol.statuses import RUNNING
from .running import Event, RunningTask, RunningTasks, TaskState

if TYPE_CHECKING:
    from ..protocol.scripts import Scripts
    from .contract import StallHooks

#: reads of a task's progress within its stall timeout: a stall is seen at most this
#: fraction of the timeout late
READS_PER_STALL_TIMEOUT = 10


class TaskWatch:
    """Applies what the beats learn about the running tasks of one worker."""

    def __init__(self, tasks: RunningTasks, hooks: StallHooks,
                 scripts: Callable[[], Scripts]) -> None:
        self.tasks = tasks
        self.hooks = hooks
        self.scripts = scripts

    def to_read(self, running: list[RunningTask], now: float | None = None) -> list[str]:
        """The ids of the running tasks whose progress the next beat reads: those with a
        stall timeout, each once a tenth of that timeout went by since its last read."""
        now = time.time() if now is None else now
        due = []
        for task in running:
            timeout = self.stall_timeout(task)
            if (timeout and task.state is TaskState.RUNNING
                    and now - task.progress_read_at >= timeout / READS_PER_STALL_TIMEOUT):
                task.progress_read_at = now
                due.append(task.task_id)
        return due

    def seen(self, canceling: frozenset[str], progress: dict[str, str],
             now: float | None = None) -> None:
        """Apply a beat's reading: the ids of the tasks whose cancel was asked, and the
        `progress` of the tasks read, by id."""
        now = time.time() if now is None else now
        for task in self.tasks.snapshot():
            if task.state not in (TaskState.RUNNING, TaskState.RELEASING):
                continue
            try:
                if task.task_id in canceling:
                    task.job.note_cancel_requested()
                    self.tasks.post(task, Event.CANCEL)
                elif task.task_id in progress:
                    self.moved(task, Progress.from_text(progress[task.task_id]))
                    self.check_stall(task, now)
            except Exception:  # noqa: BLE001 - one task's trouble never stops the beat
                self.hooks.log(f"[{task.queue_name}|{task.task_id}] could not apply what the "
                               "beat read of it", logging.ERROR, exc_info=True)

    @staticmethod
    def moved(task: RunningTask, progress: Progress | None) -> None:
        """Note when the task's progress last moved (in this attempt)."""
        if progress is None or progress.attempt != task.attempt:
            return
        moved = progress.moved_at.timestamp()
        if moved > task.moved_at:
            task.moved_at = moved
            if task.stalled_since is not None and moved > task.stalled_since:
                task.stalled_since = None  # the report step cleared its flag in Redis

    def stall_timeout(self, task: RunningTask) -> float | None:
        """The task's own (or its queue's) stall timeout, else the worker's (None: off)."""
        return task.reservation.stall_timeout or self.hooks.stall_timeout

    def check_stall(self, task: RunningTask, now: float) -> None:
        """Flag the task stalled when its progress stayed still for its stall timeout."""
        timeout = self.stall_timeout(task)
        if not timeout or task.stalled_since is not None or now - task.moved_at < timeout:
            return
        task.stalled_since = now
        outcome = self.scripts().reports.stall(
            task.queue_name, task.task_id, task.reservation.node or self.hooks.id,
            task.attempt, now)
        if outcome.done:
            self.stalled(task)

    def stalled(self, task: RunningTask) -> None:
        """Call `job_stalled`; if the hook let the task go (released, failed, buried...),
        its process is stopped as for a lost lease."""
        self.hooks.job_stalled(task.job, task.queue)
        data = task.job.data()
        if data.status not in RUNNING or data.attempt != task.attempt:
            self.tasks.post(task, Event.LEASE_LOST, data.status or "")
