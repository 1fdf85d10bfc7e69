"""What a `Worker` subclass overrides: the hooks around each task and the log lines.

`WorkerHooks` is the contract of README.rst's "Hooks and overridable methods": every
method here is called by the worker's loop (`workers.Worker`) and may be overridden.
The attributes it relies on are declared below and set by `Worker`.
"""

from __future__ import annotations

import logging
import time
import traceback
from typing import TYPE_CHECKING, Any, Callable

from .atomic import PassedOver, Reservation
from .exceptions import (
    Canceled,
    Delay,
    InvalidParameters,
    LimpydBluequeError,
    QuarantinedTask,
    TaskKilled,
    UnknownJobModel,
    WorkerInterrupted,
)
from .liveness import listener_id_for
from .messages import WorkerMessages
from .models import Job, JobModels, Queue
from .options import seconds
from .outcomes import OutcomeRecorder, counted_attempts, error_text
from .values import encode, is_text, printable

#: errors of a task that cannot run as it is: it is failed, never requeued
UNRUNNABLE = (InvalidParameters, UnknownJobModel, QuarantinedTask)

if TYPE_CHECKING:
    from .execution import TaskRunner
    from .running import RunningTask


class WorkerHooks(WorkerMessages):
    """The hooks and messages of a worker; `Worker` adds the loop and its parts."""

    logger: logging.Logger
    runner: TaskRunner
    outcomes: OutcomeRecorder
    models: JobModels
    num_loops: int
    end_forced: bool
    _broken_logged: dict[str, float]
    #: settings that are None until `Worker.validate` derives them from `ttr`: numbers
    #: once the worker is made
    heartbeat_interval: float
    clean_interval: float

    def queue(self, name: str) -> Queue:
        raise NotImplementedError

    # -- identity and logging ---------------------------------------------------------------
    @property
    def id(self) -> str:
        """This worker's Blueque listener id."""
        if self.listener_id is None:
            self.listener_id = listener_id_for()
        return self.listener_id

    def log(self, message: str, level: int | str = logging.INFO, exc_info: bool = False) -> None:
        """Log `message` with this worker's id; `level` a number or a name ("info")."""
        if isinstance(level, str):
            number = logging.getLevelName(level.upper())
            level = number if isinstance(number, int) else logging.INFO
        self.logger.log(level, "[%s] %s", self.id, message, exc_info=exc_info)

    def perform(self, job: Job, queue: Queue) -> bool:
        """Run a started task and record its outcome; True on success."""
        self.job_started(job, queue)
        try:
            result = self.execute(job, queue)
            if job.delay_requested is not None:
                raise Delay(job.delay_requested)
        except WorkerInterrupted:
            raise
        except (Exception, SystemExit) as exception:  # noqa: BLE001 - any task failure is recorded
            trace = (traceback.format_exc() if self.save_tracebacks
                     and not isinstance(exception, (Delay, Canceled)) else None)
            self.progress_done(job, queue)
            return self.task_raised(job, queue, exception, trace)
        self.progress_done(job, queue)
        if job.settled:
            return self.settled_by_itself(job, queue)
        self.job_success(job, queue, result)
        return True

    def task_raised(self, job: Job, queue: Queue, exception: BaseException,
                    trace: str | None) -> bool:
        """The task's code raised `exception`: it asked to be delayed (`Delay`), stopped on
        its cancel (`Canceled`), or failed (`job_error`)."""
        if isinstance(exception, Delay):
            return self.delay_asked(job, queue, exception)
        if isinstance(exception, Canceled):
            return self.cancel_asked(job, queue)
        if job.settled:  # it released or buried itself, then failed: that stands
            return self.settled_by_itself(job, queue)
        self.job_error(job, queue, exception, trace)
        return False

    def progress_done(self, job: Job, queue: Queue) -> None:
        """The task's code returned: write its last progress, if not written yet."""
        try:
            job.flush_progress()
        except LimpydBluequeError as error:  # its outcome matters more: it is still recorded
            self.log(f"{self._tag(job, queue)} its last progress was not written: {error}",
                     logging.WARNING)

    def equip(self, job: Job) -> Job:
        """Give a task the worker's progress interval and retention."""
        job.progress_interval = self.progress_interval
        job.retention = self.retention
        return job

    def settled_by_itself(self, job: Job, queue: Queue) -> bool:
        """The task's own code released or buried it: no outcome to record; log it."""
        if job.settled == "canceled":
            self.job_canceled(job, queue)
            return False
        self.runner.recorded(job)
        self.log(f"{self._tag(job, queue)} {job.settled} by its own code")
        return False

    def delay_asked(self, job: Job, queue: Queue, delay: Delay) -> bool:
        """The task asked to run again later (`Job.delay`, or raising `Delay`): see
        `job_delayed`. A delay that is not a number of seconds fails the task instead."""
        try:
            job.delay_requested = seconds("delay", delay.seconds)
        except LimpydBluequeError as error:
            self.job_error(job, queue, error, None)
            return False
        self.job_delayed(job, queue)
        return False

    def prepare(self, job: Job, queue: Queue) -> Job | None:
        """The task as the job model it names (see `JobModels`), before it runs; None when
        it cannot run as it is (its parameters are not text, or it names a model this
        worker was not given): it is then failed, with an error naming the problem."""
        try:
            if not is_text(job.known.get("parameters")):
                raise InvalidParameters("task parameters are not valid UTF-8 text: the task "
                                        "cannot be decoded")
            assert job.task is not None, "a reserved job comes from its reservation"
            model = self.models.model_for(job.task)
        except (InvalidParameters, UnknownJobModel) as error:
            self.job_error(job, queue, error)
            return None
        return self.equip(job if type(job) is model else model.from_reservation(job.task))

    def execute(self, job: Job, queue: Queue) -> Any:
        """Do the work: the `callback` if set, else the job's `run` method."""
        if self.callback is not None:
            return self.callback(job, queue)
        return job.run(queue)

    # -- tasks that did not end normally ------------------------------------------------------
    def must_stop(self) -> bool:
        """True when the worker must take no more tasks."""
        if self.end_forced:
            return True
        if self.max_loops is not None and self.num_loops >= self.max_loops:
            return True
        if self.max_duration is not None and self.elapsed is not None:
            return self.elapsed.total_seconds() >= self.max_duration
        return False

    def retrying(self, step: Callable[[], Any]) -> Any:
        """Run `step`, retrying for `outcome_retry_timeout` seconds while Redis is away."""
        return self.outcomes.retrying(step)

    def passed_over(self, passed: PassedOver) -> None:
        """What a reserve step passed over: ids that were not pending tasks (one line with
        their count), quarantined tasks (`task_quarantined` each), queues with a key of
        another type (one line a minute each), tasks past their ttl (expired, one line);
        the other queues went on."""
        if passed.expired:
            self.log(f"expired {len(passed.expired)} task(s) not started within their ttl "
                     f"(first: {printable(passed.expired[0])})")
        if passed.dropped:
            self.log(f"dropped {len(passed.dropped)} pending id(s) that were not pending tasks "
                     f"(first: {passed.dropped[0]!a})", logging.WARNING)
        for task_id, (queue_name, problem) in passed.quarantined.items():
            self.task_quarantined(task_id, self.queue(queue_name), problem)
        now = time.monotonic()
        for queue_name, problem in passed.broken.items():
            if self._broken_logged.get(queue_name, 0.0) <= now:
                self._broken_logged[queue_name] = now + 60
                self.log(f"[{queue_name}] skipped: {problem!a}", logging.ERROR)

    def task_quarantined(self, task_id: str, queue: Queue, problem: str) -> None:
        """A task that could not be run as it is was failed and filed by the reserve step:
        store an `Error` naming the problem, and log one line."""
        error = QuarantinedTask(task_id, problem)
        job = self.job_model.from_reservation(Reservation(task_id, queue.pk.get(), {}))
        if self.save_errors:
            self.outcomes.store_error(self.error_model, job, queue, error, None)
        self.log(f"[{queue.pk.get()}|{task_id!a}] quarantined: {problem!a}", logging.ERROR)

    def process_ended(self, task: RunningTask, cause: TaskKilled) -> None:
        """The one rule for a task whose process ended without saying its outcome was
        stored (killed, crashed, over its maximum run time, or an adopted process that
        ended): it is a failure of that attempt, `cause`, recorded through the fenced
        step of `job_error`. Redis decides: if that attempt did store an outcome, or the
        task changed hands, the step is refused and nothing changes. `on_error` then
        runs in the worker's process, the only one left.
        """
        self.job_error(task.job, task.queue, cause, None)

    def process_canceled(self, task: RunningTask) -> None:
        """A canceling task's process ended: file it as canceled, then `job_canceled` (also
        when the process filed it so, then was stopped before its hooks ran)."""
        if self.outcomes.cancel(task.job) or task.job.data().status_in(
                "canceled", attempt=task.attempt):
            self.job_canceled(task.job, task.queue)

    def cancel_asked(self, job: Job, queue: Queue) -> bool:
        """The task stopped on its cancel (it raised `Canceled`): file it as canceled."""
        (self.job_canceled if self.outcomes.cancel(job) else self.job_skipped)(job, queue)
        return False

    def requeue_interrupted(self, task: RunningTask) -> None:
        """Put an interrupted task back at the front of its queue, if it is still ours."""
        if task.job.requeue(listener_id=task.reservation.node or self.id, attempt=task.attempt,
                            front=True):
            self.log(f"[{task.queue_name}|{task.task_id}] interrupted, back at the front of "
                     "the queue")

    # -- outcomes (override to change what happens) ------------------------------------------------
    def job_started(self, job: Job, queue: Queue) -> None:
        """The task is about to run: log, then the job's `on_started` hook."""
        if self.logger.isEnabledFor(logging.INFO):
            self.log(self.job_started_message(job, queue))
        self.equip(job)
        job.on_started(queue)

    def job_success(self, job: Job, queue: Queue, result: Any) -> None:
        """Store the result (complete), log, then `on_success`; a lost task is skipped.

        A result that cannot be stored (see `values.encode`) fails the task instead.
        """
        try:
            text = encode(result, "result")
        except InvalidParameters as error:
            trace = traceback.format_exc() if self.save_tracebacks else None
            self.job_error(job, queue, error, trace)
            return
        if not self.outcomes.complete(job, text):
            self.job_skipped(job, queue)
            return
        if job.settled == "canceled":  # its cancel was asked first
            self.job_canceled(job, queue)
            return
        self.runner.recorded(job)
        if self.logger.isEnabledFor(logging.INFO):
            self.log(self.job_success_message(job, queue, result))
        job.on_success(queue, result)

    def job_error(self, job: Job, queue: Queue, exception: BaseException,
                  trace: str | None = None) -> None:
        """Record a failure: requeue or fail the task, store an `Error`, log, `on_error`."""
        requeued = (not isinstance(exception, UNRUNNABLE)
                     and self.must_requeue(job, counted_attempts(job)))
        text = error_text(exception)
        if requeued:
            done = self.outcomes.requeue(job, text, delay=self.requeue_delay_delta,
                                         priority_delta=self.requeue_priority_delta)
        else:
            done = self.outcomes.fail(job, text)
        if not done:
            self.job_skipped(job, queue)
            return
        if job.settled == "canceled":  # its cancel was asked first: not a failure
            self.job_canceled(job, queue)
            return
        self.runner.recorded(job)  # the worker must not take it for lost, nor kill it now
        if self.save_errors:
            self.outcomes.store_error(
                self.error_model, job, queue, exception, trace if self.save_tracebacks else None,
                **self.additional_error_fields(job, queue, exception, trace))
        self.log(self.job_error_message(job, queue, exception, trace), logging.ERROR)
        job.on_error(queue, exception, trace)
        if requeued:
            self.job_requeued(job, queue)

    def must_requeue(self, job: Job, attempt: int | None) -> bool:
        """True when a failed task goes back in line (see `requeue_times`); `attempt`
        counts its failed attempts, this one included (not the delays it asked for)."""
        if self.requeue_times <= 0 or job.must_be_cancelled_on_error:
            return False
        return (attempt or 1) <= self.requeue_times

    def job_requeued(self, job: Job, queue: Queue) -> None:
        """The failed task is back in line: log, then `on_requeued`."""
        self.log(self.job_requeued_message(job, queue), logging.WARNING)
        job.on_requeued(queue)

    def job_delayed(self, job: Job, queue: Queue) -> None:
        """The task asked to run again `job.delay_requested` seconds from now: back to the
        scheduled set (not a failure, no retry used), log, then `on_delayed`; a task no
        longer held by this worker is skipped."""
        if not self.outcomes.delay(job, job.delay_requested or 0.0):
            self.job_skipped(job, queue)
            return
        if job.settled == "canceled":
            self.job_canceled(job, queue)
            return
        self.runner.recorded(job)
        if self.logger.isEnabledFor(logging.INFO):
            self.log(self.job_delayed_message(job, queue))
        job.on_delayed(queue)

    def job_canceled(self, job: Job, queue: Queue) -> None:
        """The running task was filed as canceled: log, `on_canceled` (no retry, no `Error`)."""
        self.runner.spare_from_stop()  # the cancel's SIGTERM no longer cuts its hooks short
        self.runner.recorded(job)
        self.log(self.job_canceled_message(job, queue), logging.WARNING)
        job.on_canceled(queue)

    def job_stalled(self, job: Job, queue: Queue) -> None:
        """The running task's progress stayed still for its stall timeout (flagged until it
        moves): log, `on_stalled`. In the heartbeat thread; an override may `release`,
        `fail` or `bury` the task (its process is then stopped)."""
        self.log(self.job_stalled_message(job, queue), logging.WARNING)
        job.on_stalled(queue)

    def job_skipped(self, job: Job, queue: Queue) -> None:
        """A task taken but not run (not pending, or lost to another attempt): log, `on_skipped`."""
        self.log(self.job_skipped_message(job, queue), logging.WARNING)
        job.on_skipped(queue)

    def additional_error_fields(self, job: Job, queue: Queue, exception: BaseException,
                                trace: str | None = None) -> dict[str, Any]:
        """Extra fields for the stored `Error` (for a subclass of `Error`); empty here."""
        return {}
