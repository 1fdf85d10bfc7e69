"""The lease keeper: a worker's heartbeat, the leases of its tasks, and what dead holders left.

`LeaseKeeper` renews the leases of the running tasks and records that the worker is alive
(one script per beat, from a thread with its own connection), posts `LEASE_LOST` for a
task another attempt took, and every `clean_interval` adopts the tasks of dead workers of
this host and takes back expired leases everywhere. `watch_orphaned` runs inside a task
process and keeps its lease while no worker does.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from .atomic import Reservation, Scripts
from .cleaning import light_clean
from .connection import private_client
from .liveness import is_this_host, listener_is_dead, process_alive
from .processes import Heartbeat
from .running import Event, Origin, RunningTask, RunningTasks

if TYPE_CHECKING:
    from .models import Job, Queue

logger = logging.getLogger(__name__)
#: a worker is alive until it misses this many heartbeats
BEATS_OF_GRACE = 3
#: statuses a lost lease may show without its task being taken from us: our own outcome
FINISHED_BY_US = ("complete", "failed")


@dataclass(frozen=True)
class Terms:
    """The worker's defaults for lease terms (a task's or its queue's own come first)."""

    ttr: float | None
    max_run_time: float | None
    max_attempts: int | None


class LeaseKeeper:
    """Keeps the leases of one worker's tasks, and takes back what dead holders left."""

    def __init__(self, listener_id: str, queues: list[Queue], tasks: RunningTasks, *,
                 job_model: type[Job], terms: Terms, heartbeat_interval: float,
                 clean_interval: float, log: Callable[..., None] | None = None) -> None:
        self.listener_id = listener_id
        self.queues = {queue.pk.get(): queue for queue in queues}
        self.queue_model = type(queues[0])
        self.job_model = job_model
        self.tasks = tasks
        self.terms = terms
        self.heartbeat_interval = heartbeat_interval
        self.clean_interval = clean_interval
        #: `log(message, level)`: the worker's own, so that its lines carry its id
        self.log = log or (lambda message, level=logging.INFO: logger.log(level, message))
        self._next_clean = 0.0
        self._heartbeat: Heartbeat | None = None
        self._scripts: Scripts | None = None

    # -- the heartbeat ----------------------------------------------------------------------
    def start(self) -> None:
        """Beat once now (the worker says it is alive at once), then from a thread."""
        client = private_client(self.queue_model.client())
        self._scripts = Scripts(client, self.queue_model.keys())
        self.beat()
        self._heartbeat = Heartbeat(self.interval, self.beat)
        self._heartbeat.start()

    def interval(self) -> float:
        """Seconds to the next beat: a third of the shortest lease running, at most
        `heartbeat_interval`."""
        ttrs = [task.ttr / 3 for task in self.tasks.snapshot() if task.ttr]
        return min([self.heartbeat_interval, *ttrs])

    def beat(self) -> None:
        """Renew every lease and the worker's record; post `LEASE_LOST` for lost ones."""
        assert self._scripts is not None, "start() first"
        running = {task.task_id: task for task in self.tasks.snapshot()}
        leases = self.tasks.leases()
        lost = self._scripts.renew(
            leases, worker_id=self.listener_id,
            alive_until=time.time() + BEATS_OF_GRACE * self.heartbeat_interval)
        for task_id, status in lost.items():
            if status not in FINISHED_BY_US and task_id in running:
                self.tasks.post(running[task_id], Event.LEASE_LOST, status)

    def nudge(self, ttr: float) -> None:
        """A task with a lease of `ttr` seconds starts: beat now if the wait is longer."""
        if self._heartbeat is not None:
            self._heartbeat.nudge(ttr / 3)

    def stop(self, detached: bool) -> None:
        """Stop beating; the worker's record goes too unless it left tasks running."""
        if self._heartbeat is not None:
            self._heartbeat.stop()
        if not detached:
            self.queue_model.forget_worker(self.listener_id)

    # -- taking back what dead holders left ----------------------------------------------------
    def clean(self) -> dict[str, str]:
        """Every `clean_interval`: adopt dead workers' tasks of this host, take back expired
        leases in every queue. Returns `{task id: outcome}` of the tasks taken back."""
        now = time.monotonic()
        if now < self._next_clean:
            return {}
        self._next_clean = now + self.clean_interval
        recovered = self.adopt_orphans()
        recovered.update(light_clean(self.queue_model, max_attempts=self.terms.max_attempts))
        return {task_id: outcome for task_id, outcome in recovered.items() if outcome != "skipped"}

    def adopt_orphans(self) -> dict[str, str]:
        """Take over the tasks of this host's dead listeners on the worker's queues.

        A task still running in its own process is watched until it ends (its lease is
        renewed meanwhile); a reserved task, or a started one whose process is gone, is
        taken back, to run again.
        """
        records, now = self.queue_model.worker_records(), time.time()
        recovered: dict[str, str] = {}
        for queue in self.queues.values():
            for listener in sorted(queue.listeners.smembers()):
                if (listener == self.listener_id or not self._of_this_host(listener)
                        or not listener_is_dead(listener, records, now)):
                    continue
                if not queue.remove_listener(listener):
                    continue  # another worker of this host adopts it
                self.log(f"adopting the tasks of {listener}, whose process is gone")
                for task_id in queue.reserved(listener).lrange(0, -1):
                    recovered.update(self.adopt(queue, task_id))
        return recovered

    @staticmethod
    def _of_this_host(listener: str) -> bool:
        return is_this_host(listener.rpartition("_")[0])

    def adopt(self, queue: Queue, task_id: str) -> dict[str, str]:
        """Watch, or take back, one task of a dead listener; `{task id: outcome}` if taken."""
        assert self._scripts is not None, "start() first"
        name = queue.pk.get()
        reservation = self._scripts.terms(name, task_id, self.terms.ttr,
                                          self.terms.max_run_time, self.terms.max_attempts)
        if reservation is None:
            return {}
        status, pid, pstart = (reservation.fields.get(field)
                               for field in ("status", "pid", "pstart"))
        if (status == "started" and pid and pid.isdigit()
                and process_alive(int(pid), pstart or None)):
            self.watch(queue, reservation, int(pid), pstart or None)
            return {}
        if status not in ("reserved", "started"):
            return {}
        return self._scripts.recover([(name, task_id, reservation.attempt or None,
                                       reservation.node)], time.time(), expired_only=False,
                                     max_attempts=self.terms.max_attempts,
                                     why="its worker and process are gone")

    def watch(self, queue: Queue, reservation: Reservation, pid: int, pstart: str | None) -> None:
        """Follow a task running in a process this worker did not fork, to its end."""
        job = self.job_model.from_reservation(reservation)
        self.tasks.add(RunningTask(job, queue, Origin.ADOPTED, pid=pid, pstart=pstart))
        self.log(f"[{reservation.queue}|{reservation.task_id}] still running in process {pid}: "
                 "watching it")

    def poll_adopted(self) -> None:
        """Post `ENDED` for the adopted tasks whose process is gone."""
        for task in self.tasks.snapshot():
            if task.origin is Origin.ADOPTED and not process_alive(task.pid, task.pstart):
                self.tasks.post(task, Event.ENDED)


def watch_orphaned(current: Callable[[], RunningTask | None], scripts: Callable[[], Scripts],
                   heartbeat_interval: float,
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
        lost = made[0].renew([(task.queue_name, task.task_id, task.attempt, task.ttr)])
        if lost and lost.get(task.task_id) not in FINISHED_BY_US:
            on_lost(task, lost[task.task_id])
            os.killpg(0, signal.SIGKILL)  # the task's own children too

    def interval() -> float:
        task = current()
        ttr = task.ttr if task is not None else None
        return min(heartbeat_interval, ttr / 3) if ttr else heartbeat_interval

    heartbeat = Heartbeat(interval, beat, name="limpyd-blueque-orphan-heartbeat")
    heartbeat.start()
    return heartbeat
