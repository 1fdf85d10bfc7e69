"""The worker: takes tasks from its queues and runs them, each in a process of its own or
in-process.

`Worker` is the loop with its hooks and their log lines, one contract: subclass it and
override its small methods. It is composed of parts, each testable alone and each seeing
the worker through an interface of `contract`: its settings (`settings`, one table), how
a task runs (`runners`, `task_process`), what keeps the leases (`heartbeat`), the
running tasks with their state machine (`running`), what is taken back from dead
holders (`recovery`) and how outcomes are recorded (`outcomes`).
"""

from __future__ import annotations

import logging
import os
import signal
import time
import traceback
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, cast

from ..connection.clients import BluequeDatabase, private_client, safety_warnings
from ..exceptions import (
    HOUSEKEEPING_ERRORS,
    REDIS_AWAY,
    Canceled,
    ConfigurationError,
    Delay,
    InvalidParameters,
    LimpydBluequeError,
    MisfitKeySetAside,
    ProtocolError,
    QuarantinedTask,
    Release,
    Retry,
    TaskKilled,
    UnknownJobModel,
    WorkerInterrupted,
)
from ..models import Job, JobModels, Queue
from ..protocol.bounds import BOUND_TERMS, Bounds
from ..protocol.bounds import resolve as resolve_bounds
from ..protocol.codecs import UndecodableValue, UnknownCodec
from ..protocol.encryption import Keyring, TamperedValue, UnknownEncryptionKey
from ..protocol.liveness import listener_id_for
from ..protocol.options import renewal_period, seconds
from ..protocol.retries import RETRY_TERMS, RetryPolicy, asked_delay
from ..protocol.retries import resolve as resolve_retry
from ..protocol.scripts import PassedOver, Reservation
from ..protocol.statistics import Tally
from ..protocol.values import is_text, printable
from .bounds import can_watch_memory
from .controls import Controls
from .heartbeat import LeaseKeeper, Terms
from .outcomes import OutcomeRecorder, counted_attempts, error_text
from .processes import WakeUps
from .recovery import Recovery
from .runners import ForkedRunner, InProcessRunner, TaskRunner
from .running import RunningTask, RunningTasks
from .scheduling import DueTasks, Followers
from .settings import WorkerSettings
from .watch import TaskWatch

#: errors of a task that cannot run as it is: it is failed, never requeued
UNRUNNABLE = (InvalidParameters, UnknownJobModel, QuarantinedTask, UnknownCodec,
              UndecodableValue, UnknownEncryptionKey, TamperedValue)


