"""The worker: takes tasks from its queues and runs them, each in a process of its own or
in-process.

`Worker` is the loop with its hooks and log messages; subclass it and override its small
methods. It is composed of parts, each testable alone: its settings (`settings.py`, one
table), how a task runs (`execution.TaskRunner`), what keeps the leases
(`leases.LeaseKeeper`), and the running tasks with their state machine (`running.py`).
"""

from __future__ import annotations

import logging
import os
import signal
import time
from datetime import datetime, timedelta, timezone
from typing import Any

from .atomic import PassedOver
from .connection import private_client, safety_warnings
from .exceptions import (
    HOUSEKEEPING_ERRORS,
    REDIS_AWAY,
    ConfigurationError,
    LimpydBluequeError,
    ProtocolError,
    TaskKilled,
    WorkerInterrupted,
)
from .execution import ForkedRunner, InProcessRunner, TaskRunner
from .hooks import WorkerHooks
from .leases import LeaseKeeper, Terms
from .models import Job, JobModels, Queue
from .outcomes import OutcomeRecorder
from .processes import WakeUps
from .recovery import Recovery
from .running import RunningTask, RunningTasks
from .scheduling import DueTasks
from .values import printable
from .watching import TaskWatch


class Worker(WorkerHooks):
    """Runs the tasks of some queues until told to stop.

    The loop (`run`) registers the worker as a Blueque listener on each queue, then
    repeats `run_once`: apply what happened to running tasks, move due scheduled tasks,
    clean, and if a slot is free take the next task (or wait for one to be announced).
    Each task runs `execute` (the `callback` or the job's `run`), and its outcome goes
    through `job_success` or `job_error`. Every setting is a class attribute and a
    keyword (see `settings.WorkerSettings`).
    """

    def __init__(self, queues: Any = None, **overrides: Any) -> None:
        if queues is not None:
            overrides["queues"] = queues
        self.configure_settings(overrides)
        self.validate()
        self.logger = logging.getLogger(self.logger_name)
        self.logger.setLevel(self.logger_level)
        self.status: str | None = None
        self.num_loops = 0
        self.end_forced = False
        self.end_signal_caught = False
        self.start_date: datetime | None = None
        self.end_date: datetime | None = None
        self.tasks = RunningTasks()
        self.runner: TaskRunner = self.make_runner()
        self.models = JobModels(self.job_model, self.job_models)
        self.outcomes = OutcomeRecorder(self.id, retry_timeout=self.outcome_retry_timeout,
                                        log=self.log, error_ttl=self.error_ttl)
        self.keeper: LeaseKeeper | None = None
        self.recovery: Recovery | None = None
        self.wakeups: WakeUps | None = None
        self._queues: dict[str, Queue] = {}
        self.due = DueTasks([self.queue(name) for name in self.queues], self.schedule_interval,
                            log=self.log)
        self._old_handlers: dict[int, Any] = {}
        self._broken_logged: dict[str, float] = {}

    # -- settings and parts -----------------------------------------------------------------
    def runner_class(self) -> type[TaskRunner]:
        """How tasks run: each in a process of its own (`fork`), or in the worker's."""
        return ForkedRunner if self.fork else InProcessRunner

    def make_runner(self) -> TaskRunner:
        return self.runner_class()(self)

    def make_keeper(self) -> LeaseKeeper:
        """The part that beats: liveness, leases, and who else is dead."""
        keeper = LeaseKeeper(self.id, [self.queue(name) for name in self.queues], self.tasks,
                             heartbeat_interval=self.heartbeat_interval,
                             liveness_interval=self.liveness_interval,
                             liveness_timeout=self.liveness_timeout)
        keeper.watch = TaskWatch(self.tasks, self, keeper.scripts_or_fail)
        return keeper

    def make_recovery(self, keeper: LeaseKeeper) -> Recovery:
        """The part that takes back what dead holders left."""
        return Recovery(self.id, [self.queue(name) for name in self.queues], self.tasks,
                        keeper.scripts_or_fail, job_model=self.job_model,
                        terms=Terms(self.ttr, self.max_run_time, self.max_attempts,
                                    self.retention),
                        clean_interval=self.clean_interval, log=self.log,
                        error_model=self.error_model)

    def validate(self) -> None:
        """Check the rules that relate settings (each one alone is checked by its own
        `settings.Setting`), and fill the defaults derived from others."""
        refuse_what_runners_cannot(self, self.runner_class())
        if self.heartbeat_interval is None:
            self.heartbeat_interval = (self.ttr / 3) if self.ttr else 30.0
        elif self.ttr and self.heartbeat_interval > self.ttr / 2:
            raise ConfigurationError(
                f"heartbeat_interval ({self.heartbeat_interval}) must be at most half of ttr "
                f"({self.ttr}): leases would end between two renewals")
        if self.liveness_timeout < 2 * self.liveness_interval:
            raise ConfigurationError(
                f"liveness_timeout ({self.liveness_timeout}) must be at least twice "
                f"liveness_interval ({self.liveness_interval}): one late beat would kill")
        if self.clean_interval is None:
            self.clean_interval = (self.ttr / 2) if self.ttr else 30.0

    # -- status and title -------------------------------------------------------------------------
    def set_status(self, status: str) -> None:
        self.status = status
        self.update_process_title()

    def update_process_title(self) -> None:
        """Show state, queues, loop count and running tasks in the process title."""
        if self.update_title:
            loops = f"{self.num_loops}/{self.max_loops}" if self.max_loops else str(self.num_loops)
            _set_title(f"blueque-worker#{os.getpid()} [{self.status}] "
                       f"queues={','.join(self.queues)} loop={loops} "
                       f"running={','.join(self.tasks.ids()) or '-'}")

    def set_task_process_title(self, task: RunningTask) -> None:
        """In a task process: show the task in the process title."""
        if self.update_title:
            _set_title(f"blueque-task#{os.getpid()} [{task.queue_name}] {printable(task.task_id)}")

    @property
    def elapsed(self) -> timedelta | None:
        if self.start_date is None:
            return None
        return (self.end_date or datetime.now(timezone.utc)) - self.start_date

    # -- signals -----------------------------------------------------------------------------------
    def handle_end_signal(self) -> None:
        """Catch SIGTERM and SIGINT with `catch_end_signal`."""
        for signum in (signal.SIGTERM, signal.SIGINT):
            self._old_handlers[signum] = signal.signal(signum, self.catch_end_signal)

    def stop_handling_end_signal(self) -> None:
        for signum, handler in self._old_handlers.items():
            signal.signal(signum, handler)
        self._old_handlers.clear()

    def catch_end_signal(self, signum: int, frame: Any) -> None:
        """Stop taking tasks; a second signal interrupts running tasks and requeues them."""
        if self.end_signal_caught:
            self.log("second stop signal: interrupting running tasks", logging.WARNING)
            self.on_terminate = "requeue"
        self.end_signal_caught = True
        self.end_forced = True
        self.runner.stop_signal()

    # -- the loop ----------------------------------------------------------------------------------
    def run(self) -> None:
        """Run the worker until it must stop, then stop cleanly."""
        if self.status is not None:
            raise LimpydBluequeError("this worker has already run; make a new one")
        self.run_started()
        try:
            while not self.must_stop():
                self.run_once()
        finally:
            self.run_ended()

    def run_started(self) -> None:
        """Register as a listener, subscribe to wake-ups, start the heartbeat."""
        self.start_date = datetime.now(timezone.utc)
        self.set_status("starting")
        if self.terminate_gracefully:
            self.handle_end_signal()
        self.runner.start()
        self.register()
        self.wakeups = WakeUps(private_client(self.queue_model.client()),
                               self.queue_model.wake_channels(self.queues),
                               also=self.runner.wakeup_fds())
        self.tasks.wake = self.wakeups.wake
        self.keeper = self.make_keeper()
        self.keeper.start()  # also says, at once, that this worker is alive
        self.recovery = self.make_recovery(self.keeper)
        self.log(self.run_started_message())
        for warning in safety_warnings(self.queue_model.client()):
            self.log(f"Redis configuration: {warning}", logging.WARNING)
        keep_no_errors_on_a_cluster(self)
        self.set_status("waiting")

    def run_once(self) -> None:
        """One turn of the loop; an unexpected error is logged and the loop goes on."""
        try:
            self.collect()
            self.move_due_tasks()
            self.clean()
            if len(self.tasks) < self.concurrency:
                job, queue = self.wait_for_job()
                if job is not None and queue is not None:
                    self.num_loops += 1
                    self.launch(job, queue)
            else:
                self.wait(self.wait_time())
        except REDIS_AWAY as error:
            self.log(f"{error}; retrying in 1 second", logging.ERROR)
            time.sleep(1)
        except WorkerInterrupted:
            pass
        except Exception:  # noqa: BLE001 - the one catch-all: the loop must go on
            self.log("unexpected error in the worker loop", logging.ERROR, exc_info=True)
            time.sleep(0.1)

    def run_ended(self) -> None:
        """Deal with running tasks as `on_terminate` says, then unregister."""
        self.set_status("terminating")
        try:
            detached = self.runner.terminate()
            if self.keeper is not None:
                try:
                    self.keeper.stop(detached)
                except REDIS_AWAY as error:  # the others will find its record stale
                    self.log(f"could not remove this worker's record: {error}", logging.ERROR)
            if self.wakeups is not None:
                self.wakeups.close()
            self.runner.close()
            if not detached:  # else it stays listed: the host's next worker finds its tasks
                self.unregister()
        finally:
            self.stop_handling_end_signal()
            self.end_date = datetime.now(timezone.utc)
            self.set_status("terminated")
            self.log(self.run_ended_message())

    def register(self) -> None:
        """Register as a listener on each queue (a set of another type: logged, passed)."""
        for name in self.queues:
            try:
                self.queue(name).add_listener(self.id)
            except ProtocolError as error:
                self.log(f"[{name}] not registered as a listener: {error}", logging.ERROR)

    def unregister(self) -> None:
        for name in self.queues:
            try:
                self.queue(name).remove_listener(self.id)
            except HOUSEKEEPING_ERRORS as error:
                self.log(f"could not unregister: {error}", logging.ERROR)

    def queue(self, name: str) -> Queue:
        """The queue model instance of a queue name (cached)."""
        if name not in self._queues:
            self._queues[name] = self.queue_model.named(name)
        return self._queues[name]

    def collect(self) -> None:
        """Apply what happened to the running tasks since the last turn."""
        if self.recovery is not None:
            self.recovery.poll_adopted()
        self.runner.collect()

    def wait(self, seconds: float) -> None:
        """Sleep until a task is announced, a task process says something, or `seconds`."""
        if self.wakeups is not None:
            self.wakeups.wait(seconds)
        else:
            time.sleep(seconds)

    def wait_time(self) -> float:
        """How long the loop may sleep: up to `timeout`, less when periodic work is due."""
        until = self.due.next_due
        if self.tasks.watched():
            until = min(until, time.monotonic() + 0.5)
        return min(self.timeout, self.clean_interval, max(until - time.monotonic(), 0.001))

    def wait_for_job(self) -> tuple[Job | None, Queue | None]:
        """Take the next task of the first queue that has one, or wait for one.

        Returns `(job, queue)`, or `(None, None)` after waiting up to `timeout` seconds
        (less when due scheduled tasks or running tasks need attention). The task is
        reserved and started at once for the process that will run it.
        """
        pid, pstart = self.runner.next_process()
        passed: list[PassedOver] = []
        job, reservation = self.queue_model.reserve_from(
            self.queues, self.id, pid=pid, pstart=pstart, ttr=self.ttr,
            max_run_time=self.max_run_time, max_attempts=self.max_attempts,
            job_model=self.job_model, report=passed.append)
        for report in passed:
            self.passed_over(report)
        if job is not None and reservation is not None:
            return job, self.queue(reservation.queue)
        if not any(report.more for report in passed):  # else: more to pass over, at once
            self.wait(self.wait_time())
        return None, None

    def move_due_tasks(self) -> None:
        """Move due scheduled tasks of the worker's queues to pending, every `schedule_interval`."""
        self.due.move()

    def clean(self) -> None:
        """Take back at once the tasks of workers found dead; every `clean_interval`, adopt
        this host's dead listeners' tasks and take back expired leases."""
        if self.keeper is None or self.recovery is None:
            return
        if self.keeper.revived:  # taken for dead while only slow: listed again
            self.keeper.revived = False
            self.log("this worker was taken for dead: registering again", logging.WARNING)
            self.register()
        recovered, failed = self.recovery.take_back_each(self.keeper.found_dead())
        self.keeper.unreport(failed)  # judged again at the next beat
        recovered.update(self.recovery.clean())
        for task_id, outcome in recovered.items():
            if outcome != "skipped":
                self.log(self.task_recovered_message(task_id, outcome), logging.WARNING)

    # -- running a task ----------------------------------------------------------------------------
    def launch(self, job: Job, queue: Queue) -> None:
        """Hand a reserved task to the runner (a task process of its own, or here)."""
        prepared = self.prepare(job, queue)
        if prepared is None:
            return
        job = prepared
        if job.task is not None and job.task.ttr and self.keeper is not None:
            self.keeper.nudge(job.task.ttr)  # a short lease: its own cadence from now
        self.runner.launch(job, queue)



