"""One exception tree: every error the library raises derives from `LimpydBluequeError`."""

from __future__ import annotations

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import OutOfMemoryError


class LimpydBluequeError(Exception):
    """Base class of every error raised by limpyd-blueque."""


class ConfigurationError(LimpydBluequeError):
    """A setting, option or argument has a value that cannot work."""


class InvalidName(ConfigurationError, ValueError):
    """A queue name, listener id or key prefix would make Redis keys ambiguous."""


class InvalidParameters(LimpydBluequeError, ValueError):
    """Task parameters (or a result) that cannot be stored as a string."""


class TaskNotFound(LimpydBluequeError, LookupError):
    """No task hash exists for this id."""

    def __init__(self, task_id: str) -> None:
        super().__init__(f"no task with id {task_id!r}")
        self.task_id = task_id


class WorkflowNotFound(LimpydBluequeError, LookupError):
    """No workflow was submitted with this id (or it expired with its nodes)."""

    def __init__(self, workflow_id: object) -> None:
        super().__init__(f"no workflow with id {workflow_id!r}")
        self.workflow_id = workflow_id


class InvalidTransition(LimpydBluequeError, ValueError):
    """A protocol step was asked of a task whose status does not allow it.

    Also a `ValueError`, the exception the reference package raises for these refusals,
    so that code written for blueque catches it unchanged."""

    def __init__(self, task_id: str, from_status: str | None, to_status: str,
                 why: str = "") -> None:
        message = (f"task {task_id!r} cannot go from {str(from_status or 'nothing')!r} to "
                   f"{str(to_status)!r}")
        super().__init__(f"{message}: {why}" if why else message)
        self.task_id = task_id
        self.from_status = from_status
        self.to_status = to_status


class ProtocolError(LimpydBluequeError):
    """Redis holds data that does not follow the Blueque protocol."""


class RedisUnavailable(LimpydBluequeError, RedisConnectionError):
    """The Redis server could not be reached; the message names its URL."""


class TaskKilled(LimpydBluequeError):
    """The process running a task ended before it recorded an outcome."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


class TaskTimeout(TaskKilled):
    """A task ran longer than its maximum run time and was stopped."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"the task ran longer than its maximum run time of {seconds:g} seconds "
                         "and was stopped", "timeout")


class TimeLimitExceeded(TaskTimeout):
    """A task ran past its `max_run_time` (its hard time limit): its whole process group
    was killed (forked), or this was raised in it (in-process)."""


class CpuLimitExceeded(TaskKilled):
    """A task used more CPU time than its `cpu_limit`."""

    def __init__(self, seconds: float, used: float | None = None) -> None:
        spent = f" (it used {used:.3g})" if used is not None else ""
        super().__init__(f"the task went over its cpu_limit of {seconds:g} CPU seconds{spent} "
                         "and was stopped", "cpu_limit")
        self.limit = seconds
        self.used = used


class MemoryLimitExceeded(TaskKilled):
    """The processes of a task used more memory than its `max_memory`: they were killed."""

    def __init__(self, limit: int, size: int) -> None:
        super().__init__(f"the task's processes reached {size / 2**20:.4g} MiB ({size} bytes), "
                         f"over its max_memory of {limit / 2**20:.4g} MiB ({limit} bytes), and "
                         "were stopped", "max_memory")
        self.limit = limit
        self.size = size


class SoftTimeLimitExceeded(Exception):
    """Raised inside a task when it runs past its `soft_time_limit`: the task may catch it
    to save a checkpoint and return (its hard limit, `max_run_time`, still holds).

    Not an error of the library: a notice from the worker to the task's code."""


class Release(Exception):
    """What a task returns (the class or an instance), or raises, to be put back in line
    as it is: not failed, its attempt not counted, its checkpoint kept, for another worker
    to resume (see `Job.stop_requested`). Not an error: control flow between a task and
    its worker."""


class WorkerInterrupted(BaseException):
    """Raised in an in-process task when the worker must stop at once (it is requeued)."""


class QueueBusy(LimpydBluequeError):
    """A queue cannot be dropped while it has listeners or running tasks."""


class UnknownJobModel(ConfigurationError):
    """A task names a job model its worker was not given: it is failed, never run."""

    code = "unknown_model"


