"""Cleaning: take back tasks whose holder is gone, and make the Blueque structures whole.

* `light_clean` (cheap, run by every worker periodically): tasks whose lease expired go
  back to pending, or fail once they used their attempts.
* `deep_clean` (slow, run rarely, e.g. from `blueque clean --deep`): every task hash is
  checked against the list or set of its status, every entry of those lists and sets
  against its hash, and every listener with `liveness.listener_is_dead`.

Each fix is one atomic script that checks again what it fixes, so cleaning can run
while workers run.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import cast

from redis.exceptions import ResponseError

from ..exceptions import ProtocolError
from ..models import Job, Queue
from ..protocol.keys import QUEUE_NAME_RE
from ..protocol.liveness import listener_is_dead, server_time, worker_records
from ..protocol.options import DEFAULT_RETENTION, Retention
from ..protocol.statuses import ALL, RUNNING, VALUES, Status
from .retention import index_finished

#: how many expired leases one light clean takes back per queue
LIGHT_CLEAN_BATCH = 100


def light_clean(queue_model: type[Queue] = Queue, *, max_attempts: int | None = None,
                now: float | None = None, queues: Iterable[str] | None = None,
                retention: Retention = DEFAULT_RETENTION) -> dict[str, str]:
    """Take back the tasks whose lease ended, in every queue (or in `queues`).

    Returns `{task id: outcome}`: 'pending' (back at the front of its queue), 'failed'
    (it used `max_attempts`, or its own or its queue's maximum), or 'skipped'.
    """
    now = time.time() if now is None else now
    names = list(queues) if queues is not None else queue_model.job_model.queue_names()
    if not names:
        return {}
    keys = queue_model.keys()
    with queue_model.client().pipeline(transaction=False) as pipe:
        for name in names:
            pipe.zrangebyscore(keys.leases(name), "-inf", now, start=0, num=LIGHT_CLEAN_BATCH)
        expired = pipe.execute(raise_on_error=False)
    # a lease set of another type is an error in its place: that queue is skipped
    candidates = [(name, task_id, None, None) for name, ids in zip(names, expired)
                  if not isinstance(ids, Exception) for task_id in ids]
    return queue_model.scripts().upkeep.recover(candidates, now, expired_only=True,
                                                max_attempts=max_attempts, why="lease expired",
                                                retention=retention)


@dataclass
class CleanReport:
    """What a deep clean found and fixed."""

    relisted: list[tuple[str, str]] = field(default_factory=list)  # (task id, key) filed again
    indexed: list[str] = field(default_factory=list)           # held tasks given a lease entry
    recovered: dict[str, str] = field(default_factory=dict)    # task id -> outcome
    dropped: list[tuple[str, str]] = field(default_factory=list)  # (key, member), no such task
    unknown_status: list[tuple[str, str | None]] = field(default_factory=list)  # (id, status)
    listeners_removed: list[tuple[str, str]] = field(default_factory=list)  # (queue, listener)
    broken: list[tuple[str, str]] = field(default_factory=list)  # (key, problem): left alone
    retained: int = 0  # finished tasks given their retention entry (`blueque reindex`)

    def lines(self) -> list[str]:
        """The report as text: one line per kind of fix, then each unknown status."""
        return [
            f"tasks filed again in their list or set: {len(self.relisted)}",
            f"held tasks indexed with an open lease: {len(self.indexed)}",
            f"tasks taken back from dead holders: {len(self.recovered)}",
            f"entries dropped (no such task, or another status): {len(self.dropped)}",
            f"listeners removed: {len(self.listeners_removed)}",
            f"tasks with an unknown status (left alone): {len(self.unknown_status)}",
            f"keys holding another type, or steps refused (left alone): {len(self.broken)}",
            f"finished tasks given their retention: {self.retained}",
        ] + [f"  unknown status {status!a}: task {task_id!a}"
             for task_id, status in self.unknown_status] + [
            f"  {key!a}: {problem}" for key, problem in self.broken]

    @contextmanager
    def isolating(self, key: str) -> Iterator[None]:
        """Go on past a key of another type (or a step it made refuse): report it."""
        try:
            yield
        except (ResponseError, ProtocolError) as error:
            self.broken.append((key, str(error)))


def _file_again(queue_model: type[Queue], task_id: str, task: dict[str, str | None],
                report: CleanReport, now: float) -> None:
    """File a task missing from the structure of its status (one re-checking script).

    A held (reserved or started) task goes in its queue's lease set with an open lease
    (`+inf`): that is where held tasks are listed (`keys.HELD_STRUCTURE`); any other in the
    list or sorted set of its status (`keys.STATUS_STRUCTURES`).
    """
    keys, scripts = queue_model.keys(), queue_model.scripts()
    status, name = Status(task["status"]), str(task["queue"])
    if status in RUNNING:
        key, kind = keys.held_structure(name)
        if scripts.upkeep.tidy("relist", task_id, key, kind, status.value, "+inf"):
            report.indexed.append(task_id)
        return
    key, kind = keys.status_structure(name, status)
    if status is Status.PENDING:  # in line by its priority, whichever structure that is
        if scripts.upkeep.reline(name, task_id):
            report.relisted.append((task_id, key))
        return
    if scripts.upkeep.tidy("relist", task_id, key, kind, status.value, task["eta"] or now):
        report.relisted.append((task_id, key))


def _scan_tasks(job_model: type[Job], report: CleanReport | None = None,
                ) -> dict[str, dict[str, str | None]]:
    """`{task id: its status, queue, node and eta fields}` for every task hash."""
    client, keys = job_model.client(), job_model.keys()
    prefix_length = len(keys.task_prefix)
    tasks: dict[str, dict[str, str | None]] = {}
    batch: list[str] = []

    def flush() -> None:
        with client.pipeline(transaction=False) as pipe:
            for key in batch:
                pipe.hmget(key, "status", "queue", "node", "eta")
            for key, fields in zip(batch, pipe.execute(raise_on_error=False)):
                if isinstance(fields, Exception):  # a task key holding another type
                    if report is not None:
                        report.broken.append((key, str(fields)))
                    continue
                status, queue, node, eta = fields
                tasks[key[prefix_length:]] = {"status": status, "queue": queue, "node": node,
                                              "eta": eta}
        batch.clear()

    for key in client.scan_iter(match=keys.task_pattern, count=1000):
        batch.append(key)
        if len(batch) >= 500:
            flush()
    if batch:
        flush()
    return tasks


def deep_clean(queue_model: type[Queue] = Queue, *, max_attempts: int | None = None,
               now: float | None = None) -> CleanReport:
    """Check every task and every Blueque structure, and fix what is out of place.

    * a listener that `liveness.listener_is_dead` finds dead (its process is gone on this
      host, or its worker stopped beating) is unregistered;
    * a task hash missing from the list or set of its status is filed there again;
    * a reserved or started task held by a dead listener is taken back (see `light_clean`),
      even with an open lease; one with no lease entry is given an open one (`+inf`) when
      its listener lives, and is taken back when it is not registered;
    * a list, set or lease entry whose task is gone, or has another status, is dropped, and
      so is an identifier entry whose task no longer waits with that identifier;
    * a task with a status outside the protocol is left alone and reported.
    """
    now = time.time() if now is None else now
    report = CleanReport()
    tasks = _scan_tasks(queue_model.job_model, report)
    names = sorted(set(queue_model.job_model.queue_names())
                   | {str(task["queue"]) for task in tasks.values() if task["queue"]})
    # listeners are judged by Redis's clock, which worker records are scored by
    listeners = _unregister_dead_listeners(queue_model, names,
                                           server_time(queue_model.client()), report)
    to_recover = _check_tasks(queue_model, tasks, listeners, report, now)
    report.recovered = queue_model.scripts().upkeep.recover(
        to_recover, now, expired_only=False, max_attempts=max_attempts,
        why="its listener is gone")
    for name in names:
        _drop_strays(queue_model, name, report)
    return report


@dataclass
class _Listeners:
    """The registered listeners of each queue, split by `listener_is_dead`."""

    live: dict[str, set[str]] = field(default_factory=dict)
    dead: dict[str, set[str]] = field(default_factory=dict)


def _unregister_dead_listeners(queue_model: type[Queue], names: list[str], now: float,
                               report: CleanReport) -> _Listeners:
    """Unregister the dead listeners of each queue; returns who was live and who dead."""
    client, keys = queue_model.client(), queue_model.keys()
    alive_until = worker_records(client, keys)
    listeners = _Listeners()
    for name in names:
        with report.isolating(keys.listeners(name)):
            members = set(cast("set[str]", client.smembers(keys.listeners(name))))
            dead = {member for member in members if listener_is_dead(member, alive_until, now)}
            for listener in sorted(dead):
                if queue_model.named(name).remove_listener(listener):
                    report.listeners_removed.append((name, listener))
            listeners.live[name], listeners.dead[name] = members - dead, dead
    return listeners


def _check_tasks(queue_model: type[Queue], tasks: dict[str, dict[str, str | None]],
                 listeners: _Listeners, report: CleanReport,
                 now: float) -> list[tuple[str, str, None, str | None]]:
    """File again each task missing from its structure; returns the held tasks to take back
    as `(queue, task id, any attempt, holder)`."""
    to_recover: list[tuple[str, str, None, str | None]] = []
    for task_id, task in tasks.items():
        status, name = task["status"], task["queue"]
        if status not in VALUES:
            report.unknown_status.append((task_id, status))
        elif not name:
            report.unknown_status.append((task_id, f"{status} (no queue field)"))
        else:
            with report.isolating(queue_model.keys().task(task_id)):
                if Status(status) not in RUNNING:
                    _file_again(queue_model, task_id, task, report, now)
                elif _must_take_back(queue_model, task_id, task, listeners, report, now):
                    to_recover.append((name, task_id, None, task["node"]))
    return to_recover


def _must_take_back(queue_model: type[Queue], task_id: str, task: dict[str, str | None],
                      listeners: _Listeners, report: CleanReport, now: float) -> bool:
    """True when a held task must be taken back: its holder is dead (even with an open
    lease), or it has no lease entry and its holder is not registered. A task with no lease
    entry and a live holder is given an open lease instead."""
    name, node = str(task["queue"]), task["node"]
    if node in listeners.dead.get(name, set()):
        return True
    key, _ = queue_model.keys().held_structure(name)
    if queue_model.client().zscore(key, task_id) is not None:
        return False
    if node in listeners.live.get(name, set()):
        _file_again(queue_model, task_id, task, report, now)
        return False
    return True


def reindex(queue_model: type[Queue] = Queue) -> CleanReport:
    """Bring the status index up to date for tasks written by other Blueque clients.

    The index of `Job.status` and `Job.queue` reads the Blueque structures themselves;
    the one thing other clients do not keep is the lease set, through which reserved
    tasks are listed. Every reserved or started task without a lease entry gets an open
    one (`+inf`, never taken back: its holder does not renew leases), and every task
    missing from the list or set of its status is filed there again. Nothing is taken
    back and no listener is removed: that is `deep_clean`'s work. Finished tasks with no
    retention entry (other clients write none) get one, with the default retentions
    (`retention.index_finished`).
    """
    report, now = CleanReport(), time.time()
    for task_id, task in _scan_tasks(queue_model.job_model).items():
        if task["status"] not in VALUES or not task["queue"]:
            report.unknown_status.append((task_id, task["status"]))
        else:
            _file_again(queue_model, task_id, task, report, now)
    names = [name for name in queue_model.job_model.queue_names() if QUEUE_NAME_RE.match(name)]
    report.retained = index_finished(queue_model, names, now)
    return report


def _drop_strays(queue_model: type[Queue], name: str, report: CleanReport) -> None:
    """Remove the entries of a queue's structures whose task is gone or has another status.

    The structures and the statuses their entries may have come from
    `KeySpace.status_structures`; each listener's reserved list holds its held tasks.
    """
    keys, client = queue_model.keys(), queue_model.client()
    for key, kind, statuses in keys.status_structures(name):
        with report.isolating(key):
            _drop_from(queue_model, key, kind, statuses, report)
    held = tuple(status for status in ALL if status in RUNNING)
    for key in client.scan_iter(match=keys.reserved_pattern(name), count=1000):
        with report.isolating(key):
            _drop_from(queue_model, key, "list", held, report)
    identifiers = keys.identifiers(name)
    with report.isolating(identifiers):
        for identifier, task_id in client.hscan_iter(identifiers, count=1000):
            if queue_model.scripts().upkeep.unmap(name, identifier, task_id):
                report.dropped.append((identifiers, identifier))


def _drop_from(queue_model: type[Queue], key: str, kind: str, statuses: tuple[Status, ...],
               report: CleanReport) -> None:
    """Remove each entry of `key` whose task is gone or has none of `statuses`."""
    scripts, client = queue_model.scripts(), queue_model.client()
    allowed = " ".join(status.value for status in statuses)
    if kind == "started":  # members "<listener> <pid> <task id>"
        for member in cast("set[str]", client.smembers(key)):
            with report.isolating(queue_model.keys().task(member.rpartition(" ")[2])):
                if scripts.upkeep.tidy("unlist", member.rpartition(" ")[2], key, "set", allowed,
                                member):
                    report.dropped.append((key, member))
        return
    members = client.lrange(key, 0, -1) if kind == "list" else client.zrange(key, 0, -1)
    for task_id in set(cast("list[str]", members)):
        with report.isolating(queue_model.keys().task(task_id)):
            if scripts.upkeep.tidy("unlist", task_id, key, kind, allowed):
                report.dropped.append((key, task_id))
