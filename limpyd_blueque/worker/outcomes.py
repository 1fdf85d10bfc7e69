"""Recording a task's outcome: the fenced steps, retried while Redis is away, and the
stored `Error`. The worker's hooks (`job_success`, `job_error`) decide (an `OutcomeStep`);
this part writes. It runs in the worker's process; a task process has its outcomes
written there too (`relay.RelayedOutcomes`), and writes them itself only when its worker
is gone.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Callable

from redis.exceptions import ResponseError

from ..exceptions import REDIS_AWAY, TaskNotFound
from ..protocol.options import DEFAULT_ERROR_TTL
from ..protocol.statistics import Tally
from ..protocol.statuses import WAITING, Status
from ..protocol.values import Encoded, encode
from ..upkeep.retention import error_ttl_for

if TYPE_CHECKING:
    from ..models import Error, Job, Queue

logger = logging.getLogger(__name__)

#: the outcomes that put the task back in line (another attempt may take it at once)
PUT_BACK = ("requeue", "delay", "release")


@dataclass(frozen=True)
class OutcomeStep:
    """What the hooks decided for an attempt: `kind` (complete, fail, requeue, cancel,
    delay, release), with the result or error `text`, the `delay` before the task runs again and
    the change of its priority, and the peak memory of the process that ran the attempt
    (`peak_rss`, bytes; None: not measured), noted with it. Plain values, so that a task
    process can send it to its worker (`to_message`, `from_message`)."""

    kind: str
    text: str = ""
    delay: float = 0.0
    priority_delta: int = 0
    peak_rss: int | None = None

    @property
    def status(self) -> str:
        """The status the task has once its step is done."""
        if self.kind in PUT_BACK:
            return Status.SCHEDULED if self.delay else Status.PENDING
        return {"complete": Status.COMPLETE, "fail": Status.FAILED,
                "cancel": Status.CANCELED}[self.kind]

    def to_payload(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_payload(cls, message: dict[str, Any]) -> OutcomeStep:
        peak = message.get("peak_rss")
        return cls(str(message["kind"]), str(message.get("text", "")),
                   float(message.get("delay", 0.0)), int(message.get("priority_delta", 0)),
                   int(peak) if isinstance(peak, int) and peak > 0 else None)


class OutcomeRecorder:
    """Writes outcomes for one worker (`listener_id`), each exactly once."""

    def __init__(self, listener_id: str, *, retry_timeout: float,
                 log: Callable[..., None] | None = None,
                 error_ttl: float = DEFAULT_ERROR_TTL, tally: Tally | None = None) -> None:
        self.listener_id = listener_id
        #: where the worker counts the steps it writes (None: each step counts itself)
        self.tally = tally
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
            return self.landed(job, step, status, retry=len(tries) > 1)

        return bool(self.retrying(once))

    def landed(self, job: Job, step: Callable[[], bool], status: str, *, retry: bool) -> bool:
        """One try of a fenced outcome step (`RedisUnavailable`, `RedisFull` when Redis
        cannot take it): True when recorded. A `retry` that is refused looks whether its
        earlier try landed, its reply lost (the task has `status`, in this attempt)."""
        if step():
            return True
        if not retry:
            return False
        data = job.data()
        return data.status == status and data.attempt == attempt_of(job)

    def write(self, job: Job, outcome: OutcomeStep) -> bool:
        """Record `outcome` (see `record`): True when done, False when the task is not
        ours."""
        return self.record(job, lambda: self.step(job, outcome), outcome.status)

    def try_once(self, job: Job, outcome: OutcomeStep, *, retry: bool) -> bool:
        """One try of `outcome`'s step (see `landed`), for a caller that retries later
        itself rather than wait here."""
        return self.landed(job, lambda: self.step(job, outcome), outcome.status, retry=retry)

    def step(self, job: Job, outcome: OutcomeStep) -> bool:
        """The fenced step of `outcome`, run once: True when done."""
        holder, attempt, kind = self.holder(job), attempt_of(job), outcome.kind
        peak = outcome.peak_rss
        text = Encoded(outcome.text)  # (encoded by the hooks already, with its codec)
        if kind == "complete":
            return job.complete(text, listener_id=holder, attempt=attempt,
                                tally=self.tally, peak_rss=peak)
        if kind == "fail":
            return job.fail(text, listener_id=holder, attempt=attempt,
                            tally=self.tally, peak_rss=peak)
        if kind == "cancel":
            return job.record_canceled("Canceled: stopped at its owner's request",
                                       listener_id=holder, attempt=attempt, tally=self.tally,
                                       peak_rss=peak)
        if kind == "requeue":
            return job.requeue(listener_id=holder, attempt=attempt, error=outcome.text,
                               delay=outcome.delay,
                               priority_delta=outcome.priority_delta or None, peak_rss=peak)
        if kind == "release":
            return job.requeue(listener_id=holder, attempt=attempt, front=True, uncounted=True,
                               peak_rss=peak)
        return job.requeue(listener_id=holder, attempt=attempt, delay=outcome.delay,
                           uncounted=True, peak_rss=peak)

    def recognized(self, job: Job, outcome: OutcomeStep) -> bool:
        """After this process's own try of `outcome` was refused, when another process may
        have written it for this attempt first (its worker, which then died before saying
        so): True when this attempt's outcome is in Redis. The task is then in this
        attempt with the status of `outcome` (or canceled, its cancel asked first: `settled`
        says so), or, put back in line by it, already taken by a later attempt."""
        try:
            data = job.data()
        except TaskNotFound:
            return False
        attempt = attempt_of(job)
        if data.attempt != attempt:
            return outcome.kind in PUT_BACK and attempt is not None and data.attempt > attempt
        if data.status == Status.CANCELED and outcome.kind != "cancel":
            job.settled = "canceled"
            return True
        put_back = WAITING if outcome.kind in PUT_BACK else frozenset()
        return data.status == outcome.status or data.status in put_back

    def complete(self, job: Job, text: str) -> bool:
        """Store the result `text`: True when done, False when the task is not ours."""
        return self.write(job, OutcomeStep("complete", text, peak_rss=job.measured_peak))

    def fail(self, job: Job, text: str) -> bool:
        """Store the error `text` and fail the task: see `complete`."""
        return self.write(job, OutcomeStep("fail", text, peak_rss=job.measured_peak))

    def requeue(self, job: Job, text: str, *, delay: float, priority_delta: int) -> bool:
        """Store the error `text` and put the task back in line, `delay` seconds from now."""
        return self.write(job, OutcomeStep("requeue", text, delay, priority_delta,
                                           job.measured_peak))

    def cancel(self, job: Job) -> bool:
        """File the task, stopped on its cancel request, as canceled: see `complete`."""
        return self.write(job, OutcomeStep("cancel", peak_rss=job.measured_peak))

    def delay(self, job: Job, delay: float) -> bool:
        """Put the task back to run `delay` seconds from now, this attempt not counted as a
        failure (the task asked for it)."""
        return self.write(job, OutcomeStep("delay", delay=delay, peak_rss=job.measured_peak))

    def release(self, job: Job) -> bool:
        """Put the task back at the front of its line, as it is: not a failure, this
        attempt not counted, its checkpoint kept (it returned `Release`)."""
        return self.write(job, OutcomeStep("release", peak_rss=job.measured_peak))

    def holder(self, job: Job) -> str:
        """The listener the steps act for: the task's node when known (an adopted task is
        still held by the worker that died), else this worker."""
        return (job.task.node if job.task is not None else None) or self.listener_id

    def store_error(self, error_model: type[Error], job: Job, queue: Queue,
                    exception: BaseException, trace: str | None, **fields: Any) -> None:
        """Store an `Error`, kept for the task's, else its queue's, else this worker's
        `error_ttl`. A Redis away or full is logged: the failure itself is on the task."""
        ttl = self.error_ttl_of(job, queue)
        try:
            error_model.add_error(queue.pk.get(), job, exception, trace=trace, ttl=ttl,
                                  **fields)
        except REDIS_AWAY as error:
            self.log(f"[{queue.pk.get()}|{job.task_id}] its Error record was not stored: "
                     f"{error}", logging.ERROR)

    def store_error_values(self, error_model: type[Error], job: Job, queue: Queue,
                           values: dict[str, str]) -> None:
        """Store an `Error` whose fields a task process made (`Error.error_values`): see
        `store_error`."""
        ttl = self.error_ttl_of(job, queue)
        try:
            error_model.add_errors([values], ttls=[ttl])
        except REDIS_AWAY as error:
            self.log(f"[{queue.pk.get()}|{job.task_id}] its Error record was not stored: "
                     f"{error}", logging.ERROR)

    def error_ttl_of(self, job: Job, queue: Queue) -> float:
        """How long an `Error` of `job` is kept: the task's, else its queue's, else this
        worker's `error_ttl`."""
        try:
            settings: dict[str, float] = queue.settings()
        except (ValueError, ResponseError):  # settings another client broke: unset
            settings = {}
        return error_ttl_for(job, settings, self.error_ttl)


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
