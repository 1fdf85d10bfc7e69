"""What a task process asks its worker to write, and the worker's side that writes it.

A forked task process opens no Redis connection of its own in the normal case: what its
run must write (its outcome, as the worker's hooks decided it; the `Error` record of a
failure; its progress and checkpoints) it sends to its worker, on the line the worker
handed it its task on (`processes.Channel`), after a notice on the notices pipe. The
worker, which holds the task already (the reservation was made by it, for the task
process's pid), runs the same fenced steps the task process would have run, with the same
listener id and attempt, and answers: recorded (filed canceled, perhaps), not ours any
more, written, or the error that kept it from writing. Only then does the task process
go on to the hooks that follow.

In the task process: `WorkerLink` (the requests and their answers), `RelayedOutcomes`
(the outcome recorder the worker's hooks use there) and `relayed_reports` (the writer of
its progress reports). When the worker is gone (the task process was orphaned, or its
worker died during the exchange), the task process writes for itself, on a connection
it opens then; an outcome its worker wrote before dying is recognized, never written
twice (`OutcomeRecorder.recognized`).

In the worker's process, its main thread: `Desk`, which reads the requests as they come
(never waiting on one process), writes, and keeps an outcome that Redis could not take
to try again at a later turn of the loop, for `outcome_retry_timeout`.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..exceptions import (
    REDIS_AWAY,
    ConfigurationError,
    InvalidParameters,
    LimpydBluequeError,
    ProtocolError,
    RedisFull,
    RedisUnavailable,
)
from .bounds import signals_deferred
from .outcomes import OutcomeRecorder, OutcomeStep
from .processes import Channel, DoneNotices, Payload

if TYPE_CHECKING:
    from ..models import Error, Job, Queue
    from ..models.progress import Writer
    from .contract import TaskHost
    from .running import RunningTask

#: seconds between two tries of an outcome Redis could not take
RETRY_INTERVAL = 0.5
#: the errors a task process raises as they are when its worker answers with them
_RAISED: dict[str, type[Exception]] = {cls.__name__: cls for cls in (
    RedisUnavailable, RedisFull, ConfigurationError, InvalidParameters, ProtocolError)}


# -- in the task process ----------------------------------------------------------------------
class WorkerGone(Exception):
    """The task process's worker is gone; `delivered`: the request was sent whole, so the
    worker may have written it before it died."""

    def __init__(self, delivered: bool) -> None:
        super().__init__("the worker is gone")
        self.delivered = delivered


class WorkerLink:
    """In a task process: its line to its worker, who answers its requests."""

    def __init__(self, channel: Channel, notices: DoneNotices, parent: int) -> None:
        self.channel = channel
        self.notices = notices
        self.parent = parent  # the worker's pid: a new parent means it is gone
        self.gone = False

    def ask(self, request: Payload) -> Payload:
        """The worker's answer to `request`; `WorkerGone` when it cannot answer any more.

        The signals that raise in a task's code wait until the answer is read: raised
        between the request and its answer, they would leave that answer on the line for
        the next request to read."""
        if self.gone or os.getppid() != self.parent:
            self.gone = True
            raise WorkerGone(delivered=False)
        with signals_deferred():
            self.notices.notify(DoneNotices.ASKING)
            if not self.channel.send(request):
                self.gone = True
                raise WorkerGone(delivered=False)
            reply = self.channel.receive()
        if reply is None:
            self.gone = True
            raise WorkerGone(delivered=True)
        return reply


def raised(reply: Payload) -> Exception:
    """The error a `failed` answer names, to raise in the task process (the errors of
    `_RAISED` as they are, any other as a `ProtocolError` naming it)."""
    name, message = str(reply.get("error")), str(reply.get("message"))
    kind = _RAISED.get(name)
    if kind is not None:
        return kind(message)
    return ProtocolError(f"its worker could not write it: {name}: {message}")


class RelayedOutcomes(OutcomeRecorder):
    """In a task process: the outcome recorder of the worker's hooks, which has its
    worker write each outcome (and `Error`), and writes them itself only when the worker
    is gone."""

    def __init__(self, recorder: OutcomeRecorder, link: WorkerLink) -> None:
        super().__init__(recorder.listener_id, retry_timeout=recorder.retry_timeout,
                         log=recorder.log, error_ttl=recorder.error_ttl)
        self.link = link

    def write(self, job: Job, outcome: OutcomeStep) -> bool:
        try:
            reply = self.link.ask({"ask": "outcome", "outcome": outcome.to_payload()})
        except WorkerGone as gone:
            return self.alone(job, outcome, gone.delivered)
        if reply.get("reply") == "failed":
            raise raised(reply)
        if reply.get("settled") == "canceled":  # its cancel was asked first
            job.settled = "canceled"
        return reply.get("reply") == "recorded"

    def alone(self, job: Job, outcome: OutcomeStep, delivered: bool) -> bool:
        """The worker is gone: write `outcome` here. If the worker may have written it
        before it died (`delivered`), a refusal is looked into: this attempt's outcome
        found in Redis counts as recorded."""
        queue = job.task.queue if job.task is not None else ""
        self.log(f"[{queue}|{job.task_id}] its worker is gone: the task process records "
                 "its outcome itself", logging.WARNING)
        if super().write(job, outcome):
            return True
        return delivered and self.recognized(job, outcome)

    def store_error(self, error_model: type[Error], job: Job, queue: Queue,
                    exception: BaseException, trace: str | None, **fields: Any) -> None:
        values = error_model.error_values(queue.pk.get(), job, exception, trace=trace,
                                          **fields)
        try:
            reply = self.link.ask({"ask": "error", "values": values})
        except WorkerGone as gone:
            if not (gone.delivered and stored_already(error_model, values)):
                super().store_error_values(error_model, job, queue, values)
            return
        if reply.get("reply") == "failed":
            raise raised(reply)


def stored_already(error_model: type[Error], values: dict[str, str]) -> bool:
    """True when the `Error` of these `values` is stored (its worker stored it, then died
    before saying so): an `Error` of that task with that very timestamp."""
    for pk in error_model.collection(job_pk=values["job_pk"]):
        if error_model.lazy_connect(pk).timestamp.hget() == values["timestamp"]:
            return True
    return False


def relayed_reports(link: WorkerLink, job: Job) -> Writer:
    """In a task process: the writer of `job`'s reports (see `Job.report_through`), which
    has its worker write them, or writes them itself once the worker is gone."""
    def write(progress: str | None, checkpoint: str | None) -> bool | None:
        try:
            reply = link.ask({"ask": "report", "progress": progress, "checkpoint": checkpoint})
        except WorkerGone:
            return job.write_report(progress, checkpoint)
        if reply.get("reply") == "failed":
            raise raised(reply)
        return bool(reply.get("asked")) if reply.get("reply") == "written" else None

    return write


def relay_through(host: TaskHost, job: Job, link: WorkerLink) -> RelayedOutcomes:
    """In a task process: have its worker write what the run of `job` writes: its
    reports from now on, and its outcomes through the recorder returned (which the
    `TaskProcess` hands to the worker's hooks, see `TaskRunner.recorder`)."""
    job.report_through(relayed_reports(link, job))
    return RelayedOutcomes(host.outcomes, link)


# -- in the worker's process ----------------------------------------------------------------
@dataclass
class Line:
    """The worker's end of one task process's line, and where the conversation stands."""

    channel: Channel
    asking: int = 0  # requests announced on the notices pipe, not come whole yet
    waiting: Payload | None = None  # an outcome Redis could not take, tried again later
    since: float = 0.0  # when its first try failed (monotonic)


class Desk:
    """In the worker's process, its main thread: the lines to its task processes, and the
    writes they ask for.

    Costs nothing per running task unless a task process asks something: only the lines
    announced on the notices pipe are read (`asking`), and only they end the worker's
    wait (`fds`) while their request comes in.
    """

    def __init__(self, host: TaskHost) -> None:
        self.host = host
        self.lines: dict[int, Line] = {}
        self._asking: set[int] = set()
        self._waiting: set[int] = set()

    def open(self, pid: int, channel: Channel) -> None:
        """The line to the task process `pid`, now running its task."""
        self.lines[pid] = Line(channel)

    def close(self, pid: int) -> None:
        """The task process `pid` ended: its line goes (what it still asked is dropped)."""
        line = self.lines.pop(pid, None)
        self._asking.discard(pid)
        self._waiting.discard(pid)
        if line is not None:
            line.channel.close()

    def close_all(self) -> None:
        for pid in list(self.lines):
            self.close(pid)

    def channels(self) -> list[Channel]:
        """The worker's ends of every open line (a new spare closes its copies)."""
        return [line.channel for line in self.lines.values()]

    def announced(self, pid: int) -> None:
        """The task process `pid` said a request follows on its line."""
        line = self.lines.get(pid)
        if line is not None:
            line.asking += 1
            self._asking.add(pid)

    @property
    def busy(self) -> bool:
        """True when a request is coming in, or an outcome waits for another try."""
        return bool(self._asking or self._waiting)

    def fds(self) -> list[int]:
        """The lines whose request is coming in: their data ends the worker's wait."""
        return [self.lines[pid].channel.fileno() for pid in self._asking]

    def heard(self, by_pid: dict[int, RunningTask]) -> list[tuple[RunningTask, Payload]]:
        """The requests that came whole since the last call, with their task."""
        found: list[tuple[RunningTask, Payload]] = []
        for pid in list(self._asking):
            line = self.lines[pid]
            messages = line.channel.receive_ready()
            line.asking = 0 if line.channel.ended else max(line.asking - len(messages), 0)
            if not line.asking:
                self._asking.discard(pid)
            task = by_pid.get(pid)
            if task is not None:
                found.extend((task, message) for message in messages)
        return found

    def due(self, by_pid: dict[int, RunningTask]) -> list[tuple[RunningTask, Payload]]:
        """The outcomes to try again now (Redis could not take them earlier)."""
        now = time.monotonic()
        found: list[tuple[RunningTask, Payload]] = []
        for pid in list(self._waiting):
            task, waiting = by_pid.get(pid), self.lines[pid].waiting
            if task is not None and waiting is not None and (task.retry_at or 0.0) <= now:
                found.append((task, waiting))
        return found

    def write(self, task: RunningTask, request: Payload) -> Payload | None:
        """Write what `task`'s process asked; the answer, or None while an outcome waits
        for another try."""
        kind = request.get("ask")
        try:
            if kind == "outcome":
                return self.write_outcome(task, request)
            if kind == "report":
                asked = task.job.write_report(request.get("progress"),
                                              request.get("checkpoint"))
                return {"reply": "lost"} if asked is None else {"reply": "written",
                                                                  "asked": asked}
            if kind == "error":
                self.host.outcomes.store_error_values(self.host.error_model, task.job,
                                                      task.queue, request["values"])
                return {"reply": "stored"}
            raise ProtocolError(f"a task process asked for {kind!a}, which is no request")
        except Exception as error:  # noqa: BLE001 - the task process waits: it must hear it
            if not isinstance(error, LimpydBluequeError):
                self.host.log(f"[{task.queue_name}|{task.task_id}] could not write what its "
                              "process asked", logging.ERROR, exc_info=True)
            return {"reply": "failed", "error": type(error).__name__, "message": str(error)}

    def write_outcome(self, task: RunningTask, request: Payload) -> Payload | None:
        """Record the outcome `task`'s process sent, through the fenced step of its kind;
        while Redis cannot take it, try again at a later turn, for `outcome_retry_timeout`
        (past that, the error is the answer)."""
        pid = task.pid
        assert pid is not None, "a forked task has its process"
        line, recorder = self.lines[pid], self.host.outcomes
        outcome = OutcomeStep.from_payload(request["outcome"])
        retry = line.waiting is not None
        try:
            done = recorder.try_once(task.job, outcome, retry=retry)
        except REDIS_AWAY as error:
            now = time.monotonic()
            since = line.since if retry else now
            if now - since > recorder.retry_timeout:
                self.settle(pid, task, line)
                raise
            self.host.log(f"{error}; retrying", logging.WARNING)
            line.waiting, line.since, task.retry_at = request, since, now + RETRY_INTERVAL
            self._waiting.add(pid)
            return None
        self.settle(pid, task, line)
        return {"reply": "recorded" if done else "refused", "settled": task.job.settled}

    def settle(self, pid: int, task: RunningTask, line: Line) -> None:
        """No outcome of `task` (run by `pid`) waits for another try any more."""
        line.waiting, task.retry_at = None, None
        self._waiting.discard(pid)

    def answer(self, task: RunningTask, reply: Payload) -> None:
        """Send `task`'s process its answer (lost with the process if it is gone)."""
        line = self.lines.get(task.pid) if task.pid is not None else None
        if line is not None:
            line.channel.send(reply)
