"""What the parts of a worker need from it: small typed interfaces, not `Worker`.

`Worker` satisfies each of them (it is checked by mypy where it hands itself to a part);
a part types its worker as one of them and never imports `worker.Worker`, so that the
imports run one way (the loop knows its parts, the parts know only these interfaces) and
a part can be tested with any object that has these members.

- `TaskHost`: what a way of running tasks (`runners`, `task_process`, `relay`) calls
  back: the running tasks, the log, how outcomes are written, the rules for a process
  that ended without an outcome, and the stop policy of a terminating worker.
- `StallHooks`: what the watch of running tasks (`watch`) calls from the heartbeat thread.

The parts that need only values (`heartbeat.LeaseKeeper`, `recovery.Recovery`,
`outcomes.OutcomeRecorder`, `scheduling.DueTasks`) take them as arguments instead;
`OutcomeRecorder` sits below this module, as `TaskHost` names it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Callable, Protocol

if TYPE_CHECKING:
    from ..exceptions import TaskKilled
    from ..models import Error, Job, JobModels, Queue
    from ..protocol.bounds import Bounds
    from .controls import Controls
    from .outcomes import OutcomeRecorder
    from .running import RunningTask, RunningTasks


class TaskHost(Protocol):
    """The worker, as its runner sees it."""

    #: the running tasks of this worker (the runner adds and ends them)
    tasks: RunningTasks
    #: the worker's state, shown in its process title ("waiting", "running", ...)
    status: str | None
    #: settings the runner applies
    concurrency: int
    cancel_grace: float
    heartbeat_interval: float
    liveness_interval: float
    liveness_timeout: float
    job_model: type[Job]
    models: JobModels
    error_model: type[Error]
    #: writes outcomes and `Error` records (in a task process: through its worker, see
    #: `relay.RelayedOutcomes`, which takes its place there)
    outcomes: OutcomeRecorder
    #: the stop policy: read at each turn of a terminating worker (a second stop signal
    #: turns `on_terminate` into "requeue")
    on_terminate: str
    terminate_timeout: float | None
    release_timeout: float
    end_signal_caught: bool
    #: what operators asked, with each queue's settings as last read (`Controls.terms`)
    controls: Controls

    def queue(self, name: str) -> Queue:
        """The queue model instance of a queue name."""

    def log(self, message: str, level: int | str = ..., exc_info: bool = ...) -> None:
        """Log a line with the worker's id."""

    def set_status(self, status: str) -> None:
        """Change the worker's state (and its process title)."""

    def set_task_process_title(self, task: RunningTask) -> None:
        """In a task process: show the task in the process title."""

    def perform(self, job: Job, queue: Queue) -> bool:
        """Run a started task and record its outcome (the hooks included)."""

    def retrying(self, step: Callable[[], Any]) -> Any:
        """Run `step`, retrying it while Redis is away."""

    def bounds_of(self, job: Job) -> Bounds:
        """The task's memory, CPU and soft time bounds (its own, its queue's, the worker's)."""

    def queue_terms(self, name: str) -> Mapping[str, str]:
        """The queue's own retry settings and bounds, as last read."""

    def requeue_released(self, task: RunningTask) -> None:
        """Put a released task back at the front of its queue, its attempt not counted."""

    def requeue_interrupted(self, task: RunningTask, *, uncounted: bool = True) -> None:
        """Put an interrupted task back at the front of its queue."""

    def process_canceled(self, task: RunningTask) -> None:
        """A canceling task's process ended: file it as canceled."""

    def process_ended(self, task: RunningTask, cause: TaskKilled) -> None:
        """A task's process ended without an outcome: a failure of that attempt."""

    def job_lost_message(self, job: Job, queue: Queue, status: str) -> str:
        """The log line of a task whose lease was lost."""

    def job_cancel_asked_message(self, job: Job, queue: Queue) -> str:
        """The log line of a running task whose cancel was asked."""

    def wait(self, seconds: float) -> None:
        """Sleep until something happens, or `seconds`."""

    def collect(self) -> None:
        """Apply what happened to the running tasks since the last turn."""


class StallHooks(Protocol):
    """The worker, as the watch of its running tasks sees it (in the heartbeat thread)."""

    #: the default stall timeout of a task that sets none
    stall_timeout: float | None

    @property
    def id(self) -> str:
        """The worker's listener id."""

    def log(self, message: str, level: int | str = ..., exc_info: bool = ...) -> None:
        """Log a line with the worker's id."""

    def job_stalled(self, job: Job, queue: Queue) -> None:
        """The hook of a task whose progress stayed still for its stall timeout."""
