"""The lease keeper: a worker's heartbeat, the leases of its tasks, and who else is dead.

`LeaseKeeper` beats every `liveness_interval` from a thread with its own connection: one
script records that the worker is alive, renews the leases of its running tasks when due
(`heartbeat_interval`, or a third of the shortest lease), and tells which other workers
may be dead. The keeper judges them (a worker of this machine by its process, one of
another machine by its expired record) and hands the dead ones to the worker's thread; a
lease found lost is posted as `LEASE_LOST`. `watch_orphaned` runs inside a task process
and keeps its lease while no worker does.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from queue import Empty, SimpleQueue
from typing import TYPE_CHECKING, Any, Callable, cast

from redis.exceptions import ResponseError

from ..connection.clients import private_client
from ..exceptions import REDIS_AWAY
from ..protocol.liveness import MACHINE_ID, host_name, process_alive, process_start_time
from ..protocol.options import DEFAULT_RETENTION, Retention, renewal_period
from ..protocol.scripts import Beat, Lease, Renewal, Scripts
from ..protocol.statuses import FINISHED_BY_RUN
from ..protocol.values import MAX_SECONDS
from .processes import Heartbeat
from .running import Event, Origin, RunningTask, RunningTasks

if TYPE_CHECKING:
    from ..models import Queue
    from .watch import TaskWatch

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DeadWorker:
    """A worker found dead, and what taking back its tasks needs to know."""

    worker_id: str
    machine: str | None
    queues: list[str]
    same_machine: bool
    why: str


@dataclass(frozen=True)
class Terms:
    """The worker's defaults for lease terms (a task's or its queue's own come first)."""

    ttr: float | None
    max_run_time: float | None
    max_attempts: int | None
    retention: Retention = DEFAULT_RETENTION


