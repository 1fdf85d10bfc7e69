"""`Job`: a task as its code sees it: what it does when it runs (the hooks a subclass
overrides), and the producer's API of redis-limpyd-jobs (`add_job`)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Callable, ClassVar, TypeVar

from ..exceptions import ConfigurationError, InvalidTransition, TaskNotFound, UnknownJobModel
from ..protocol.codecs import DEFAULT_CODEC, Codec
from ..protocol.encryption import Keyring
from ..protocol.keys import check_queue_name
from ..protocol.options import check_priority, eta_of, priority_of, seconds
from ..protocol.scripts import Reservation, Watched
from ..protocol.statistics import Tally
from ..protocol.statuses import FINISHED, FINISHED_BY_RUN, RETRYABLE, RUNNING, Status
from . import dependencies
from .payload import TaskValues
from .producing import enqueue_tasks
from .progress import MESSAGE_MAX, CheckpointRecord, Progress, ProgressReporter
from .task import Task
from .waiting import wait_for
from .workflow import Workflow

if TYPE_CHECKING:
    from .progress import Writer

#: the `Queue` model instance a worker hands to the hooks below. Typed loosely: the queue
#: module makes jobs and imports this one, so this one may not import it back (the
#: imports of the package run one way). Any keeps every override's annotation valid.
AnyQueue = Any

J = TypeVar("J", bound="Job")


class Job(Task):
    """A task: the hash `blueque_task_<id>`, its fields and steps (see `Task`), and what
    it does when it runs.

    Subclass it and override `run` (and the `on_*` hooks); a worker builds each task it
    runs as the model its `model` field names, among the models it was given.

    Long because it is the one class users subclass and call: a short method per hook
    and per call of the task's own API (progress, cancel, wait, its workflow), each
    delegating to the module that does the work.
    """

    #: when True, no task of this class is requeued after an error
    always_cancel_on_error = False
    #: the queue `add_job` uses when given none (redis-limpyd-jobs' attribute)
    queue_name: ClassVar[str | None] = None

    #: seconds the running task asked to wait before running again (see `delay`)
    delay_requested: float | None = None
    #: at most one progress write per this many seconds (a worker sets its own)
    progress_interval = 1.0
    _reporter: ProgressReporter | None = None
    _report_writer: Writer | None = None
    _cancel_seen = False
    _cancel_checked = 0.0
    _stop_seen = False
    #: the codec of a task that names none (its worker gives its queue's)
    default_codec: str = DEFAULT_CODEC
    #: the keys of its worker (None: its model's database's; see `values`)
    value_keys: Keyring | None = None
    #: the peak memory (bytes) of the process that ran this attempt, noted with its
    #: outcome (set by its worker for a forked task; None: not measured)
    measured_peak: int | None = None

    @classmethod
    def get_model_repr(cls) -> str:
        """The name a task records for its model (its `model` field): the class's module
        and qualified name. Override it to keep a name when the class moves."""
        return f"{cls.__module__}.{cls.__qualname__}"

    @classmethod
    def add_job(cls: type[J], identifier: str, queue_name: str | None = None,
                priority: int = 0, delayed_until: float | datetime | None = None,
                delayed_for: float | timedelta | None = None, prepend: bool = False,
                **fields: Any) -> J:
        """Add a task of this model, with redis-limpyd-jobs' meaning: at most one waiting
        task per `identifier` and queue. If one waits already, it is returned (its
        priority raised to `priority` if that is higher, moved to the front of its
        priority with `prepend`) and `fields` are not used; else a new task is made with
        `fields` (`parameters` among them, default empty).

        `queue_name` defaults to the class's `queue_name`; `delayed_until` (a moment) or
        `delayed_for` (seconds or a `timedelta`) delay it. One round trip.
        """
        if identifier is None:
            raise ConfigurationError("add_job needs an identifier")
        queue = queue_name or cls.queue_name
        if not queue:
            raise ConfigurationError(f"{cls.__name__}.add_job needs a queue_name (or the "
                                     "class attribute queue_name)")
        from_keys = {"priority": priority, "prepend": prepend, "identifier": identifier,
                     "delay": delayed_for, "eta": delayed_until}
        if cls is not Job:
            from_keys["model"] = cls
        parameters = fields.pop("parameters", "")
        return enqueue_tasks(cls, check_queue_name(queue), [parameters],
                             common={**fields, **from_keys})[0]

    def requeue(self, queue_name: str | None = None, priority: int | None = None,
                delayed_until: float | datetime | None = None,
                delayed_for: float | timedelta | None = None, *,
                listener_id: str | None = None, attempt: int | None = None,
                delay: float | timedelta | None = None, error: Any = None,
                front: bool = False, priority_delta: int | None = None,
                uncounted: bool = False, peak_rss: int | None = None) -> bool:
        """Put the task back in line, in one step: pending at once (at the back of its
        priority, or its `front`), or scheduled for later (`delay`/`delayed_for` seconds
        from now, or at `delayed_until`), with a new `priority` (or its own changed by
        `priority_delta`).

        A task held by a listener is put back by its holder: `listener_id` (default: its
        `node`) and, when given, `attempt`; `error`, when given, is stored; with
        `uncounted` this attempt does not count toward its maximum; `peak_rss` (bytes) is
        noted. Returns False when
        the caller no longer holds it (see `complete`). A failed, canceled, expired or
        buried task goes back in line with its attempts no longer counted (False if its
        status changed meanwhile). Any other status raises `InvalidTransition`; a task stays in its
        queue (`queue_name`, a redis-limpyd-jobs argument, may only name it).
        """
        queue = self._queue_name()
        if queue_name is not None and queue_name != queue:
            raise ConfigurationError(f"task {self.task_id!r} is in queue {queue!r}: a task "
                                     f"cannot move to {queue_name!r}")
        now = time.time()
        eta = eta_of(now, delay if delay is not None else delayed_for, delayed_until)
        if priority is not None:
            priority = check_priority(priority)
        if listener_id is None and attempt is None:
            status = self.status.hget()
            if status in RETRYABLE:
                return self._retry(queue, str(status), now, eta, front, priority)
            if status not in RUNNING:
                raise InvalidTransition(self.task_id, status, Status.PENDING, "only a held, "
                                        "failed, canceled, expired or buried task is requeued")
        if priority is not None:
            priority_delta = priority - priority_of(self.priority.hget())
        return self._put_back(queue, listener_id, attempt, now, eta=eta, error=error,
                              front=front, priority_delta=priority_delta, uncounted=uncounted,
                              peak_rss=peak_rss)

    def delay(self, wait: float | timedelta) -> None:
        """From inside the task's code: run it again `wait` seconds from now (a number or a
        `timedelta`). When the code returns, the task goes back to the scheduled set: not a
        failure, no retry used, its result not stored (raising `Delay` does the same)."""
        self.delay_requested = seconds("delay", wait)

    def wait(self, timeout: float | None = None) -> Any:
        """Block until the task finishes, from a producer: its result (the text it
        stores) once complete; `TaskFailed` (with its error, and the newest `Error`
        stored for it) once failed for good; `TaskCanceled` once canceled or expired;
        `TimeoutError` after `timeout` seconds (None: no limit); `TaskNotFound` when
        there is no such task. A task finished already answers at once. Woken by the
        message its finish publishes, and reading the task every two seconds or so in
        case one is lost (see `models.waiting`). A task of another codec than the default
        gives its result decoded with it."""
        return wait_for(self.scripts(), self.keys(), self.client(), self.task_id, timeout,
                        self._read_result)

    def _read_result(self, watched: Watched) -> Any:
        """A finished task's result as `wait` gives it: the stored text, opened when it is
        encrypted and decoded when its codec is not the default."""
        values = self._values(watched.codec, watched.encrypted)
        return values.open(watched.result, "result") if not watched.codec else values.decode(
            watched.result, "result")

    def parent_results(self) -> dict[str, str]:
        """`{task_id: result}` of the tasks this one waited for (`after`, or its parents in
        its workflow) that completed: the text each stores."""
        parents = dependencies.parents_of({"parents": self.parents.hget() or ""})
        return dependencies.results_of(self.scripts(), parents) if parents else {}

    def workflow(self) -> Workflow | None:
        """The workflow this task is a node of (None: it is none's), ready to grow from
        inside the running task: the nodes it adds (`Workflow.add`, then `submit`) are also
        waited for by the tasks waiting for this one."""
        workflow_id = self.raw_field("workflow")
        if not workflow_id:
            return None
        workflow = Workflow.load(workflow_id)
        workflow.inside = self.task_id
        # the ranks of the nodes it adds, counted over this run: the same ids at each run
        ranks = self.__dict__.setdefault("_workflow_ranks", itertools.count(1))
        workflow.ranks = ranks
        return workflow

    def cancel(self) -> bool:
        """Cancel the task. A waiting one (pending, scheduled, or waiting for the tasks it
        was enqueued `after`) is canceled at once: status
        `canceled`, out of every waiting structure. A running one is asked to stop: its
        worker learns it at its next beat (within `liveness_interval`, a second by
        default), stops it and files it as canceled; from the moment of this call, any
        outcome the task records is filed as canceled instead (the cancel came first).

        True when canceled or asked; False when it had finished already (complete,
        failed, canceled or expired). A buried task raises `InvalidTransition`.
        """
        queue = self._queue_name()
        outcome = self.scripts().cancel(queue, self.task_id, time.time(), self.retention)
        if outcome.followed:
            self.follow_up(queue)
        if outcome.done or outcome.status == "requested":
            return True
        if outcome.missing:
            raise TaskNotFound(self.task_id)
        if outcome.status in FINISHED:
            return False
        self._refuse(outcome, Status.CANCELED, "only a waiting or running task can be "
                     "canceled")
        return False

    def delete(self, *, finished_only: bool = False) -> None:
        """Delete the task, with its entries, in one step: a finished task (Blueque's
        "Delete Finished Task"), and also a buried or waiting one unless `finished_only`.
        A running task raises `InvalidTransition` (`cancel` it first). The tasks waiting
        for a task deleted before it finished count it as canceled (their
        `on_parent_failure` applies)."""
        queue = self._queue_name()
        outcome = self.scripts().delete(queue, self.task_id, finished_only=finished_only)
        if not outcome.done:
            self._refuse(outcome, "deleted",
                         "only a complete, failed, canceled or expired task can be deleted"
                         if finished_only else "a running task cannot be deleted")
        if outcome.followed:  # deleted before it finished: the tasks waiting for it are told
            self.follow_up(queue)

    # -- what a running task says about itself, and what is asked of it --------------------
    def reporter(self) -> ProgressReporter:
        """The reports of this attempt (made at first use, for a task run by a worker)."""
        if self._reporter is None:
            task = self.task
            if task is None or not task.node:
                raise ConfigurationError("set_progress and checkpoint are for a running task, "
                                         "from its own code (its worker's job)")
            self._reporter = ProgressReporter(self._report_writer or self.write_report,
                                              task.attempt, self.progress_interval)
            self._reporter.canceled = self._cancel_seen
        return self._reporter

    def report_through(self,
                       writer: Callable[[str | None, str | None], bool | None]) -> None:
        """Have this attempt's reports written by `writer` (a `progress.Writer`: it takes
        what `write_report` takes, and returns what it returns) rather than by
        `write_report` here: a worker writes those of the task process it forked."""
        self._report_writer = writer

    def write_report(self, progress: str | None, checkpoint: str | None) -> bool | None:
        """The report step of this attempt, fenced by it (see `progress.ProgressReporter`):
        store `progress` and/or `checkpoint` (JSON texts); whether the task's cancel was
        asked, or None when this attempt no longer holds the task."""
        task = self.task
        assert task is not None, "a report is made for a task reserved by a worker"
        outcome, asked = self.scripts().reports.report(
            task.queue, self.task_id, task.node or "", task.attempt or None,
            progress=progress, checkpoint=checkpoint)
        return bool(asked) if outcome.done else None

    def set_progress(self, done: float, total: float | None = None,
                     message: str | None = None) -> None:
        """From inside the running task: how far it is (`done` out of `total`, and a
        `message`). Cheap in a tight loop: at most one write per `progress_interval`, the
        last value written when the task ends. Raises `Canceled` once its cancel was asked."""
        reporter = self.reporter()
        reporter.canceled = reporter.canceled or self._cancel_seen
        if message is not None and self.sealed():  # cut as a clear one would be, then sealed
            message = self.values().seal(str(message)[:MESSAGE_MAX], "progress")
        reporter.set(done, total, message)

    def flush_progress(self) -> None:
        """Write the progress not written yet (its worker calls it as the task ends)."""
        if self._reporter is not None:
            self._reporter.flush()

    def progress(self) -> Progress | None:
        """How far the task is, as last written (None: it reported no progress)."""
        return Progress.from_text(self.raw_field("progress"))

    def values(self) -> TaskValues:
        """How its stored values become values and back (its codec, its encryption: see
        models/payload.py), with its worker's keys, else its database's. Its `codec` and
        `encrypted` fields come from its reservation, else are read once (one round
        trip: a task keeps both from its enqueue on)."""
        return self._values(*self._marks())

    def _values(self, codec: str | None, encrypted: str | None) -> TaskValues:
        """`TaskValues` of this task written with `codec` (None: its default), sealed when
        `encrypted`, with its worker's keys, else its database's."""
        return TaskValues(self.task_id, codec, encrypted, default_codec=self.default_codec,
                          keyring=self.value_keys or type(self).keyring())

    def _marks(self) -> tuple[str | None, str | None]:
        """Its `codec` and `encrypted` fields (see `values`)."""
        if self.task is not None:
            return self.known.get("codec"), self.known.get("encrypted")
        if "_read_marks" not in self.__dict__:
            codec, encrypted = self.hmget("codec", "encrypted")
            self.__dict__["_read_marks"] = (codec, encrypted)
        marks: tuple[str | None, str | None] = self.__dict__["_read_marks"]
        return marks

    def payload_codec(self) -> Codec:
        """The codec of the task's parameters, result and checkpoints: the one it was
        written with (its `codec` field), else `default_codec`."""
        return self.values().codec

    def sealed(self) -> bool:
        """True when the task's values are encrypted (its `encrypted` field)."""
        return bool(self._marks()[1])  # (no codec looked up: `set_progress` asks often)

    def open_value(self, text: str | None, field: str) -> str | None:
        """The clear text of one of its stored values (see `TaskValues.open`)."""
        return self.values().open(text, field)

    def payload(self) -> Any:
        """The task's parameters, opened and decoded with its codec (the default one: a
        JSON value, or the text itself when it is no JSON); `UndecodableValue` names the
        codec of a value that does not decode."""
        if self.task is None:
            return self.values().decode(self.parameters.hget(), "parameters")
        if "_payload" not in self.__dict__:  # (read once: its worker read it already)
            self.__dict__["_payload"] = self.values().decode(self.known.get("parameters"),
                                                             "parameters")
        return self.__dict__["_payload"]

    def result_value(self) -> Any:
        """The task's stored result, opened and decoded with its codec (None: none)."""
        return self.values().decode(self.result.hget(), "result")

    def checkpoint(self, state: Any) -> bool:
        """From inside the running task: store `state` (JSON-able) as where to resume, now.
        A later attempt (after a crash, a requeue, a release or an adoption) reads it with
        `last_checkpoint`. False when this attempt no longer holds the task: an older
        attempt never overwrites the checkpoint of a newer one. `RedisFull` or
        `RedisUnavailable` when Redis cannot take it now: the task may go on, and
        checkpoint again later. A task of another codec than the default stores any state
        that codec encodes."""
        values = self.values()
        if values.plain:
            return self.reporter().checkpoint(state)
        return self.reporter().checkpoint(
            state, values.codec, (lambda text: values.seal(text, "checkpoint"))
            if values.sealed else None)

    def checkpoint_record(self) -> CheckpointRecord | None:
        """The task's last checkpoint with its attempt, time and size (None: none)."""
        return CheckpointRecord.from_text(self.raw_field("checkpoint"))

    def last_checkpoint(self) -> Any:
        """The state of the task's last checkpoint (None when it has none)."""
        record = self.checkpoint_record()
        if record is None:
            return None
        if record.codec is None:
            return record.state
        return self._values(record.codec, "1" if record.sealed else None).decode(
            record.state, "checkpoint")

    def cancel_requested(self) -> bool:
        """True once the running task's cancel was asked (`cancel`). Inside a worker, read
        at most once per `progress_interval`; its worker may also have said so."""
        if self._cancel_seen:
            return True
        now = time.monotonic()
        if self.task is None or now >= self._cancel_checked + self.progress_interval:
            self._cancel_checked = now
            self._cancel_seen = bool(self.raw_field("cancel_requested"))
        return self._cancel_seen

    def note_cancel_requested(self) -> None:
        """Its worker learned that the task's cancel was asked (any thread may call it)."""
        self._cancel_seen = True
        if self._reporter is not None:
            self._reporter.canceled = True

    def stop_requested(self) -> bool:
        """True once the worker running the task stops and hands it over
        (`on_terminate="release"`): the task should save a checkpoint and return
        `Release`, to be resumed from it by another worker."""
        return self._stop_seen

    def note_stop_requested(self, queue: AnyQueue) -> None:
        """Its worker stops and hands the task over: `stop_requested` turns true, then
        `on_stop_requested` runs (in the task's thread, between two of its statements)."""
        self._stop_seen = True
        self.on_stop_requested(queue)

    def record_canceled(self, why: Any, *, listener_id: str | None = None,
                        attempt: int | None = None, tally: Tally | None = None,
                        peak_rss: int | None = None) -> bool:
        """Its holder files the running task as canceled (it stopped on a cancel request),
        storing `why` in its `error` field; False when the caller no longer holds it.
        Counted in `tally` when given (see `complete`)."""
        return self._finish(Status.CANCELED, why, listener_id, None, self._attempt(attempt),
                            tally, peak_rss)

    @property
    def duration(self) -> timedelta | None:
        """How long the last attempt ran, for a complete or failed task started by this
        library's workers (from its `started_at` to its end); None otherwise."""
        started, status, ended = self.hmget("started_at", "status", "updated")
        if not started or not ended or status not in FINISHED_BY_RUN:
            return None
        try:
            return timedelta(seconds=max(float(ended) - float(started), 0.0))
        except ValueError:
            return None

    @property
    def must_be_cancelled_on_error(self) -> bool:
        """True when this task must not be requeued after an error (its field read from
        its reservation when it has one, so that a task process need not ask Redis)."""
        if self.always_cancel_on_error:
            return True
        if self.task is not None:
            return bool(self.known.get("cancel_on_error"))
        return bool(self.cancel_on_error.hget())

    # -- hooks a subclass overrides: called by the worker, in the process running the task
    def run(self, queue: AnyQueue) -> Any:
        """The work of the task; its return value becomes the task result.

        Override it in a subclass, or give the worker a `callback`. By default it
        raises `NotImplementedError`, which fails the task.
        """
        raise NotImplementedError(
            f"{type(self).__name__}.run is not implemented: subclass Job or give the worker "
            "a callback")

    def on_started(self, queue: AnyQueue) -> None:
        """Called just before the task runs; default does nothing."""

    def on_success(self, queue: AnyQueue, result: Any) -> None:
        """Called after the result is stored; default does nothing."""

    def on_error(self, queue: AnyQueue, exception: BaseException, trace: str | None) -> None:
        """Called after the failure is stored (and the task requeued, if it is); no-op."""

    def on_skipped(self, queue: AnyQueue) -> None:
        """Called when a task taken from a queue is not run (not pending, or lost); no-op."""

    def on_requeued(self, queue: AnyQueue) -> None:
        """Called after a failed task was put back in line for another attempt; no-op."""

    def on_delayed(self, queue: AnyQueue) -> None:
        """Called after the task, at its own request, was put back to run later; no-op."""

    def on_canceled(self, queue: AnyQueue) -> None:
        """Called after the running task was stopped on a cancel request and filed as
        canceled (in its own process, or in its worker's when its process was killed)."""

    def on_stop_requested(self, queue: AnyQueue) -> None:
        """Called, in the task's process, when its worker stops and hands it over
        (`stop_requested`); no-op. Keep it short: it interrupts the task's code, between
        two of its statements (as a signal handler; what it raises is logged)."""

    def on_stalled(self, queue: AnyQueue) -> None:
        """Called, in its worker's process, when the task's progress did not move for its
        `stall_timeout`; no-op (it may `release`, `fail` or `bury` the task)."""



class JobModels:
    """The `Job` subclasses a worker builds its tasks as, by the name each task records
    in its `model` field (`Job.get_model_repr`). Nothing is ever imported from a name read
    in Redis: a name of no given model is refused."""

    def __init__(self, default: type[Job], others: Iterable[type[Job]] = ()) -> None:
        self.default = default
        self.by_name = {model.get_model_repr(): model for model in (*others, default)}

    def model_for(self, reservation: Reservation) -> type[Job]:
        """The model of a reserved task: the one it names, else the default (a task that
        names none, written by any Blueque client). `UnknownJobModel` for another name."""
        name = reservation.fields.get("model")
        if not name:
            return self.default
        try:
            return self.by_name[name]
        except KeyError:
            known = ", ".join(sorted(self.by_name))
            raise UnknownJobModel(f"task {reservation.task_id!a} names job model {name!a}, "
                                  f"which this worker was not given (it runs: {known})") from None

    def job_for(self, reservation: Reservation) -> Job:
        """The instance of a reserved task, as its model (see `model_for`)."""
        return self.model_for(reservation).from_reservation(reservation)
