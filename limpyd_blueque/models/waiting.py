"""A producer waiting for a task's outcome (`Job.wait`; `aio.Queue.wait` takes the same
steps). The task is marked as waited for (`Planner.watch`): its `waited` field holds the
task's outcome channel, where every step that finishes it publishes its status. The
waiter reads the outcome when told, and about every `POLL` seconds in case a message is
lost (a Redis restart, a failover, a task finished by a client that does not publish);
each waiter's reads are spread (`JITTER`), so that many waiters never read at once. While
Redis cannot be reached the waiter keeps trying, up to its timeout. A task finished
already gives its outcome at once. The one call of the models that blocks: a
producer's, never a worker's."""

from __future__ import annotations

import random
import time
from typing import Any, Callable

import redis
from redis.exceptions import RedisError

from ..exceptions import TaskCanceled, TaskFailed, TaskNotFound
from ..protocol.keys import KeySpace
from ..protocol.scripts import Scripts, Watched
from ..protocol.statuses import FINISHED, Status

#: seconds between two reads of a task's outcome while no message comes, give or take
#: `JITTER` of it
POLL = 2.0
JITTER = 0.25
#: seconds between two tries while Redis cannot be reached
RETRY = 0.5
#: how long a failed task's `Error` record is looked for: its worker stores it just
#: after the step that files the task (and tells its waiters)
ERROR_GRACE = 2.0
#: the model of the stored errors, set by its module as it loads (`register_errors`: it
#: imports `Job`, which imports this one)
_errors: Any = None


def register_errors(model: Any) -> None:
    """Where `Job.wait` finds the `Error` record of a failed task (models/error.py)."""
    global _errors
    _errors = model


def settled(task_id: str, watched: Watched | None) -> Watched | None:
    """`watched` when its task has finished (complete, failed, canceled or expired), None
    while it may still run; `TaskNotFound` when there is no such task."""
    if watched is None:
        raise TaskNotFound(task_id)
    return watched if watched.status in FINISHED else None


def outcome(task_id: str, watched: Watched, stored_error: object = None,
            read: Callable[[Watched], Any] | None = None) -> Any:
    """The result of a finished task (the text it stores, or what `read` makes of it),
    or its end raised: `TaskFailed` (with its error), `TaskCanceled` (canceled or
    expired)."""
    if watched.status == Status.COMPLETE:
        return read(watched) if read is not None else watched.result
    if watched.status == Status.FAILED:
        raise TaskFailed(task_id, watched.error, stored_error)
    raise TaskCanceled(task_id, watched.status)


def time_left(deadline: float | None, task_id: str, timeout: float | None,
              most: float | None = None) -> float:
    """Seconds to wait before reading again (at most `most`, else about `POLL`);
    `TimeoutError` past the deadline."""
    pause = POLL * random.uniform(1 - JITTER, 1 + JITTER) if most is None else most
    if deadline is None:
        return pause
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError(f"task {task_id!a} did not finish within {timeout:g} s")
    return min(pause, left)


def check_timeout(timeout: float | None) -> float | None:
    """The deadline of a wait of `timeout` seconds (None: none); `ValueError` for a
    negative one."""
    if timeout is not None and timeout < 0:
        raise ValueError(f"timeout must be 0 or more seconds, not {timeout!r}")
    return None if timeout is None else time.monotonic() + timeout


def wait_for(scripts: Scripts, keys: KeySpace, client: redis.Redis, task_id: str,
             timeout: float | None = None,
             read: Callable[[Watched], Any] | None = None) -> Any:
    """Block until task `task_id` finishes (see the module's docstring); its result (see
    `outcome`), or its end raised; `TimeoutError` after `timeout` seconds (None: no
    limit)."""
    deadline = check_timeout(timeout)
    channel = keys.outcome_channel(task_id)
    pubsub = client.pubsub(ignore_subscribe_messages=True)
    try:
        while True:
            try:
                if not pubsub.subscribed:
                    pubsub.subscribe(channel)
                watched = settled(task_id, scripts.watch(task_id))
            except RedisError:  # Redis away (a restart, a failover): try again
                time.sleep(time_left(deadline, task_id, timeout, RETRY))
                continue
            if watched is not None:
                return outcome(task_id, watched, _stored_error(keys, task_id, watched,
                                                               deadline), read)
            left = time_left(deadline, task_id, timeout)
            try:
                pubsub.get_message(timeout=left)
            except RedisError:  # the subscription is lost: read again, subscribe again
                pubsub.reset()
                time.sleep(min(left, 0.1))
    finally:
        pubsub.close()


def _stored_error(keys: KeySpace, task_id: str, watched: Watched,
                  deadline: float | None) -> object:
    """The `Error` stored for the last attempt of a failed task (None when none comes
    within `ERROR_GRACE` seconds or the deadline; None at once for a task that never ran,
    failed by a task it waited for)."""
    if watched.status != Status.FAILED or _errors is None or not watched.attempt:
        return None
    until = time.monotonic() + ERROR_GRACE
    if deadline is not None:
        until = min(until, deadline)
    while True:
        try:
            found = _errors.collection_for_job(task_id).instances()
        except RedisError:
            found = []
        if found and (not watched.attempt or found[0].attempt.hget() == watched.attempt):
            return found[0]
        if time.monotonic() >= until:
            return None
        time.sleep(0.05)
