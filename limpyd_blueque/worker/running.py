"""The tasks a worker runs, and the one state machine each of them follows.

A running task changes state only through `RunningTask.move`, from the worker's own
thread: other threads (the heartbeat) and other processes (task processes, through
their notices) post events, which the loop applies. What each transition makes the
worker do is `runners.TaskRunner.apply`'s business.

::

                 RECORDED            ENDED
    RUNNING ─────────────> RECORDED ─────────> ENDED
       │  LEASE_LOST  ─> LOST        ─ENDED─>    ▲
       │  OVERDUE     ─> TIMED_OUT   ─ENDED─>    │   (over its run time or a bound)
       │  INTERRUPT   ─> INTERRUPTED ─ENDED─>    │
       │  CANCEL      ─> CANCELING   ─ENDED─>    │   (or RECORDED, or LEASE_LOST)
       │  RELEASE     ─> RELEASING   ─ENDED─>    │   (or RECORDED, LEASE_LOST, CANCEL)
       └──────────────────── ENDED ──────────────┘
"""

from __future__ import annotations

import queue as queues
import threading
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any, Callable

from ..exceptions import TaskKilled
from ..protocol.bounds import Bounds
from ..protocol.scripts import Lease, Reservation

if TYPE_CHECKING:
    from ..models import Job, Queue
    from .bounds import Usage


class TaskState(str, Enum):
    """Where a running task stands, as its worker sees it."""

    RUNNING = "running"          # its process runs it; its lease is renewed
    RECORDED = "recorded"        # its outcome is in Redis; its hooks may still run
    LOST = "lost"                # another attempt holds it now: its process is stopped
    TIMED_OUT = "timed_out"      # over its maximum run time or a bound: its process is killed
    INTERRUPTED = "interrupted"  # the worker stops: its process is stopped, it goes back
    CANCELING = "canceling"      # its cancel was asked: its process is stopped, it is canceled
    RELEASING = "releasing"      # the worker stops: the task is told to save its place and
                                 # return `Release`; put back as it is (killed past a timeout)
    ENDED = "ended"              # its process is gone; its slot is free


class Event(str, Enum):
    """What can happen to a running task."""

    RECORDED = "recorded"      # its process said its outcome is stored
    LEASE_LOST = "lease_lost"  # the heartbeat found it held by another attempt, or gone
    OVERDUE = "overdue"        # it ran past its maximum run time
    INTERRUPT = "interrupt"    # the worker stops and puts it back in line
    CANCEL = "cancel"          # its cancel was asked (`Job.cancel`)
    RELEASE = "release"        # the worker stops and hands it over (on_terminate="release")
    ENDED = "ended"            # its process is gone, or said it is done


S, E = TaskState, Event
#: every allowed transition; an event with no entry for the current state is ignored
TRANSITIONS: dict[tuple[TaskState, Event], TaskState] = {
    (S.RUNNING, E.RECORDED): S.RECORDED,
    (S.RUNNING, E.LEASE_LOST): S.LOST,
    (S.RUNNING, E.OVERDUE): S.TIMED_OUT,
    (S.RUNNING, E.INTERRUPT): S.INTERRUPTED,
    (S.RUNNING, E.CANCEL): S.CANCELING,
    (S.RUNNING, E.RELEASE): S.RELEASING,
    (S.RELEASING, E.RECORDED): S.RECORDED,
    (S.RELEASING, E.LEASE_LOST): S.LOST,
    (S.RELEASING, E.CANCEL): S.CANCELING,
    (S.RELEASING, E.ENDED): S.ENDED,
    (S.CANCELING, E.RECORDED): S.RECORDED,
    (S.CANCELING, E.LEASE_LOST): S.LOST,
    (S.CANCELING, E.ENDED): S.ENDED,
    (S.RUNNING, E.ENDED): S.ENDED,
    (S.RECORDED, E.ENDED): S.ENDED,
    (S.LOST, E.ENDED): S.ENDED,
    (S.TIMED_OUT, E.RECORDED): S.RECORDED,
    (S.TIMED_OUT, E.ENDED): S.ENDED,
    (S.INTERRUPTED, E.ENDED): S.ENDED,
}


class Origin(str, Enum):
    """Who runs the task's code."""

    FORKED = "forked"        # a task process this worker forked
    IN_PROCESS = "in-process"  # the worker process itself
    ADOPTED = "adopted"      # a process a stopped worker left running, watched by pid


