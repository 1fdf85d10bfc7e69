"""The worker: takes tasks from its queues and runs them, each in a forked child or in-process.

Subclass `Worker` and override its small methods; every setting is a class attribute
and a constructor keyword, validated in `validate`.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import threading
import time
import traceback
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Sequence

from .atomic import Scripts
from .connection import safety_warnings
from .exceptions import (
    ConfigurationError, InvalidParameters, LimpydBluequeError, RedisUnavailable,
)
from .keys import check_listener_id, check_queue_name
from .models import Error, Job, Queue
from .connection import open_connection, private_client
from .exceptions import TaskKilled, WorkerInterrupted
from .liveness import listener_id_for, process_start_time
from .processes import (
    EXIT_REDIS_UNAVAILABLE, DoneNotices, Heartbeat, RunningTask, Spare, WakeUps, run_time_limit,
)
from .values import is_text
from .supervision import Supervision
from .values import encode

LOGGER_NAME = "limpyd-blueque"
#: most due scheduled tasks one script moves to pending
DUE_CHUNK = 1000
TERMINATE_MODES = ("wait", "detach", "requeue")


class Worker(Supervision):
    """Runs the tasks of some queues until told to stop.

    The loop (`run`) registers the worker as a Blueque listener on each queue, then
    repeats `run_once`: collect ended task processes, move due scheduled tasks, and if
    a slot is free take the next task (or wait for one to be announced). Each task runs
    `execute`, which calls the `callback` or the job's `run` method, and its outcome
    goes through `job_success` or `job_error`.
    """

    #: names of the queues to take tasks from, in order of preference ("a,b" or a list)
    queues: Sequence[str] | str = ()
    #: a function `callback(job, queue)` doing the work, instead of `Job.run`
    callback: Callable[[Job, Queue], Any] | None = None
    job_model: type[Job] = Job
    queue_model: type[Queue] = Queue
    error_model: type[Error] = Error
    logger_name: str = LOGGER_NAME
    logger_level: int | str = logging.INFO
    #: store an `Error` record for each failure, with its traceback
    save_errors: bool = True
    save_tracebacks: bool = True
    #: stop after taking this many tasks (None: never), or after this many seconds
    max_loops: int | None = 1000
    max_duration: float | None = None
    #: catch SIGTERM and SIGINT to stop cleanly, as `on_terminate` says
    terminate_gracefully: bool = True
    #: what a stopping worker does with running tasks: "wait" for them, "detach" (leave
    #: the task processes running, for the next worker of the host), "requeue" (interrupt
    #: them and put them back at the front of their queue)
    on_terminate: str = "wait"
    #: with "wait": seconds to wait before interrupting and requeuing (None: no limit)
    terminate_timeout: float | None = None
    #: longest wait (seconds) for a task before checking again whether to stop
    timeout: float = 30
    #: a failed task goes back in line up to this many times, after this delay (seconds),
    #: with its priority changed by this much
    requeue_times: int = 0
    requeue_delay_delta: float = 30
    requeue_priority_delta: float = -1
    #: how many tasks run at once (each in its own process)
    concurrency: int = 1
    #: run each task in a forked child (True) or in the worker process (False)
    fork: bool = True
    #: lease length (seconds): a task whose lease is not renewed for this long is taken
    #: back by other workers; None: leases never expire
    ttr: float | None = 60
    #: seconds between two lease renewals (None: a third of `ttr`)
    heartbeat_interval: float | None = None
    #: attempts a task may use before one whose holder is lost is failed instead of
    #: put back (a task's or its queue's own `max_attempts` comes first); None: no limit
    max_attempts: int | None = 5
    #: longest a task may run (seconds) before its process is killed and the task failed
    #: (a task's or its queue's own `max_run_time` comes first); None: no limit
    max_run_time: float | None = None
    #: seconds between two moves of due scheduled tasks to pending
    schedule_interval: float = 1.0
    #: seconds between two light cleans (expired leases) and adoptions (None: ttr / 2)
    clean_interval: float | None = None
    #: how long a task's outcome is retried while Redis cannot be reached (seconds), so
    #: that a long task finished during a Redis restart is not run again
    outcome_retry_timeout: float = 60
    #: the Blueque listener id (None: `<fqdn>_<pid>`)
    listener_id: str | None = None
    #: show the worker's state in its process title (setproctitle)
    update_title: bool = False

    parameters = (
        "queues", "callback", "job_model", "queue_model", "error_model", "logger_name",
        "logger_level", "save_errors", "save_tracebacks", "max_loops", "max_duration",
        "terminate_gracefully", "on_terminate", "terminate_timeout", "timeout",
        "requeue_times", "requeue_delay_delta", "requeue_priority_delta", "concurrency",
        "fork", "ttr", "heartbeat_interval", "max_attempts", "max_run_time",
        "schedule_interval", "clean_interval", "outcome_retry_timeout", "listener_id",
        "update_title",
    )

    def __init__(self, queues: Sequence[str] | str | None = None, **overrides: Any) -> None:
        if queues is not None:
            overrides["queues"] = queues
        unknown = sorted(set(overrides) - set(self.parameters))
        if unknown:
            raise ConfigurationError(f"unknown worker option(s): {', '.join(unknown)}")
        for name, value in overrides.items():
            setattr(self, name, value)
        self.validate()
        self.logger = logging.getLogger(self.logger_name)
        self.logger.setLevel(self.logger_level)
        self.status: str | None = None
        self.num_loops = 0
        self.end_forced = False
        self.end_signal_caught = False
        self.start_date: datetime | None = None
        self.end_date: datetime | None = None
        self.running: dict[str, RunningTask] = {}
        self._lock = threading.Lock()
        self._queues: dict[str, Queue] = {}
        self._next_schedule = 0.0
        self._next_clean = 0.0
        self._spare: Spare | None = None
        self._done: DoneNotices | None = None
        self._exiting: set[int] = set()  # task processes done with their task, not reaped yet
        self._wakeups: WakeUps | None = None
        self._heartbeat: Heartbeat | None = None
        self._old_handlers: dict[int, Any] = {}

    # -- settings -----------------------------------------------------------------------
    def validate(self) -> None:
        """Check and normalize every setting; `ConfigurationError` names the bad one."""
        queues = self.queues.split(",") if isinstance(self.queues, str) else list(self.queues or ())
        if not [q for q in queues if q]:
            raise ConfigurationError("no queues: give at least one queue name")
        self.queues = [check_queue_name(q.strip()) for q in queues]
        if self.callback is not None and not callable(self.callback):
            raise ConfigurationError(f"callback must be callable, not {self.callback!r}")
        for name, base in (("job_model", Job), ("queue_model", Queue), ("error_model", Error)):
            value = getattr(self, name)
            if not (isinstance(value, type) and issubclass(value, base)):
                raise ConfigurationError(f"{name} must be a subclass of {base.__name__}, not {value!r}")
        if isinstance(self.logger_level, str):
            level = logging.getLevelName(self.logger_level.upper())
            if not isinstance(level, int):
                raise ConfigurationError(f"unknown logger level {self.logger_level!r}")
            self.logger_level = level
        self._check_number("max_loops", integer=True, minimum=1, optional=True)
        self._check_number("max_duration", minimum=0, optional=True, strict=True)
        self._check_number("terminate_timeout", minimum=0, optional=True)
        self._check_number("timeout", minimum=0, strict=True)
        self._check_number("requeue_times", integer=True, minimum=0)
        self._check_number("requeue_delay_delta", minimum=0)
        self._check_number("requeue_priority_delta")
        self._check_number("concurrency", integer=True, minimum=1)
        self._check_number("ttr", minimum=0, optional=True, strict=True)
        self._check_number("heartbeat_interval", minimum=0, optional=True, strict=True)
        self._check_number("schedule_interval", minimum=0, strict=True)
        self._check_number("max_attempts", integer=True, minimum=1, optional=True)
        self._check_number("max_run_time", minimum=0, optional=True, strict=True)
        self._check_number("clean_interval", minimum=0, optional=True, strict=True)
        self._check_number("outcome_retry_timeout", minimum=0)
        if self.on_terminate not in TERMINATE_MODES:
            raise ConfigurationError(
                f"on_terminate must be one of {', '.join(TERMINATE_MODES)}, not {self.on_terminate!r}")
        if not self.fork and self.concurrency > 1:
            raise ConfigurationError("concurrency above 1 needs fork=True (one process per task)")
        if not self.fork and self.on_terminate == "detach":
            raise ConfigurationError("on_terminate='detach' needs fork=True: an in-process "
                                     "task cannot outlive its worker")
        if self.listener_id is not None:
            check_listener_id(self.listener_id)
        if self.heartbeat_interval is None:
            self.heartbeat_interval = (self.ttr / 3) if self.ttr else 30.0
        elif self.ttr and self.heartbeat_interval > self.ttr / 2:
            raise ConfigurationError(
                f"heartbeat_interval ({self.heartbeat_interval}) must be at most half of ttr "
                f"({self.ttr}): leases would end between two renewals")
        if self.clean_interval is None:
            self.clean_interval = (self.ttr / 2) if self.ttr else 30.0

    def _check_number(self, name: str, *, integer: bool = False, minimum: float | None = None,
                      optional: bool = False, strict: bool = False) -> None:
        value = getattr(self, name)
        if value is None and optional:
            return
        kinds = (int,) if integer else (int, float)
        if isinstance(value, bool) or not isinstance(value, kinds):
            kind = "a whole number" if integer else "a number"
            raise ConfigurationError(f"{name} must be {kind}, not {value!r}")
        if minimum is not None and (value <= minimum if strict else value < minimum):
            bound = f"above {minimum}" if strict else f"at least {minimum}"
            raise ConfigurationError(f"{name} must be {bound}, not {value!r}")

    # -- identity and logging -----------------------------------------------------------
    @property
    def id(self) -> str:
        """This worker's Blueque listener id."""
        if self.listener_id is None:
            self.listener_id = listener_id_for()
        return self.listener_id

    def log(self, message: str, level: int = logging.INFO, exc_info: bool = False) -> None:
        self.logger.log(level, "[%s] %s", self.id, message, exc_info=exc_info)

    def set_status(self, status: str) -> None:
        self.status = status
        self.update_process_title()

    def update_process_title(self) -> None:
        """Show state, queues, loop count and running tasks in the process title."""
        if not self.update_title:
            return
        import setproctitle

        loops = f"{self.num_loops}/{self.max_loops}" if self.max_loops else str(self.num_loops)
        tasks = ",".join(sorted(self.running)) or "-"
        setproctitle.setproctitle(
            f"blueque-worker#{os.getpid()} [{self.status}] queues={','.join(self.queues)} "
            f"loop={loops} running={tasks}")

    @property
    def elapsed(self) -> timedelta | None:
        if self.start_date is None:
            return None
        return (self.end_date or datetime.now(timezone.utc)) - self.start_date

    # -- signals --------------------------------------------------------------------------
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
        if not self.fork and self.on_terminate == "requeue" and self.running:
            raise WorkerInterrupted()

    # -- the loop ---------------------------------------------------------------------------
    def must_stop(self) -> bool:
        """True when the worker must take no more tasks."""
        if self.end_forced:
            return True
        if self.max_loops is not None and self.num_loops >= self.max_loops:
            return True
        if self.max_duration is not None and self.elapsed is not None:
            return self.elapsed.total_seconds() >= self.max_duration
        return False

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
        if self.fork:
            self._old_handlers.setdefault(signal.SIGCHLD, signal.signal(signal.SIGCHLD, _wake))
            # the objects made so far are never collected again: a task process then does
            # not copy every page of the worker while its garbage collector walks them
            gc.freeze()
        for name in self.queues:
            self.queue(name).add_listener(self.id)
        keys = self.queue_model.keys()
        self._done = DoneNotices() if self.fork else None
        self._wakeups = WakeUps(private_client(self.queue_model.client()),
                                [keys.wake_channel(name) for name in self.queues],
                                also=[self._done.read] if self._done else [])
        self._heartbeat_scripts = Scripts(private_client(self.job_model.client()), keys)
        self._heartbeat = Heartbeat(self.beat_interval, self.renew_leases)
        self._heartbeat.start()
        self.log(self.run_started_message())
        for warning in safety_warnings(self.queue_model.client()):
            self.log(f"Redis configuration: {warning}", logging.WARNING)
        self.renew_leases()  # also says, at once, that this worker is alive
        self.set_status("waiting")

    def run_once(self) -> None:
        """One turn of the loop; an unexpected error is logged and the loop goes on."""
        try:
            self.collect_ended()
            self.move_due_tasks()
            self.clean()
            if len(self.running) < self.concurrency:
                job, queue = self.wait_for_job()
                if job is not None:
                    self.num_loops += 1
                    self.launch(job, queue)
            else:
                self._wakeups.wait(self.wait_time())
        except RedisUnavailable as error:
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
            self.drop_spare()
            detached = self.terminate_running()
            if self._heartbeat:
                self._heartbeat.stop()
                if not detached:
                    self._heartbeat_scripts.client.zrem(self.queue_model.keys().workers, self.id)
            if self._wakeups:
                self._wakeups.close()
            self.reap_exiting(wait=True)
            if self._done:
                self._done.close()
            if not detached:
                # a listener with detached tasks stays registered: the next worker of
                # this host finds them through it
                for name in self.queues:
                    try:
                        self.queue(name).remove_listener(self.id)
                    except RedisUnavailable as error:
                        self.log(f"could not unregister: {error}", logging.ERROR)
        finally:
            self.stop_handling_end_signal()
            self.end_date = datetime.now(timezone.utc)
            self.set_status("terminated")
            self.log(self.run_ended_message())

    def queue(self, name: str) -> Queue:
        """The queue model instance of a queue name (cached)."""
        if name not in self._queues:
            self._queues[name] = self.queue_model.named(name)
        return self._queues[name]

    def wait_for_job(self) -> tuple[Job | None, Queue | None]:
        """Take the next task of the first queue that has one, or wait for one.

        Returns `(job, queue)`, or `(None, None)` after waiting up to `timeout` seconds
        (less when due scheduled tasks or ended children need attention).
        """
        if self.fork:
            # the task is reserved and started at once for the spare process that runs it
            pid, pstart = self.spare().pid, self.spare().pstart
        else:
            pid, pstart = os.getpid(), process_start_time(os.getpid())
        job, reservation, dropped = self.queue_model.take(
            self.queues, self.id, pid=pid, ttrs=[self.ttr] * len(self.queues),
            job_model=self.job_model, pstart=pstart)
        for task_id in dropped:
            self.task_dropped(task_id)
        if job is not None:
            return job, self.queue(reservation.queue)
        self._wakeups.wait(self.wait_time())
        return None, None

    def wait_time(self) -> float:
        """How long the loop may sleep: up to `timeout`, less when periodic work is due."""
        until = min(self._next_schedule, self._next_clean)
        if any(task.max_run_time or task.adopted for task in self.running.values()):
            until = min(until, time.monotonic() + 0.5)
        return min(self.timeout, max(until - time.monotonic(), 0.001))

    def task_dropped(self, task_id: str) -> None:
        """A pending list held an id that was not a pending task: it was removed."""
        try:
            job = self.job_model.load(task_id)
        except LimpydBluequeError:
            self.log(f"dropped {task_id}: a pending id with no task hash", logging.WARNING)
            return
        queue = self.queue(job.queue.hget() or self.queues[0])
        self.job_skipped(job, queue)

    def move_due_tasks(self) -> None:
        """Move due scheduled tasks of the worker's queues to pending, every `schedule_interval`."""
        now = time.monotonic()
        if now < self._next_schedule:
            return
        self._next_schedule = now + self.schedule_interval
        for name in self.queues:
            while True:  # in chunks: one script never holds Redis long
                moved = self.queue(name).enqueue_due(limit=DUE_CHUNK)
                if moved:
                    self.log(f"[{name}] {len(moved)} scheduled task(s) now pending", logging.DEBUG)
                if len(moved) < DUE_CHUNK:
                    break

    # -- running a task -----------------------------------------------------------------------
    def launch(self, job: Job, queue: Queue) -> None:
        """Run a reserved task: in a new child process, or here (in-process)."""
        reservation = job.reservation
        ttr = reservation.ttr if reservation is not None else self.ttr
        task = RunningTask(job, queue, int(job.known.get("attempt") or 0), ttr,
                           max_run_time=self.max_run_time_of(job))
        if not is_text(job.known.get("parameters")):
            self.job_error(job, queue, InvalidParameters(
                "task parameters are not valid UTF-8 text: the task cannot be decoded"))
            return
        with self._lock:
            self.running[task.task_id] = task
        if task.ttr and self._heartbeat:
            self._heartbeat.nudge(task.ttr / 3)  # a short lease: its own cadence from now
        self.set_status("running")
        if self.fork:
            self.hand_over(task)
            return
        task.pid = os.getpid()
        try:
            if task.max_run_time:
                with run_time_limit(task.max_run_time):
                    self.perform(job, queue)
            else:
                self.perform(job, queue)
        except WorkerInterrupted:
            self.requeue_interrupted(task)
        finally:
            with self._lock:
                self.running.pop(task.task_id, None)
            self.set_status("waiting")

    def max_run_time_of(self, job: Job) -> float | None:
        """The task's own maximum run time, else its queue's, else the worker's."""
        if job.known.get("max_run_time"):
            return float(job.known["max_run_time"])
        if job.reservation is not None and job.reservation.queue_max_run_time:
            return job.reservation.queue_max_run_time
        return self.max_run_time

    # -- task processes ------------------------------------------------------------------------
    def spare(self) -> Spare:
        """The process forked ahead for the next task (made when missing)."""
        if self._spare is None:
            self._spare = Spare(self.prepare_task_process)
        return self._spare

    def drop_spare(self) -> None:
        """Let the spare process go (it exits when its pipe closes) and collect it."""
        spare, self._spare = self._spare, None
        if spare is not None:
            spare.close()
            try:
                os.waitpid(spare.pid, 0)
            except ChildProcessError:
                pass

    def hand_over(self, task: RunningTask) -> None:
        """Give a task, reserved and started for the spare's pid, to the spare."""
        spare, self._spare = self._spare, None
        task.pid = spare.pid
        reservation = task.job.reservation
        payload = {"task_id": task.task_id, "queue": task.queue_name, "known": task.job.known,
                   "ttr": task.ttr, "attempt": task.attempt, "max_run_time": task.max_run_time,
                   "queue_max_run_time": reservation.queue_max_run_time if reservation else None}
        if not spare.hand_over(payload):
            # the task never ran: it goes back to the front of its queue
            self.log(f"[{task.queue_name}|{task.task_id}] its process died before the task "
                     "reached it: back in line", logging.WARNING)
            with self._lock:
                self.running.pop(task.task_id, None)
            self._exiting.add(spare.pid)
            self.retrying(lambda: self.requeue_interrupted(task))
        self.spare()  # the next one, forked while this task runs

    def prepare_task_process(self, receive: Callable[[], dict | None]) -> int:
        """The body of a spare: get ready, wait for a task (`receive`), run it.

        What can be done before the task is known is done while waiting: the process's
        own Redis connection is opened and its orphan watcher started.
        """
        open_connection(self.job_model.client())
        slot: list[RunningTask] = []
        self.watch_orphaned(lambda: slot[0] if slot else None)
        payload = receive()
        if payload is None:
            return 0  # the worker stops, or replaces this spare
        queue = self.queue(payload["queue"])
        job = self.job_model.from_fields(payload["task_id"], payload["known"])
        slot.append(RunningTask(job, queue, payload["attempt"], payload["ttr"], pid=os.getpid(),
                                max_run_time=payload["max_run_time"]))
        return self.run_in_child(slot[0])

    def run_in_child(self, task: RunningTask) -> int:
        """A task's process runs it: perform, exit 0 once the outcome is recorded."""
        if self.update_title:
            import setproctitle

            setproctitle.setproctitle(f"blueque-task#{os.getpid()} [{task.queue_name}] {task.task_id}")
        self._in_task_process = True
        try:
            self.perform(task.job, task.queue)
            self.outcome_recorded()  # in case no outcome step said so (a skipped task)
            self._done.notify(DoneNotices.DONE)
        except RedisUnavailable:
            self.log(f"[{task.queue_name}|{task.task_id}] could not record its outcome",
                     logging.ERROR, exc_info=True)
            return EXIT_REDIS_UNAVAILABLE
        return 0

    def outcome_recorded(self) -> None:
        """In a task process: tell the worker the outcome is in Redis (once)."""
        if getattr(self, "_in_task_process", False) and not getattr(self, "_notified", False):
            self._notified = True
            self._done.notify(DoneNotices.RECORDED)

    def perform(self, job: Job, queue: Queue) -> bool:
        """Run a started task and record its outcome; True on success."""
        self.job_started(job, queue)
        try:
            result = self.execute(job, queue)
        except WorkerInterrupted:
            raise
        except (Exception, SystemExit) as exception:  # noqa: BLE001 - any task failure is recorded
            trace = traceback.format_exc() if self.save_tracebacks else None
            self.job_error(job, queue, exception, trace)
            return False
        self.job_success(job, queue, result)
        return True

    def execute(self, job: Job, queue: Queue) -> Any:
        """Do the work: the `callback` if set, else the job's `run` method."""
        if self.callback is not None:
            return self.callback(job, queue)
        return job.run(queue)

    # -- outcomes -----------------------------------------------------------------------------
    def job_started(self, job: Job, queue: Queue) -> None:
        """The task is about to run: log, then the job's `on_started` hook."""
        if self.logger.isEnabledFor(logging.INFO):
            self.log(self.job_started_message(job, queue))
        job.on_started(queue)

    def record(self, job: Job, step: Callable[[], bool], status: str) -> bool:
        """Run an outcome step, retrying while Redis is unreachable.

        True when this attempt's outcome is recorded, including when an earlier try
        reached Redis but its reply was lost. False when the task is no longer ours.
        """
        tries = []

        def once() -> bool:
            tries.append(1)
            if step():
                return True
            if len(tries) == 1:
                return False
            data = job.data()  # our earlier try may have landed with its reply lost
            return data.status == status and data.attempt == self._attempt(job)

        return self.retrying(once)

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
        if not self.record(job, lambda: job.complete(text, listener_id=self.id,
                                                      attempt=self._attempt(job)), "complete"):
            self.job_skipped(job, queue)
            return
        self.outcome_recorded()
        if self.logger.isEnabledFor(logging.INFO):
            self.log(self.job_success_message(job, queue, result))
        job.on_success(queue, result)

    def job_error(self, job: Job, queue: Queue, exception: BaseException,
                  trace: str | None = None) -> None:
        """Record a failure: requeue or fail the task, store an `Error`, log, `on_error`."""
        attempt = self._attempt(job)
        text = f"{type(exception).__name__}: {exception}"
        requeued = self.must_requeue(job, attempt)
        if requeued:
            status = "scheduled" if self.requeue_delay_delta else "pending"
            done = self.record(job, lambda: job.requeue(
                listener_id=self.id, attempt=attempt, error=text, delay=self.requeue_delay_delta,
                priority_delta=self.requeue_priority_delta or None), status)
        else:
            done = self.record(job, lambda: job.fail(text, listener_id=self.id, attempt=attempt),
                               "failed")
        if not done:
            self.job_skipped(job, queue)
            return
        self.outcome_recorded()  # the worker must not take it for lost, nor kill us now
        if self.save_errors:
            self.error_model.add_error(queue.pk.get(), job, exception,
                                       trace=trace if self.save_tracebacks else None,
                                       **self.additional_error_fields(job, queue, exception, trace))
        self.log(self.job_error_message(job, queue, exception, trace), logging.ERROR)
        job.on_error(queue, exception, trace)
        if requeued:
            self.job_requeued(job, queue)

    def must_requeue(self, job: Job, attempt: int | None) -> bool:
        """True when a failed task goes back in line (see `requeue_times`)."""
        if self.requeue_times <= 0 or job.must_be_cancelled_on_error:
            return False
        return (attempt or 1) <= self.requeue_times

    def job_requeued(self, job: Job, queue: Queue) -> None:
        """The failed task is back in line: log, then `on_requeued`."""
        self.log(self.job_requeued_message(job, queue), logging.WARNING)
        job.on_requeued(queue)

    def job_skipped(self, job: Job, queue: Queue) -> None:
        """A task taken but not run (not pending, or lost to another attempt): log, `on_skipped`."""
        self.log(self.job_skipped_message(job, queue), logging.WARNING)
        job.on_skipped(queue)

    def additional_error_fields(self, job: Job, queue: Queue, exception: BaseException,
                                trace: str | None = None) -> dict:
        """Extra fields for the stored `Error` (for a subclass of `Error`); empty here."""
        return {}

    @staticmethod
    def _attempt(job: Job) -> int | None:
        attempt = job.known.get("attempt")
        return int(attempt) if attempt else None

    # -- log lines (override to change a message) ----------------------------------------------
    @staticmethod
    def _tag(job: Job, queue: Queue) -> str:
        identifier = job.known.get("identifier")
        return f"[{queue.pk.get()}|{job.task_id}{'|' + identifier if identifier else ''}]"

    def run_started_message(self) -> str:
        mode = f"{self.concurrency} forked process(es)" if self.fork else "in-process"
        return f"started on queues {','.join(self.queues)} ({mode})"

    def run_ended_message(self) -> str:
        return f"terminated after {self.num_loops} task(s) in {self.elapsed}"

    def job_started_message(self, job: Job, queue: Queue) -> str:
        return f"{self._tag(job, queue)} started (attempt {job.known.get('attempt', '?')})"

    def job_success_message(self, job: Job, queue: Queue, result: Any) -> str:
        return f"{self._tag(job, queue)} complete"

    def job_error_message(self, job: Job, queue: Queue, exception: BaseException,
                          trace: str | None = None) -> str:
        return f"{self._tag(job, queue)} failed: {type(exception).__name__}: {exception}"

    def job_requeued_message(self, job: Job, queue: Queue) -> str:
        return f"{self._tag(job, queue)} requeued in {self.requeue_delay_delta}s"

    def job_skipped_message(self, job: Job, queue: Queue) -> str:
        return f"{self._tag(job, queue)} skipped: no longer held by this worker"

    def task_recovered_message(self, task_id: str, outcome: str | None) -> str:
        where = "back to pending" if outcome == "pending" else "failed: no attempts left"
        return f"[{task_id}] its holder is gone: {where}"

    def job_lost_message(self, job: Job, queue: Queue, status: str) -> str:
        return (f"{self._tag(job, queue)} lease lost (task now {status or 'gone'}): "
                "stopping its process")


def _wake(signum: int, frame: Any) -> None:
    """SIGCHLD handler: its only job is to exist, so the signal wakes the worker's wait."""


__all__ = ["Worker", "TaskKilled", "WorkerInterrupted"]
