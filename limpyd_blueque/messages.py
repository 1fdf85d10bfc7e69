"""The log lines of a worker, each a method a `Worker` subclass may override."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from .settings import WorkerSettings
from .values import printable

if TYPE_CHECKING:
    from .execution import TaskRunner
    from .models import Job, Queue


class WorkerMessages(WorkerSettings):
    """What a worker logs; `hooks.WorkerHooks` adds the hooks, `Worker` the loop."""

    runner: TaskRunner
    num_loops: int

    @property
    def elapsed(self) -> timedelta | None:
        raise NotImplementedError

    @staticmethod
    def _tag(job: Job, queue: Queue) -> str:
        """`[queue|task id|identifier]`, escaped (`values.printable`): the id and the
        identifier come from Redis, where any client may have written anything."""
        identifier = job.known.get("identifier")
        shown = f"{job.task_id}{'|' + identifier if identifier else ''}"
        return f"[{printable(queue.pk.get())}|{printable(shown)}]"

    def run_started_message(self) -> str:
        return f"started on queues {','.join(self.queues)} ({self.runner.describe()})"

    def run_ended_message(self) -> str:
        return f"terminated after {self.num_loops} task(s) in {self.elapsed}"

    def job_started_message(self, job: Job, queue: Queue) -> str:
        attempt = printable(job.known.get("attempt", "?"))
        return f"{self._tag(job, queue)} started (attempt {attempt})"

    def job_success_message(self, job: Job, queue: Queue, result: Any) -> str:
        return f"{self._tag(job, queue)} complete"

    def job_error_message(self, job: Job, queue: Queue, exception: BaseException,
                          trace: str | None = None) -> str:
        return (f"{self._tag(job, queue)} failed: {type(exception).__name__}: "
                f"{printable(exception)}")

    def job_requeued_message(self, job: Job, queue: Queue) -> str:
        return f"{self._tag(job, queue)} requeued in {self.requeue_delay_delta}s"

    def job_delayed_message(self, job: Job, queue: Queue) -> str:
        return f"{self._tag(job, queue)} delayed by {job.delay_requested:g}s at its request"

    def job_skipped_message(self, job: Job, queue: Queue) -> str:
        return f"{self._tag(job, queue)} skipped: no longer held by this worker"

    def task_recovered_message(self, task_id: str, outcome: str | None) -> str:
        where = {"pending": "back to pending", "canceled": "canceled, as asked"}.get(
            outcome or "", "failed: no attempts left")
        return f"[{printable(task_id)}] its holder is gone: {where}"

    def job_lost_message(self, job: Job, queue: Queue, status: str) -> str:
        return (f"{self._tag(job, queue)} lease lost (task now {printable(status or 'gone')}): "
                "stopping its process")

    def job_canceled_message(self, job: Job, queue: Queue) -> str:
        return f"{self._tag(job, queue)} canceled at its owner's request"

    def job_cancel_asked_message(self, job: Job, queue: Queue) -> str:
        return f"{self._tag(job, queue)} cancel asked: stopping its process"

    def job_stalled_message(self, job: Job, queue: Queue) -> str:
        return f"{self._tag(job, queue)} stalled: its progress did not move in time"