class LeaseKeeper:
    """Beats for one worker: says it is alive, keeps its tasks' leases, spots dead workers."""

    def __init__(self, listener_id: str, queues: Sequence[Queue], tasks: RunningTasks, *,
                 heartbeat_interval: float, liveness_interval: float,
                 liveness_timeout: float, watch: TaskWatch | None = None,
                 describe: Callable[[], dict[str, Any]] | None = None) -> None:
        self.listener_id = listener_id
        self.watch = watch  # what each beat reads of the running tasks, and applies
        self.queue_model = type(queues[0])
        self.tasks = tasks
        self.heartbeat_interval = heartbeat_interval
        self.liveness_interval = liveness_interval
        self.liveness_timeout = liveness_timeout
        self._identity = {
            "machine": MACHINE_ID, "pid": os.getpid(), "pstart": process_start_time(os.getpid()),
            "host": host_name(), "queues": [queue.pk.get() for queue in queues],
            "since": time.time(), "liveness_timeout": liveness_timeout}
        #: what the worker says of itself at each beat beyond its identity (its
        #: concurrency, running count, load, state), shown by `blueque workers`
        self.describe = describe
        self.scripts: Scripts | None = None
        self.dead: SimpleQueue[DeadWorker] = SimpleQueue()
        self._heartbeat: Heartbeat | None = None
        self._next_renewal = 0.0
        self._fresh_since: float | None = None  # server time of the first beat in a row
        self._last_beat: float | None = None  # server time of the last beat
        self.revived = False
        self._reported: dict[str, float] = {}  # worker id -> when (monotonic) it was

    def start(self) -> None:
        """Beat once now (the worker says it is alive at once), then from a thread.

        An earlier worker of this machine with this listener id, whose process is gone
        (a container restarted in place keeps its host name, and often its pids), is
        posted dead before the first beat takes its record over: its tasks come back at
        once, not when their leases end."""
        self.scripts = Scripts(private_client(self.queue_model.client()),
                               self.queue_model.keys())
        self._judge_predecessor()
        self.beat()
        self._heartbeat = Heartbeat(self.interval, self.beat)
        self._heartbeat.start()

    def scripts_or_fail(self) -> Scripts:
        """The keeper's scripts, on its own connection (once started)."""
        assert self.scripts is not None, "start() first"
        return self.scripts

    def renewal_interval(self) -> float:
        """Seconds between two renewals: `heartbeat_interval`, or the renewal period of the
        shortest lease running (`renewal_period`)."""
        periods = [renewal_period(task.ttr) for task in self.tasks.snapshot() if task.ttr]
        return min([self.heartbeat_interval, *periods])

    def interval(self) -> float:
        """Seconds to the next beat."""
        until_renewal = self._next_renewal - time.monotonic()
        return max(0.001, min(self.liveness_interval, until_renewal))

    @property
    def identity(self) -> Beat:
        """Who beats, as its record says: its identity and what it says of itself now."""
        described = self.describe() if self.describe is not None else {}
        return Beat(self.listener_id, MACHINE_ID, json.dumps({**described, **self._identity}))

    def beat(self) -> None:
        """Say the worker is alive, renew the leases when due, read how the running tasks
        are (see `watch.TaskWatch`), judge the other workers."""
        assert self.scripts is not None, "start() first"
        due = time.monotonic() >= self._next_renewal
        leases = self.tasks.leases() if due else []
        running = self.tasks.snapshot()
        # a task run in the worker's own thread may keep the heartbeat from running (a
        # long call holding the GIL): it speaks for itself for a whole lease
        alive_for = {task.task_id: task.ttr or MAX_SECONDS for task in running
                     if task.origin is Origin.IN_PROCESS}
        watch = self.watch
        try:
            renewal = self.scripts.upkeep.renew(
                leases, beat=self.identity, alive_for=alive_for,
                liveness_timeout=self.liveness_timeout,
                watched=watch.to_read(running) if watch else (),
                canceling=sorted({task.queue_name for task in running}) if watch else ())
        except REDIS_AWAY:
            self._fresh_since = None  # until it beats again, it judges no one
            raise
        if due:
            self._next_renewal = time.monotonic() + self.renewal_interval()
        self.tasks.renewed(leases, renewal.renewed)
        self._post_lost(renewal, leases)
        if watch is not None:
            watch.seen(renewal.canceling, renewal.watched)
        if renewal.revived and self._last_beat is not None:
            self.revived = True  # taken for dead meanwhile: the worker registers again
            self.tasks.wake()
        self._judge(renewal)

    def _post_lost(self, renewal: Renewal, leases: list[Lease]) -> None:
        renewed = {lease.task_id: lease.attempt for lease in leases}
        running = {task.task_id: task for task in self.tasks.snapshot()}
        for task_id, status in renewal.lost.items():
            task = running.get(task_id)
            # the attempt renewed, not the one running now: it may be a newer one; a lease
            # lost to our own outcome (complete, failed) was not taken from us
            if status not in FINISHED_BY_RUN and task is not None and task_id in renewed:
                self.tasks.post_for(task_id, int(renewed[task_id]), Event.LEASE_LOST, status)

    def _judge(self, renewal: Renewal) -> None:
        """Post the workers found dead: of this machine, by their process; of another, by
        their record, and only once this worker has itself beaten without a gap for a whole
        timeout (a worker cut from Redis, or a Redis that stalled, must not take everyone
        for dead when it comes back)."""
        gap = renewal.now - (self._last_beat if self._last_beat is not None else renewal.now)
        if self._fresh_since is None or gap > self.liveness_timeout / 2:
            self._fresh_since = renewal.now  # a gap (a stalled Redis, a pause): start again
        self._last_beat = renewal.now
        for worker_id, identity in renewal.siblings.items():
            info = _identity(identity)
            if not process_alive(info.get("pid"), info.get("pstart")):
                self._report(worker_id, info, True, "its process is gone")
        if renewal.now - self._fresh_since < self.liveness_timeout:
            return
        for worker_id in renewal.expired:
            if worker_id != self.listener_id and worker_id not in renewal.siblings:
                info = _identity(cast("str | None", self.scripts_or_fail().client.hget(
                    self.queue_model.keys().workers_info, worker_id)))
                self._report(worker_id, info, False, "it missed its heartbeats")

    def _judge_predecessor(self) -> None:
        """Post the earlier worker of this id (see `start`) if it is dead."""
        try:
            info = _identity(cast("str | None", self.scripts_or_fail().client.hget(
                self.queue_model.keys().workers_info, self.listener_id)))
        except ResponseError:  # the records are of another type: nobody to judge
            return
        pid, pstart = info.get("pid"), info.get("pstart")
        # this very process is alive: a record of its own is never taken for dead
        if (info.get("machine") == MACHINE_ID and type(pid) is int
                and not process_alive(pid, pstart if isinstance(pstart, str) else None)):
            self._report(self.listener_id, info, True, "an earlier worker with this id is gone")

    def _report(self, worker_id: str, info: dict[str, Any], same_machine: bool,
                why: str) -> None:
        # reported again after a timeout if it is still there: its take-back may have failed
        now = time.monotonic()
        if self._reported.get(worker_id, -1e18) + self.liveness_timeout > now:
            return
        self._reported[worker_id] = now
        self.dead.put(DeadWorker(worker_id, info.get("machine"), list(info.get("queues") or []),
                                 same_machine, why))
        self.tasks.wake()

    def unreport(self, worker_ids: list[str]) -> None:
        """Judge these workers again at the next beat (their take-back failed)."""
        for worker_id in worker_ids:
            self._reported.pop(worker_id, None)

    def found_dead(self) -> list[DeadWorker]:
        """The workers found dead since the last call (for the worker's thread)."""
        found = []
        while True:
            try:
                found.append(self.dead.get_nowait())
            except Empty:
                return found

    def nudge(self, ttr: float) -> None:
        """A task with a lease of `ttr` seconds starts: renew at once if that is sooner."""
        self._next_renewal = min(self._next_renewal, time.monotonic() + renewal_period(ttr))
        if self._heartbeat is not None:
            self._heartbeat.nudge(renewal_period(ttr))

    def stop(self, detached: bool) -> None:
        """Stop beating; the worker's record goes too unless it left tasks running."""
        if self._heartbeat is not None:
            self._heartbeat.stop()
        if not detached and self.scripts is not None:
            self.scripts.upkeep.forget_worker(self.listener_id, MACHINE_ID)


