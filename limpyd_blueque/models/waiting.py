"""A producer waiting for a task's outcome (`Job.wait`; `aio.Queue.wait` takes the same
steps). The task is marked as waited for (`Planner.watch`), so that the step that finishes
it publishes its status on the task's outcome channel; the waiter reads the outcome when
told, and about every `POLL` seconds in case a message is lost (a Redis restart, a
failover, a task finished by a step that does not publish: expired, or failed by the deep
clean); each waiter's reads are spread (`JITTER`), so that many waiters never read at once.
A task finished already gives its outcome at once. The one call of the models that
blocks: a producer's, never a worker's."""

from __future__ import annotations

import random
import time
from typing import TYPE_CHECKING

from redis.exceptions import RedisError

from ..exceptions import TaskCanceled, TaskFailed, TaskNotFound
from ..protocol.scripts import Watched
from ..protocol.statuses import FINISHED, Status

if TYPE_CHECKING:
    from .job import Job

#: seconds between two reads of a task's outcome while no message comes, give or take
#: `JITTER` of it
POLL = 2.0
JITTER = 0.25


def settled(task_id: str, watched: Watched | None) -> Watched | None:
    """`watched` when its task has finished (complete, failed, canceled or expired), None
    while it may still run; `TaskNotFound` when there is no such task."""
    if watched is None:
        raise TaskNotFound(task_id)
    return watched if watched.status in FINISHED else None


def outcome(task_id: str, watched: Watched, stored_error: object = None) -> str:
    """The result of a finished task (the text it stores), or its end raised:
    `TaskFailed` (with its error), `TaskCanceled` (canceled or expired)."""
    if watched.status == Status.COMPLETE:
        return watched.result
    if watched.status == Status.FAILED:
        raise TaskFailed(task_id, watched.error, stored_error)
    raise TaskCanceled(task_id, watched.status)


def time_left(deadline: float | None, task_id: str, timeout: float | None) -> float:
    """Seconds to wait for a message before reading again; `TimeoutError` past the
    deadline."""
    poll = POLL * random.uniform(1 - JITTER, 1 + JITTER)
    if deadline is None:
        return poll
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError(f"task {task_id!a} did not finish within {timeout:g} s")
    return min(poll, left)


def wait_for(job_model: type[Job], task_id: str, timeout: float | None = None) -> str:
    """Block until task `task_id` finishes (see the module's docstring); its result, or
    its end raised (see `outcome`); `TimeoutError` after `timeout` seconds (None: no
    limit)."""
    if timeout is not None and timeout < 0:
        raise ValueError(f"timeout must be 0 or more seconds, not {timeout!r}")
    deadline = None if timeout is None else time.monotonic() + timeout
    scripts = job_model.scripts()
    pubsub = job_model.client().pubsub(ignore_subscribe_messages=True)
    try:
        pubsub.subscribe(job_model.keys().outcome_channel(task_id))
        while True:
            watched = settled(task_id, scripts.watch(task_id))
            if watched is not None:
                return outcome(task_id, watched, _newest_error(task_id, watched))
            left = time_left(deadline, task_id, timeout)
            try:
                pubsub.get_message(timeout=left)
            except RedisError:  # the subscription is lost: read again, and subscribe again
                time.sleep(min(left, 0.1))
    finally:
        pubsub.close()


def _newest_error(task_id: str, watched: Watched) -> object:
    """The newest `Error` stored for a failed task, or None."""
    if watched.status != Status.FAILED:
        return None
    from .error import Error  # (its module imports Job's, which imports this one)

    try:
        found = Error.collection_for_job(task_id).instances()
        return found[0] if found else None
    except RedisError:
        return None