class Worker(WorkerSettings):
    """Runs the tasks of some queues until told to stop.

    The loop (`run`) registers the worker as a Blueque listener on each queue, then
    repeats `run_once`: apply what happened to running tasks, move due scheduled tasks,
    clean, and if a slot is free take the next task (or wait for one to be announced).
    Each task runs `execute` (the `callback` or the job's `run`), and its outcome goes
    through `job_success` or `job_error`. Every setting is a class attribute and a
    keyword (see `settings.WorkerSettings`).

    One class, though long: it is what an application subclasses, so every method a
    subclass overrides (the loop's steps, the hooks around each task, and the log line of
    each, see README.rst's "Hooks and overridable methods") is here, beside the state
    they share. What needs no overriding lives in its parts (`runners`, `heartbeat`,
    `recovery`, `outcomes`, `watch`, `scheduling`), which see the worker only through
    the interfaces of `contract`.
    """

    #: settings that are None until `validate` derives them from `ttr`: numbers once the
    #: worker is made
    heartbeat_interval: float
    clean_interval: float

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
        #: a stop was asked, by a signal or an order: `on_terminate` applies
        self.end_signal_caught = False
        self._signals_caught = 0
        self.start_date: datetime | None = None
        self.end_date: datetime | None = None
        self.tasks = RunningTasks()
        self.runner: TaskRunner = self.make_runner()
        self.models = JobModels(self.job_model, self.job_models)
        #: the counters of the steps this worker runs, written once a second at most
        self.tally = Tally()
        self.outcomes = OutcomeRecorder(self.id, retry_timeout=self.outcome_retry_timeout,
                                        log=self.log, error_ttl=self.error_ttl,
                                        tally=self.tally)
        self.keeper: LeaseKeeper | None = None
        self.recovery: Recovery | None = None
        self.wakeups: WakeUps | None = None
        self._queues: dict[str, Queue] = {}
        self.due = DueTasks([self.queue(name) for name in self.queues], self.schedule_interval,
                            log=self.log)
        self.followers = Followers([self.queue(name) for name in self.queues],
                                   retention=self.retention, log=self.log)
        self.controls = Controls(self.queue_model, self.id, self.queues)
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
                             liveness_timeout=self.liveness_timeout,
                             describe=self.describe)
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
            self.heartbeat_interval = renewal_period(self.ttr) if self.ttr else 30.0
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
        self.keyring = self.make_keyring()

    def make_keyring(self) -> Keyring | None:
        """The keys that open and seal its tasks' values: `encryption_keys`, or those of
        `encryption_keys_file`, else those the models were bound with (`use_redis`)."""
        if self.encryption_keys and self.encryption_keys_file:
            raise ConfigurationError("give encryption_keys or encryption_keys_file, not both")
        keyring = (Keyring(self.encryption_keys) if self.encryption_keys
                   else Keyring.from_file(self.encryption_keys_file)
                   if self.encryption_keys_file else None)
        if keyring is None:
            return self.job_model.keyring()
        database = self.job_model.database
        if isinstance(database, BluequeDatabase) and database.keyring is None:
            # what its tasks enqueue (children, workflow nodes) is sealed with them too
            database.keyring = keyring
        return keyring

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
        """Stop taking tasks; a second signal interrupts running tasks and requeues them (a
        `stop` order, then a signal, is one stop: orchestrators send both)."""
        self._signals_caught += 1
        if self._signals_caught > 1:
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
        self.controls.forget()  # an order left for an earlier worker of this id
        self.controls.refresh()  # paused queues known before the first reserve
        self.wakeups = WakeUps(private_client(self.queue_model.client()),
                               self.queue_model.wake_channels(self.queues),
                               also=self.runner.wakeup_fds)
        self.tasks.wake = self.wakeups.wake
        self.keeper = self.make_keeper()
        self.keeper.start()  # also says, at once, that this worker is alive
        self.recovery = self.make_recovery(self.keeper)
        self.log(self.run_started_message())
        for warning in safety_warnings(self.queue_model.client()):
            self.log(f"Redis configuration: {warning}", logging.WARNING)
        self.set_status("waiting")

    def run_once(self) -> None:
        """One turn of the loop; an unexpected error is logged and the loop goes on."""
        try:
            self.collect()
            self.move_due_tasks()
            self.clean()
            if self.tally.due():
                self.write_tally()
            self.obey()
            if self.end_forced:
                return
            if len(self.tasks) < self.concurrency and self.controls.open_queues():
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
            self.write_tally()
            if self.controls.order == "stop":  # done: not for the next worker of this id
                try:
                    self.queue_model.tell_worker(self.id, None)
                except REDIS_AWAY:  # the next worker of this id forgets it at its start
                    pass
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

    def obey(self) -> None:
        """Read what operators asked (paused queues, an order to this worker) about once a
        second, and log what changed; a `stop` order stops it as SIGTERM does."""
        was_paused, order_before = self.controls.paused, self.controls.order
        if not self.controls.refresh():
            return
        for name in sorted(self.controls.paused - was_paused):
            self.log(f"[{name}] paused: no new task taken from it")
        for name in sorted(was_paused - self.controls.paused):
            self.log(f"[{name}] resumed")
        order = self.controls.order
        if order == order_before:
            return
        if order == "stop":  # (removed once stopped: it reads as stopping until then)
            self.log("told to stop: no new task taken, then stopping", logging.WARNING)
            self.end_forced = self.end_signal_caught = True  # its tasks as on_terminate says
            self.runner.stop_signal()
        elif order == "quiet":
            self.log("told to be quiet: no new task taken", logging.WARNING)
        else:
            self.log("no longer quiet: taking tasks again")

    def describe(self) -> dict[str, Any]:
        """What this worker says of itself at each beat: its concurrency, how many tasks
        it runs, its host's load (1 minute) and its state (`waiting`, `running`, `quiet`,
        `stopping`...), and its queues paused."""
        state = self.status or "starting"
        if self.end_forced and state not in ("terminating", "terminated"):
            state = "stopping"
        elif self.controls.order == "quiet":
            state = "quiet"
        try:
            load: float | None = round(os.getloadavg()[0], 2)
        except OSError:  # not known on this platform
            load = None
        return {"concurrency": self.concurrency, "running_count": len(self.tasks),
                "load": load, "state": state, "paused": sorted(self.controls.paused)}

    def write_tally(self) -> None:
        """Add what this worker counted since the last time to its queues' counters (kept
        for the next time while Redis is away)."""
        try:
            self.queue_model.write_tally(self.tally)
        except REDIS_AWAY as error:
            self.log(f"the queues' counters were not written: {error}", logging.WARNING)

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
        until = min(until, time.monotonic() + self.tally.until_due(),
                    time.monotonic() + self.controls.until_due())
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
            self.controls.open_queues(), self.id, pid=pid, pstart=pstart, ttr=self.ttr,
            max_run_time=self.max_run_time, max_attempts=self.max_attempts,
            job_model=self.job_model, report=passed.append, tally=self.tally,
            unlimited=self.controls.unlimited())
        for report in passed:
            self.passed_over(report)
        if job is not None and reservation is not None:
            return job, self.queue(reservation.queue)
        if not any(report.more for report in passed):  # else: more to pass over, at once
            self.wait(self.wait_time())
        return None, None

    def move_due_tasks(self) -> None:
        """Move due scheduled tasks of the worker's queues to pending, every `schedule_interval`;
        tell the tasks waiting for their finished tasks, about twice a second."""
        self.due.move()
        self.followers.follow()

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
            with self.runner.bounded(job):
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
        if result is Release or isinstance(result, Release):
            return self.released(job, queue)
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
        if isinstance(exception, Release) and not job.settled:
            return self.released(job, queue)
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
        """Give a task the worker's progress interval, retention, and its queue's codec
        (for a task that names none)."""
        job.progress_interval = self.progress_interval
        job.retention = self.retention
        job.default_codec = self.codecs.get(job.known.get("queue") or "", self.codec)
        job.value_keys = self.keyring
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
        it cannot run as it is (its parameters are not text, or do not decode with its
        codec, it names a codec not known here or a model this worker was not given): it
        is then failed once, with an error naming the problem."""
        self.equip(job)
        try:
            if job.values().plain and not is_text(job.known.get("parameters")):
                raise InvalidParameters("task parameters are not valid UTF-8 text: the "
                                        "task cannot be decoded")
            assert job.task is not None, "a reserved job comes from its reservation"
            model = self.models.model_for(job.task)
            prepared = self.equip(job if type(job) is model
                                  else model.from_reservation(job.task))
            if not prepared.values().plain:
                prepared.payload()  # a value it cannot open or read fails the task here,
                # once (and the task reads it decoded already)
        except UNRUNNABLE as error:
            self.job_error(job, queue, error)
            return None
        return prepared

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

    def recorder(self) -> OutcomeRecorder:
        """What records the outcomes of the task running here: this worker's recorder,
        or in a task process the one its runner handed it (through the worker)."""
        return self.runner.recorder(self.outcomes)

    def retrying(self, step: Callable[[], Any]) -> Any:
        """Run `step`, retrying for `outcome_retry_timeout` seconds while Redis is away."""
        return self.recorder().retrying(step)

    def passed_over(self, passed: PassedOver) -> None:
        """What a reserve step passed over: ids that were not pending tasks (one line with
        their count), quarantined tasks (`task_quarantined` each), queues with a key of
        another type (`key_set_aside`, else one line a minute each), tasks past their ttl
        (expired, one line); the other queues went on."""
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
            misfit = passed.misfits.get(queue_name)
            if misfit is not None and self.key_set_aside(self.queue(queue_name), *misfit):
                continue
            if self._broken_logged.get(queue_name, 0.0) <= now:
                self._broken_logged[queue_name] = now + 60
                self.log(f"[{queue_name}] skipped: {problem!a}", logging.ERROR)

    def key_set_aside(self, queue: Queue, key: str, kind: str) -> bool:
        """A structure of `queue` holds another type of value than `kind` (a reserve step
        said so): move it aside (`Queue.set_aside`) so that the queue goes on at the next
        turn, store an `Error` of the queue (`MisfitKeySetAside`) and log one line. True
        when the queue may go on (moved, or of its type again)."""
        try:
            moved = queue.set_aside(key, kind, self.id)
        except LimpydBluequeError as refused:
            self.log(f"[{queue.pk.get()}] {key!a} could not be set aside: {refused}",
                     logging.ERROR)
            return False
        if moved is None:
            return True
        error = MisfitKeySetAside(key, moved[0], kind, moved[1])
        if self.save_errors:
            try:
                self.error_model.add_queue_error(queue.pk.get(), error, ttl=self.error_ttl)
            except REDIS_AWAY as away:
                self.log(f"[{queue.pk.get()}] its Error record was not stored: {away}",
                         logging.ERROR)
        self.log(f"[{queue.pk.get()}] {error}", logging.ERROR)
        return True

    def task_quarantined(self, task_id: str, queue: Queue, problem: str) -> None:
        """A task that could not be run as it is was failed and filed by the reserve step:
        store an `Error` naming the problem, and log one line."""
        error = QuarantinedTask(task_id, problem)
        job = self.job_model.from_reservation(Reservation(task_id, queue.pk.get(), {}))
        if self.save_errors:
            self.recorder().store_error(self.error_model, job, queue, error, None)
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
        if self.recorder().cancel(task.job) or task.job.data().status_in(
                "canceled", attempt=task.attempt):
            self.job_canceled(task.job, task.queue)

    def cancel_asked(self, job: Job, queue: Queue) -> bool:
        """The task stopped on its cancel (it raised `Canceled`): file it as canceled."""
        (self.job_canceled if self.recorder().cancel(job) else self.job_skipped)(job, queue)
        return False

    def released(self, job: Job, queue: Queue) -> bool:
        """The task returned (or raised) `Release`: put it back at the front of its line
        as it is, its attempt not counted, for another worker to resume from its
        checkpoint; a task no longer held is skipped."""
        if not self.recorder().release(job):
            self.job_skipped(job, queue)
            return False
        if job.settled == "canceled":  # its cancel was asked first
            self.job_canceled(job, queue)
            return False
        self.runner.recorded(job)
        self.log(f"{self._tag(job, queue)} released: back at the front of its queue, to "
                 "resume from its checkpoint")
        return False

    def requeue_released(self, task: RunningTask) -> None:
        """A released task's process ended without putting it back (past its
        `release_timeout`, killed): put it back at the front of its queue, its attempt
        not counted, if it is still ours (the attempt fences the old process out)."""
        if task.job.requeue(listener_id=task.reservation.node or self.id, attempt=task.attempt,
                            front=True, uncounted=True, peak_rss=task.job.measured_peak):
            self.log(f"[{task.queue_name}|{task.task_id}] released: back at the front of the "
                     "queue, to resume from its checkpoint")

    def requeue_interrupted(self, task: RunningTask, *, uncounted: bool = True) -> None:
        """Put an interrupted task back at the front of its queue, if it is still ours: its
        worker stopped (not the task's failure: the attempt is not counted), or its
        process could not reach Redis (counted: Redis full may be the task's doing)."""
        if task.job.requeue(listener_id=task.reservation.node or self.id, attempt=task.attempt,
                            front=True, uncounted=uncounted, peak_rss=task.job.measured_peak):
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
            text = job.values().encode(result, "result")
        except InvalidParameters as error:
            trace = traceback.format_exc() if self.save_tracebacks else None
            self.job_error(job, queue, error, trace)
            return
        if not self.recorder().complete(job, text):
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
        """Record a failure: requeue (after the delay its retry policy gives) or fail the
        task, store an `Error`, log, `on_error`."""
        delay = self.retry_delay_for(job, queue, exception)
        requeued = delay is not None
        text = error_text(exception)
        if delay is not None:
            job.__dict__["_retry_in"] = delay
            done = self.recorder().requeue(job, text, delay=delay,
                                         priority_delta=self.requeue_priority_delta)
        else:
            done = self.recorder().fail(job, text)
        if not done:
            self.job_skipped(job, queue)
            return
        if job.settled == "canceled":  # its cancel was asked first: not a failure
            self.job_canceled(job, queue)
            return
        self.runner.recorded(job)  # the worker must not take it for lost, nor kill it now
        if self.save_errors:
            self.recorder().store_error(
                self.error_model, job, queue, exception, trace if self.save_tracebacks else None,
                **self.additional_error_fields(job, queue, exception, trace))
        self.log(self.job_error_message(job, queue, exception, trace), logging.ERROR)
        job.on_error(queue, exception, trace)
        if requeued:
            self.job_requeued(job, queue)

    def must_requeue(self, job: Job, attempt: int | None) -> bool:
        """True when a failed task may go back in line: it has retries left (see
        `requeue_times` and `retry_policy`); `attempt` counts its failed attempts, this
        one included (not the delays it asked for)."""
        if job.must_be_cancelled_on_error:
            return False
        return (attempt or 1) <= self.retry_policy(job).retries

    def retry_delay_for(self, job: Job, queue: Queue, exception: BaseException) -> float | None:
        """Seconds before the next attempt of a task whose attempt failed with
        `exception`, or None when it fails for good: a task that cannot run, one whose
        `must_requeue` says no (unless it raised `Retry`), one whose error type is in its
        `no_retry_for`, or whose next attempt would start past its `retry_deadline`."""
        if isinstance(exception, UNRUNNABLE) or job.must_be_cancelled_on_error:
            return None
        attempt = counted_attempts(job) or 1
        policy = self.retry_policy(job)
        asked = None
        if isinstance(exception, Retry):  # (a delay that is none: its policy's)
            asked = asked_delay(exception.delay)
            if asked is None:
                asked = policy.delay_before(attempt)
        elif not self.must_requeue(job, attempt):
            return None
        created = job.known.get("created")
        try:
            since = float(created) if created else None
        except ValueError:
            since = None
        limit = job.task.max_attempts if job.task is not None else self.max_attempts
        # (`must_requeue` said yes: the count is not checked again, it may be overridden)
        return policy.next_delay(exception, attempt, since, time.time(), asked=asked,
                                 max_attempts=limit, counted=asked is not None)

    def retry_policy(self, job: Job) -> RetryPolicy:
        """The retry policy of a task: its own fields, else its queue's settings (as the
        worker read them last, twice a second: no read here, where a task process may
        be), else this worker's (see protocol/retries.py)."""
        found = job.__dict__.get("_retry_policy")
        if found is None:
            queue_settings = self.queue_terms(job.known.get("queue") or "")
            worker = {name: getattr(self, name) for name in (
                "requeue_times", "requeue_delay_delta", *RETRY_TERMS, "no_retry_for")}
            limit = job.task.max_attempts if job.task is not None else self.max_attempts
            found = job.__dict__["_retry_policy"] = resolve_retry(job.known, queue_settings,
                                                                  worker, limit)
        return cast("RetryPolicy", found)

    def bounds_of(self, job: Job) -> Bounds:
        """The memory, CPU and soft time bounds of a task: its own fields, else its
        queue's settings (as last read), else this worker's (see protocol/bounds.py)."""
        return resolve_bounds(job.known, self.queue_terms(job.known.get("queue") or ""),
                              {name: getattr(self, name) for name in BOUND_TERMS})

    def queue_terms(self, name: str) -> Mapping[str, str]:
        """The queue's own retry settings and bounds, as this worker read them last."""
        return self.controls.terms.get(name, {})

    def job_requeued(self, job: Job, queue: Queue) -> None:
        """The failed task is back in line: log, then `on_requeued`."""
        self.log(self.job_requeued_message(job, queue), logging.WARNING)
        job.on_requeued(queue)

    def job_delayed(self, job: Job, queue: Queue) -> None:
        """The task asked to run again `job.delay_requested` seconds from now: back to the
        scheduled set (not a failure, no retry used), log, then `on_delayed`; a task no
        longer held by this worker is skipped."""
        if not self.recorder().delay(job, job.delay_requested or 0.0):
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

    # -- log lines: one method each, for a subclass to change ------------------------------------
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
        delay = job.__dict__.get("_retry_in", self.requeue_delay_delta)
        return f"{self._tag(job, queue)} requeued in {delay:g}s"

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
    if not runner.can_bound:
        for name in ("max_memory", "cpu_limit"):
            if getattr(worker, name) is not None:
                raise ConfigurationError(f"{name} needs fork=True: in the worker's own process, "
                                         "its memory and CPU time would count")
        if worker.on_terminate == "release":
            raise ConfigurationError("on_terminate='release' needs fork=True: an in-process "
                                     "task cannot be stopped at its release_timeout")
    elif worker.max_memory is not None and not can_watch_memory():
        raise ConfigurationError("max_memory needs /proc (Linux) to read the memory of tasks")
    if not runner.can_time_out and worker.terminate_timeout is not None:
        raise ConfigurationError("terminate_timeout needs fork=True: an in-process task "
                                 "stops only for on_terminate='requeue' or a second signal")
