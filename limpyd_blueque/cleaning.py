"""Cleaning: take back tasks whose holder is gone, and make the Blueque structures whole.

* `light_clean` (cheap, run by every worker periodically): tasks whose lease expired go
  back to pending, or fail once they used their attempts.
* `deep_clean` (slow, run rarely, e.g. from `blueque clean --deep`): every task hash is
  checked against the list or set of its status, every entry of those lists and sets
  against its hash, and every listener against its process.

Each fix is one atomic script that checks again what it fixes, so cleaning can run
while workers run.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterable

from .models import Job, Queue
from .liveness import host_name, is_this_host, process_alive
from .statuses import Status

#: how many expired leases one light clean takes back per queue
LIGHT_CLEAN_BATCH = 100


def light_clean(queue_model: type[Queue] = Queue, *, max_attempts: int | None = None,
                now: float | None = None, queues: Iterable[str] | None = None) -> dict[str, str]:
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
        expired = pipe.execute()
    candidates = [(name, task_id, None, None) for name, ids in zip(names, expired)
                  for task_id in ids]
    return queue_model.scripts().recover(candidates, now, expired_only=True,
                                         max_attempts=max_attempts, why="lease expired")


def listener_is_dead(listener_id: str, host: str, workers: dict[str, float],
                     now: float) -> bool:
    """True when a listener surely stopped.

    A worker of this library is dead once it missed three heartbeats (`workers` maps
    its id to the time it said it is alive until), whatever its host: two machines may
    share a host name. Another client's listener is dead when it is on this host and its
    process is gone.
    """
    if listener_id in workers:
        return workers[listener_id] < now
    listener_host, _, pid = listener_id.rpartition("_")
    return (listener_host == host or is_this_host(listener_host)) and pid.isdigit() \
        and not process_alive(int(pid))


@dataclass
class CleanReport:
    """What a deep clean found and fixed."""

    relisted: list = field(default_factory=list)       # (task id, key) filed again
    indexed: list = field(default_factory=list)        # held tasks given a lease entry
    recovered: dict = field(default_factory=dict)      # task id -> outcome
    dropped: list = field(default_factory=list)        # (key, member) with no matching task
    unknown_status: list = field(default_factory=list)  # (task id, status): left alone
    listeners_removed: list = field(default_factory=list)  # (queue, listener id)

    def lines(self) -> list[str]:
        return [
            f"tasks filed again in their list or set: {len(self.relisted)}",
            f"held tasks indexed with an open lease: {len(self.indexed)}",
            f"tasks taken back from dead holders: {len(self.recovered)}",
            f"entries dropped (no such task, or another status): {len(self.dropped)}",
            f"listeners removed: {len(self.listeners_removed)}",
            f"tasks with an unknown status (left alone): {len(self.unknown_status)}",
        ] + [f"  unknown status {status!r}: task {task_id}" for task_id, status in self.unknown_status]


# where each status is filed: (key function, kind)
_FILED = {
    Status.PENDING: ("pending", "list"),
    Status.SCHEDULED: ("scheduled", "zset"),
    Status.COMPLETE: ("complete", "list"),
    Status.FAILED: ("failed", "list"),
}


def _file_again(queue_model: type[Queue], task_id: str, task: dict, report: CleanReport,
                now: float) -> None:
    """File a task missing from the structure of its status (one re-checking script).

    A reserved or started task goes in its queue's lease set with an open lease (`+inf`);
    any other in its list or sorted set.
    """
    keys, scripts = queue_model.keys(), queue_model.scripts()
    status, name = task["status"], task["queue"]
    if status in (Status.RESERVED.value, Status.STARTED.value):
        if scripts.tidy("relist", task_id, keys.leases(name), "zset", status, "+inf"):
            report.indexed.append(task_id)
        return
    wire, kind = _FILED[Status(status)]
    key = getattr(keys, wire)(name)
    if scripts.tidy("relist", task_id, key, kind, status, task["eta"] or now):
        report.relisted.append((task_id, key))


def _scan_tasks(job_model: type[Job]) -> dict[str, dict]:
    client, keys = job_model.client(), job_model.keys()
    prefix_length = len(keys.task_prefix)
    tasks: dict[str, dict] = {}
    batch: list[str] = []

    def flush() -> None:
        with client.pipeline(transaction=False) as pipe:
            for key in batch:
                pipe.hmget(key, "status", "queue", "node", "eta")
            for key, (status, queue, node, eta) in zip(batch, pipe.execute()):
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


def deep_clean(queue_model: type[Queue] = Queue, *, host: str | None = None,
               max_attempts: int | None = None, now: float | None = None) -> CleanReport:
    """Check every task and every Blueque structure, and fix what is out of place.

    * a task hash missing from the list or set of its status is filed there again;
    * a reserved or started task with no lease entry is given an open one (`+inf`) when
      its listener lives, and is taken back (see `light_clean`) when it does not;
    * a list, set or lease entry whose task is gone, or has another status, is dropped;
    * a listener whose process is gone (this host) or whose worker stopped beating is
      unregistered;
    * a task with a status outside the protocol is left alone and reported.
    """
    now = time.time() if now is None else now
    host = host or host_name()
    job_model, keys, scripts = queue_model.job_model, queue_model.keys(), queue_model.scripts()
    client = queue_model.client()
    report = CleanReport()
    tasks = _scan_tasks(job_model)
    names = set(job_model.queue_names()) | {t["queue"] for t in tasks.values() if t["queue"]}
    workers = dict(client.zrange(keys.workers, 0, -1, withscores=True))

    dead_listeners: dict[str, set] = defaultdict(set)
    live_listeners: dict[str, set] = {}
    for name in sorted(names):
        members = client.smembers(keys.listeners(name))
        for listener in members:
            if listener_is_dead(listener, host, workers, now):
                if queue_model.named(name).remove_listener(listener):
                    report.listeners_removed.append((name, listener))
                dead_listeners[name].add(listener)
        live_listeners[name] = set(members) - dead_listeners[name]

    held = (Status.RESERVED.value, Status.STARTED.value)
    to_recover = []
    for task_id, task in tasks.items():
        status, name = task["status"], task["queue"]
        if status not in Status._value2member_map_:
            report.unknown_status.append((task_id, status))
            continue
        if not name:
            report.unknown_status.append((task_id, f"{status} (no queue field)"))
            continue
        if status in held:
            if task["node"] in dead_listeners.get(name, set()):
                to_recover.append((name, task_id, None, task["node"]))  # even with an open lease
            elif client.zscore(keys.leases(name), task_id) is None:
                if task["node"] in live_listeners.get(name, set()):
                    _file_again(queue_model, task_id, task, report, now)
                else:
                    to_recover.append((name, task_id, None, task["node"]))
            continue
        _file_again(queue_model, task_id, task, report, now)
    report.recovered = scripts.recover(to_recover, now, expired_only=False,
                                       max_attempts=max_attempts, why="its listener is gone")
    for name in sorted(names):
        _drop_strays(queue_model, name, report)
    return report


def reindex(queue_model: type[Queue] = Queue) -> CleanReport:
    """Bring the status index up to date for tasks written by other Blueque clients.

    The index of `Job.status` and `Job.queue` reads the Blueque structures themselves;
    the one thing other clients do not keep is the lease set, through which reserved
    tasks are listed. Every reserved or started task without a lease entry gets an open
    one (`+inf`, never taken back: its holder does not renew leases), and every task
    missing from the list or set of its status is filed there again. Nothing is taken
    back and no listener is removed: that is `deep_clean`'s work.
    """
    report, now = CleanReport(), time.time()
    for task_id, task in _scan_tasks(queue_model.job_model).items():
        if task["status"] not in Status._value2member_map_ or not task["queue"]:
            report.unknown_status.append((task_id, task["status"]))
        else:
            _file_again(queue_model, task_id, task, report, now)
    return report


def _drop_strays(queue_model: type[Queue], name: str, report: CleanReport) -> None:
    """Remove the entries of a queue's structures whose task is gone or has another status."""
    keys, scripts, client = queue_model.keys(), queue_model.scripts(), queue_model.client()
    checks = [(keys.pending(name), "list", "pending"), (keys.scheduled(name), "zset", "scheduled"),
              (keys.complete(name), "list", "complete"), (keys.failed(name), "list", "failed"),
              (keys.leases(name), "zset", "reserved started")]
    for key, kind, statuses in checks:
        members = client.lrange(key, 0, -1) if kind == "list" else client.zrange(key, 0, -1)
        for task_id in set(members):
            if scripts.tidy("unlist", task_id, key, kind, statuses):
                report.dropped.append((key, task_id))
    for member in client.smembers(keys.started(name)):
        task_id = member.rpartition(" ")[2]
        if scripts.tidy("unlist", task_id, keys.started(name), "set", "started", member):
            report.dropped.append((keys.started(name), member))
    for key in client.scan_iter(match=keys.reserved_pattern(name), count=1000):
        for task_id in set(client.lrange(key, 0, -1)):
            if scripts.tidy("unlist", task_id, key, "list", "reserved started"):
                report.dropped.append((key, task_id))