@dataclass(eq=False)
class RunningTask:
    """A task this worker runs or watches: its reservation, its process, its state."""

    job: Job
    queue: Queue
    origin: Origin
    pid: int | None = None
    pstart: str | None = None
    state: TaskState = TaskState.RUNNING
    started: float = field(default_factory=time.monotonic)
    #: when its progress last moved (Unix time; its start until it reports any)
    moved_at: float = field(default_factory=time.time)
    #: when it was flagged stalled (None: it is not)
    stalled_since: float | None = None
    #: when its process gets SIGKILL after a cancel (monotonic; None: not canceling)
    kill_at: float | None = None
    #: when the worker tries again to record the outcome its process sent, which Redis
    #: could not take (monotonic; None: no outcome waits)
    retry_at: float | None = None
    #: the deadline of its lease as last written by this worker (see `Lease.written`)
    lease: str = ""
    #: when the beat last read its progress (Unix time; 0: never)
    progress_read_at: float = 0.0
    #: its memory, CPU and soft time bounds, as resolved when it was launched
    bounds: Bounds = field(default_factory=Bounds)
    #: the bound it went over, which its process was killed for (None: none)
    over_limit: TaskKilled | None = None
    #: with on_terminate="release": when its process was told to stop (monotonic)
    release_asked: float | None = None
    #: what its process used, once it ended (a forked task's, from the kernel)
    usage: Usage | None = None

    def __post_init__(self) -> None:
        if not self.lease and self.job.task is not None:
            self.lease = self.job.task.lease or ""

    @property
    def reservation(self) -> Reservation:
        assert self.job.task is not None, "a running task's job comes from its reservation"
        return self.job.task

    @property
    def task_id(self) -> str:
        return self.reservation.task_id

    @property
    def queue_name(self) -> str:
        return self.reservation.queue

    @property
    def attempt(self) -> int:
        return self.reservation.attempt

    @property
    def ttr(self) -> float | None:
        return self.reservation.ttr

    @property
    def max_run_time(self) -> float | None:
        return self.reservation.max_run_time

    @property
    def overdue(self) -> bool:
        """True once it runs past its maximum run time (and is still running)."""
        return (self.state is TaskState.RUNNING and self.max_run_time is not None
                and time.monotonic() - self.started > self.max_run_time)

    def move(self, event: Event) -> TaskState | None:
        """Apply `event`: the new state, or None when the event does not apply now."""
        new = TRANSITIONS.get((self.state, event))
        if new is not None:
            self.state = new
        return new


@dataclass(frozen=True)
class Posted:
    """An event posted for a task, with what goes with it (e.g. a process's exit status)."""

    task_id: str
    attempt: int
    event: Event
    detail: Any = None


class RunningTasks:
    """The running tasks of a worker, by id, and the events posted for them.

    Other threads read `snapshot` and `post` events; only the worker's thread adds,
    removes and moves tasks. `wake` (given by the worker) ends its wait at once.
    """

    def __init__(self, wake: Callable[[], None] = lambda: None) -> None:
        self._tasks: dict[str, RunningTask] = {}
        self._lock = threading.Lock()
        self._inbox: queues.SimpleQueue[Posted] = queues.SimpleQueue()
        self.wake = wake

    def __len__(self) -> int:
        return len(self._tasks)

    def __contains__(self, task_id: object) -> bool:
        return task_id in self._tasks

    def add(self, task: RunningTask) -> None:
        with self._lock:
            self._tasks[task.task_id] = task

    def remove(self, task: RunningTask) -> None:
        with self._lock:
            if self._tasks.get(task.task_id) is task:
                del self._tasks[task.task_id]

    def get(self, task_id: str) -> RunningTask | None:
        return self._tasks.get(task_id)

    def snapshot(self) -> list[RunningTask]:
        """The tasks now, safe to read from any thread."""
        with self._lock:
            return list(self._tasks.values())

    def ids(self) -> list[str]:
        return sorted(self._tasks)

    def by_pid(self) -> dict[int, RunningTask]:
        return {task.pid: task for task in self.snapshot() if task.pid is not None}

    def leases(self) -> list[Lease]:
        """The leases to renew: of the tasks still running."""
        return [Lease(t.queue_name, t.task_id, t.attempt, t.ttr, t.lease) for t in self.snapshot()
                if t.state in (TaskState.RUNNING, TaskState.TIMED_OUT, TaskState.CANCELING,
                               TaskState.RELEASING)]

    def renewed(self, leases: list[Lease], deadlines: dict[str, str]) -> None:
        """Note the deadlines a renewal wrote, for the attempts it renewed (any thread)."""
        for lease in leases:
            task = self._tasks.get(lease.task_id)
            if task is not None and task.attempt == lease.attempt and lease.task_id in deadlines:
                task.lease = deadlines[lease.task_id]

    def watched(self) -> bool:
        """True when some task needs the loop to look often (a run time limit, adoption,
        a cancel's grace period, an outcome to try again, a memory bound)."""
        return any(t.max_run_time or t.origin is Origin.ADOPTED or t.kill_at is not None
                   or t.retry_at is not None or t.bounds.max_memory for t in self.snapshot())

    # -- events from other threads ---------------------------------------------------------
    def post(self, task: RunningTask, event: Event, detail: Any = None) -> None:
        """Post `event` for `task` (any thread); the worker applies it at its next turn."""
        self.post_for(task.task_id, task.attempt, event, detail)

    def post_for(self, task_id: str, attempt: int, event: Event, detail: Any = None) -> None:
        """Post `event` for attempt `attempt` of a task: dropped if another attempt runs."""
        self._inbox.put(Posted(task_id, attempt, event, detail))
        self.wake()

    def posted(self) -> list[tuple[RunningTask, Event, Any]]:
        """The events posted since the last call, for tasks still here in that attempt."""
        found: list[tuple[RunningTask, Event, Any]] = []
        while True:
            try:
                item = self._inbox.get_nowait()
            except queues.Empty:
                return found
            task = self._tasks.get(item.task_id)
            if task is not None and task.attempt == item.attempt:
                found.append((task, item.event, item.detail))
