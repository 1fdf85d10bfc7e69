"""Recording a task's outcome: the fenced steps, retried while Redis is away, and the
stored `Error`. The worker's hooks (`job_success`, `job_error`) decide; this part writes.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Callable

from redis.exceptions import ResponseError

from ..exceptions import REDIS_AWAY
from ..protocol.options import DEFAULT_ERROR_TTL
from ..protocol.statuses import Status
from ..protocol.values import encode
from ..upkeep.retention import error_ttl_for

if TYPE_CHECKING:
    from ..models import Error, Job, Queue

logger = logging.getLogger(__name__)


class OutcomeRecorder:
    """Writes outcomes for one worker (`listener_id`), each exactly once."""

    def __init__(self, listener_id: str, *, retry_timeout: float,
                 log: Callable[..., None] | None = None,
                 error_ttl: float = DEFAULT_ERROR_TTL) -> None:
        self.listener_id = listener_id
        self.error_ttl = error_ttl
        self.retry_timeout = retry_timeout
        self.log = log or (lambda message, level=logging.INFO: logger.log(level, message))

    def retrying(self, step: Callable[[], Any]) -> Any:
        """Run `step`, retrying for `retry_timeout` seconds while Redis is away or full, so
        that a long task finished during a Redis restart (or while Redis is full) is not
        run again."""
        deadline = time.monotonic() + self.retry_timeout
        while True:
            try:
                return step()
            except REDIS_AWAY as error:
                if time.monotonic() > deadline:
                    raise
                self.log(f"{error}; retrying", logging.WARNING)
                time.sleep(0.5)

    def record(self, job: Job, step: Callable[[], bool], status: str) -> bool:
        """Run a fenced outcome step, retrying while Redis cannot be reached.

        True when this attempt's outcome is recorded, including when an earlier try
        reached Redis but its reply was lost. False when the task is no longer ours.
        """
        tries: list[int] = []

        def once() -> bool:
            tries.append(1)
            if step():
                return True
            if len(tries) == 1:
                return False
            data = job.data()  # our earlier try may have landed with its reply lost
            return data.status == status and data.attempt == attempt_of(job)

        return bool(self.retrying(once))

    def complete(self, job: Job, text: str) -> bool:
        """Store the result `text`: True when done, False when the task is not ours."""
        return self.record(job, lambda: job.complete(
            text, listener_id=self.holder(job), attempt=attempt_of(job)), Status.COMPLETE)

    def fail(self, job: Job, text: str) -> bool:
        """Store the error `text` and fail the task: see `complete`."""
        return self.record(job, lambda: job.fail(
            text, listener_id=self.holder(job), attempt=attempt_of(job)), Status.FAILED)

    def requeue(self, job: Job, text: str, *, delay: float, priority_delta: int) -> bool:
        """Store the error `text` and put the task back in line, `delay` seconds from now."""
        status = Status.SCHEDULED if delay else Status.PENDING
        return self.record(job, lambda: job.requeue(
            listener_id=self.holder(job), attempt=attempt_of(job), error=text, delay=delay,
            priority_delta=priority_delta or None), status)

    def cancel(self, job: Job) -> bool:
        """File the task, stopped on its cancel request, as canceled: see `complete`."""
        return self.record(job, lambda: job.record_canceled(
            "Canceled: stopped at its owner's request", listener_id=self.holder(job),
            attempt=attempt_of(job)), Status.CANCELED)

    def delay(self, job: Job, delay: float) -> bool:
        """Put the task back to run `delay` seconds from now, this attempt not counted as a
        failure (the task asked for it)."""
        status = Status.SCHEDULED if delay else Status.PENDING
        return self.record(job, lambda: job.requeue(
            listener_id=self.holder(job), attempt=attempt_of(job), delay=delay,
            uncounted=True), status)

    def holder(self, job: Job) -> str:
        """The listener the steps act for: the task's node when known (an adopted task is
        still held by the worker that died), else this worker."""
        return (job.task.node if job.task is not None else None) or self.listener_id

    def store_error(self, error_model: type[Error], job: Job, queue: Queue,
                    exception: BaseException, trace: str | None, **fields: Any) -> None:
        """Store an `Error`, kept for the task's, else its queue's, else this worker's
        `error_ttl`. A Redis away or full is logged: the failure itself is on the task."""
        try:
            settings: dict[str, float] = queue.settings()
        except (ValueError, ResponseError):  # settings another client broke: unset
            settings = {}
        ttl = error_ttl_for(job, settings, self.error_ttl)
        try:
            error_model.add_error(queue.pk.get(), job, exception, trace=trace, ttl=ttl,
                                  **fields)
        except REDIS_AWAY as error:
            self.log(f"[{queue.pk.get()}|{job.task_id}] its Error record was not stored: "
                     f"{error}", logging.ERROR)


def attempt_of(job: Job) -> int | None:
    """The attempt holding the task, read from its reservation (None when unknown)."""
    return (job.task.attempt or None) if job.task is not None else None


def counted_attempts(job: Job) -> int | None:
    """The attempts of the task that count toward its retries, this one included (None
    when unknown): see `Reservation.counted_attempts`."""
    return (job.task.counted_attempts or None) if job.task is not None else None


def error_text(exception: BaseException) -> str:
    """What the task's `error` field holds for `exception`."""
    return encode(f"{type(exception).__name__}: {exception}", "error")