def _set_title(title: str) -> None:
    import setproctitle

    # ids read from Redis may hold bytes that were not UTF-8: shown escaped
    setproctitle.setproctitle(title.encode("utf-8", "backslashreplace").decode("utf-8"))


__all__ = ["TaskKilled", "Worker", "WorkerInterrupted"]


def refuse_what_runners_cannot(worker: Worker, runner: type[TaskRunner]) -> None:
    """`ConfigurationError` for a setting the worker's way of running tasks cannot honour."""
    if runner.max_concurrency is not None and worker.concurrency > runner.max_concurrency:
        raise ConfigurationError(f"concurrency above {runner.max_concurrency} needs "
                                 "fork=True (one process per task)")
    if not runner.can_detach and worker.on_terminate == "detach":
        raise ConfigurationError("on_terminate='detach' needs fork=True: an in-process "
                                 "task cannot outlive its worker")
    if not runner.can_time_out and worker.terminate_timeout is not None:
        raise ConfigurationError("terminate_timeout needs fork=True: an in-process task "
                                 "stops only for on_terminate='requeue' or a second signal")


def keep_no_errors_on_a_cluster(worker: Worker) -> None:
    """In the cluster key mode, which keeps no `Error` records yet, the worker stores
    none (each failure is filed on its task only), and says so once."""
    if worker.save_errors and worker.error_model.keys().cluster:
        worker.save_errors = False
        worker.log("the cluster key mode keeps no Error records yet: each failure is "
                   "filed on its task only (its error field)", logging.WARNING)
