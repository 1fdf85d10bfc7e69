"""Acting on tasks as an operator does, one task at a time, each step atomic: requeue,
cancel, delete, and the bulk forms (requeue every failed task of a queue, purge a
status). Each action's result on one task is an `ActionResult` whose word docs/admin.rst
lists; the `blueque` command and the web dashboard both act through these."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

from ..exceptions import (
    ConfigurationError,
    InvalidTransition,
    LimpydBluequeError,
    TaskNotFound,
)
from ..models import Job
from ..protocol.encryption import Keyring, context, sealed_values
from ..protocol.statuses import RUNNING, Status
from .overview import pipelined, task_fields

#: the statuses `purge` deletes (a running task is canceled, not purged)
PURGEABLE = tuple(status.value for status in Status if status not in RUNNING)
#: how many entries `purge` and `requeue --failed` read at a time
CHUNK = 500


@dataclass(frozen=True)
class ActionResult:
    """What an action did to one task: `outcome` is a word of docs/admin.rst."""

    id: str
    outcome: str
    detail: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "outcome": self.outcome, "detail": self.detail}


def acting(task_id: str, action: Callable[[Job], ActionResult]) -> ActionResult:
    """`action` on the task `task_id`; an unknown id or a refused step is its outcome."""
    try:
        return action(Job.load(task_id))
    except TaskNotFound:
        return ActionResult(task_id, "not_found", f"no task with id {task_id!r}")
    except InvalidTransition as error:
        return ActionResult(task_id, "refused", str(error))


def requeue_one(job: Job) -> ActionResult:
    """A failed, canceled, expired or buried task back in line (`Job.requeue` decides which
    it can); a running task is refused: its worker holds it (cancel it instead)."""
    status = job.status.hget()
    if status in RUNNING:
        return ActionResult(job.task_id, "refused", f"it is {status}: its worker holds it (cancel "
                       "it, or wait for it to finish)")
    if job.requeue():
        return ActionResult(job.task_id, "requeued")
    return ActionResult(job.task_id, "unchanged", f"its status changed meanwhile (was {status})")


def cancel_one(job: Job) -> ActionResult:
    """`Job.cancel`: a waiting task is canceled at once; for a running one, its worker is
    asked to stop it; a finished one is left alone."""
    if not job.cancel():
        return ActionResult(job.task_id, "already_finished", f"it is {job.status.hget()}")
    status = job.status.hget()
    if status == Status.CANCELED:
        return ActionResult(job.task_id, "canceled")
    return ActionResult(job.task_id, "cancel_requested", f"it is {status}: its worker stops it")


def delete_one(job: Job) -> ActionResult:
    job.delete()
    return ActionResult(job.task_id, "deleted")


def requeue_failed(queue: str) -> tuple[int, list[ActionResult]]:
    """Every failed task of `queue` back in line, oldest failure first, read `CHUNK` ids at
    a time from the end of the failed list; at most as many as the list held at the
    start (tasks failing meanwhile wait for another run). How many were requeued, and
    the outcome of each task that was not."""
    client, key = Job.client(), Job.keys().failed(queue)
    remaining = int(pipelined(client, lambda pipe: pipe.llen(key))[0] or 0)
    requeued, left = 0, list[ActionResult]()
    while remaining > 0:
        ids = cast("list[str]", client.lrange(key, -(len(left) + min(CHUNK, remaining)),
                                              -(len(left) + 1)))
        if not ids:
            break
        for task_id in reversed(ids):
            outcome = acting(task_id, requeue_one)
            if outcome.outcome == "requeued":
                requeued += 1
            else:
                left.append(outcome)
        remaining -= len(ids)
    return requeued, left


@dataclass(frozen=True)
class Resealed:
    """What `reencrypt` did on a queue: the tasks and values it sealed again with the
    current key, and the tasks it could not open (a key not given, or a damaged value)."""

    queue: str
    rewritten: int
    values: int
    unopened: list[str]


def reencrypt(queue: str, job_model: type[Job] = Job, batch: int = 500) -> Resealed:
    """Seal again with the current key every value of the encrypted tasks of `queue`
    that an older key sealed (their parameters, result, checkpoint state and progress
    message), each written only if unchanged since read. The keys are the models'
    (`use_redis(encryption_keys=...)`); `ConfigurationError` without any."""
    keyring = job_model.keyring()
    if keyring is None:
        raise ConfigurationError("reencrypt needs the encryption keys: --encryption-keys-file")
    client, keys = job_model.client(), job_model.keys()
    pattern = keys.task(keys.task_id_in(queue, "*") if keys.cluster else "*")
    rewritten = values = 0
    unopened: list[str] = []
    names = ["queue", "encrypted", "parameters", "result", "checkpoint", "progress"]
    scanned = client.scan_iter(match=pattern, count=batch)
    while chunk := list(itertools.islice(scanned, batch)):
        replies = pipelined(client, partial(_read_all, keys=chunk, names=names))
        for key, reply in zip(chunk, replies):
            if not isinstance(reply, list) or reply[0] != queue or not reply[1]:
                continue
            task_id = key[len(keys.task("")):]
            changes, opened = resealed(keyring, task_id, dict(zip(names[2:], reply[2:])))
            if not opened:
                unopened.append(task_id)
            if changes:
                written = job_model.scripts().reports.reseal(task_id, changes)
                values += written
                rewritten += 1 if written else 0
    return Resealed(queue, rewritten, values, unopened)


def _read_all(pipe: Any, keys: list[str], names: list[str]) -> list[Any]:
    return [pipe.hmget(key, names) for key in keys]


def resealed(keyring: Keyring, task_id: str,
             fields: dict[str, str | None]) -> tuple[list[tuple[str, str, str]], bool]:
    """The `(field, value, value sealed again)` of a task's values an older key sealed,
    and False when one of its values did not open (the others are sealed again all the
    same)."""
    changes, opened = [], True
    for stored in sealed_values(fields):
        try:
            again = keyring.reseal(stored.value, context(task_id, stored.field))
        except LimpydBluequeError:
            opened = False
            continue
        if again is not None:
            changes.append((stored.field, stored.text, stored.replaced(again)))
    return changes, opened


def purge(queue: str, status: Status) -> tuple[int, int]:
    """Delete every task of `status` in `queue`, read `CHUNK` ids at a time from the
    structures that file them (at most as many as they held at the start): each is
    checked to have that status and queue still, then deleted. How many were deleted,
    and how many entries were passed over (another status by now, or no task)."""
    deleted = passed = 0
    for key, kind in Job.keys().structures_of(queue, status):
        done, left = _purge_structure(queue, status, key, kind)
        deleted, passed = deleted + done, passed + left
    return deleted, passed


def _purge_structure(queue: str, status: Status, key: str, kind: str) -> tuple[int, int]:
    client, keys = Job.client(), Job.keys()
    size = pipelined(client, lambda pipe: pipe.llen(key) if kind == "list" else pipe.zcard(key))
    remaining = size[0] if isinstance(size[0], int) else 0  # another type: nothing to purge
    deleted = passed = 0
    while remaining > 0:
        chunk = min(CHUNK, remaining)
        ids = cast("list[str]", client.lrange(key, -(passed + chunk), -(passed + 1))
                   if kind == "list" else client.zrange(key, passed, passed + chunk - 1))
        if not ids:
            break
        for task_id, values in zip(ids, task_fields(client, keys, ids, ("status", "queue"))):
            outcome = (acting(task_id, delete_one) if values == [status.value, queue]
                       else ActionResult(task_id, "passed"))
            deleted, passed = ((deleted + 1, passed) if outcome.outcome == "deleted"
                               else (deleted, passed + 1))
        remaining -= len(ids)
    return deleted, passed