class Delay(Exception):
    """Raised by a task's code to run again `seconds` from now (or at `Job.delay`'s
    request): the task goes back to the scheduled set, with no failure recorded.

    Not an error of the library: control flow between a task and its worker."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"run again in {seconds} seconds")
        self.seconds = seconds


class Retry(Exception):
    """Raised by a task's code to be tried again `delay` seconds from now (None: the delay
    its retry policy gives): an attempt like any failure, its `Error` stored, tried again
    while the task has retries left (or, with no retry set, attempts left). `message` is
    its error text."""

    def __init__(self, delay: float | None = None, message: str = "") -> None:
        super().__init__(message or ("retry" if delay is None else f"retry in {delay} seconds"))
        self.delay = delay


class Canceled(Exception):
    """The running task's cancel was asked: raised inside the task by `Job.set_progress`
    (and raised by a task that stops on its own when `Job.cancel_requested()` turns true).
    The task is then filed as canceled: not a failure, never retried."""


class TaskExists(LimpydBluequeError):
    """A task with this id exists already."""


class QuarantinedTask(ProtocolError):
    """A task whose record cannot be run as it is: failed, filed, never run."""

    code = "quarantined"

    def __init__(self, task_id: str, problem: str) -> None:
        super().__init__(f"task {task_id!a} quarantined: {problem}")
        self.task_id = task_id
        self.problem = problem


class MisfitKeySetAside(ProtocolError):
    """A structure of a queue held another type of value: it was moved aside, under a name
    of its own, so that the queue goes on (an operator reads it there)."""

    code = "set_aside"

    def __init__(self, key: str, found: str, kind: str, aside: str) -> None:
        super().__init__(f"{key!a} held a {found}, not a {kind}: moved aside to {aside!a} "
                         "so that its queue goes on")
        self.key, self.found, self.kind, self.aside = key, found, kind, aside


class RedisFull(LimpydBluequeError, OutOfMemoryError):
    """Redis refused a write because its memory is full (`maxmemory` reached); the message
    names the server. Also redis-py's `OutOfMemoryError`, which it replaces."""


class ParametersTooLarge(InvalidParameters):
    """Task parameters larger than the Redis server takes in one value (its
    `proto-max-bulk-len`)."""


class PartiallyEnqueued(LimpydBluequeError):
    """`Queue.enqueue_many` failed part-way: the tasks of its first chunks were enqueued.

    `enqueued` lists their ids, in order; `cause` is the error that stopped the rest
    (also the `__cause__` of this exception)."""

    def __init__(self, enqueued: list[str], total: int, cause: BaseException) -> None:
        super().__init__(f"{len(enqueued)} of {total} tasks enqueued, then "
                         f"{type(cause).__name__}: {cause}")
        self.enqueued = enqueued
        self.cause = cause


#: Redis cannot take a step now but may take it later: out of reach, or full (its memory
#: frees as finished tasks expire, or an operator acts). A worker retries the steps that
#: must not be lost (outcomes), logs the others and tries them again at their next turn:
#: neither ends a worker, nor fails a task by itself.
REDIS_AWAY: tuple[type[LimpydBluequeError], ...] = (RedisUnavailable, RedisFull)
#: ... and a record of another type where a step expects its own: what a worker's
#: housekeeping (unregistering, taking back a dead worker's tasks) logs and goes past
HOUSEKEEPING_ERRORS: tuple[type[LimpydBluequeError], ...] = (*REDIS_AWAY, ProtocolError)


class TaskFailed(LimpydBluequeError):
    """The task a producer waited for failed for good (`Job.wait`, `aio.Queue.wait`).

    `error` is the error its hash stores (the last attempt's); `stored_error`, from
    `Job.wait`, the newest `Error` record stored for it (None when none is, as in the
    cluster key mode, or from `aio`)."""

    def __init__(self, task_id: str, error: str, stored_error: object = None) -> None:
        super().__init__(f"task {task_id!a} failed: {error or '(no error recorded)'}")
        self.task_id = task_id
        self.error = error
        self.stored_error = stored_error


class TaskCanceled(LimpydBluequeError):
    """The task a producer waited for was canceled, or expired before it ran (`status`
    says which): it has no result (`Job.wait`, `aio.Queue.wait`)."""

    def __init__(self, task_id: str, status: str) -> None:
        super().__init__(f"task {task_id!a} {status}: it has no result")
        self.task_id = task_id
        self.status = status