def _identity(text: str | None) -> dict[str, Any]:
    """A worker's identity as its beats record it (empty when unknown or unreadable)."""
    try:
        value = json.loads(text or "{}")
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def watch_orphaned(current: Callable[[], RunningTask | None], scripts: Callable[[], Scripts],
                   heartbeat_interval: float, liveness_timeout: float,
                   on_lost: Callable[[RunningTask, str], None]) -> Heartbeat:
    """In a task's process: renew its own lease whenever its worker is gone.

    Between a worker that leaves its tasks running and the next worker that adopts them,
    nobody else renews their leases; this thread keeps them, and ends the process (its
    whole group) if another attempt took the task meanwhile. `current()` gives the task
    once the process has one (a spare starts the thread before its task arrives);
    `scripts()` makes the process's own scripts, the first time it is orphaned.
    """
    parent = os.getppid()
    made: list[Scripts] = []

    def beat() -> None:
        task = current()
        if task is None or os.getppid() == parent:
            return
        if not made:
            made.append(scripts())
        lost = made[0].upkeep.renew([Lease(task.queue_name, task.task_id, task.attempt, task.ttr)],
                                    alive_for={task.task_id: liveness_timeout}).lost
        if lost and lost.get(task.task_id) not in FINISHED_BY_RUN:  # not our own outcome
            on_lost(task, lost[task.task_id])
            os.killpg(0, signal.SIGKILL)  # the task's own children too

    def interval() -> float:
        task = current()
        ttr = task.ttr if task is not None else None
        return min(heartbeat_interval, renewal_period(ttr)) if ttr else heartbeat_interval

    heartbeat = Heartbeat(interval, beat, name="limpyd-blueque-orphan-heartbeat")
    heartbeat.start()
    return heartbeat
