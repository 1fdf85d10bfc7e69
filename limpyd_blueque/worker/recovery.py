"""Taking back what dead holders left: the tasks of dead workers and listeners, and
expired leases.

`Recovery` runs in the worker's thread. It takes back at once the tasks of a worker the
lease keeper found dead (`take_back`): on the same machine, a task whose process still
runs is watched to its end and the others go back in line; from another machine, every
task goes back except one whose own process says it lives. Every `clean_interval` it also
adopts the tasks of this host's dead listeners that are not workers of this library (the
reference's), and takes back expired leases in every queue.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Callable

from redis.exceptions import ResponseError

from ..exceptions import HOUSEKEEPING_ERRORS, ProtocolError
from ..protocol.liveness import is_this_host, listener_host_and_pid, listener_is_dead, process_alive
from ..protocol.scripts import Reservation, Scripts
from ..protocol.statuses import RUNNING, Status
from ..upkeep.cleaning import light_clean
from ..upkeep.retention import CLEAN_CHUNK, clean_errors, clean_finished
from .running import Event, Origin, RunningTask, RunningTasks

if TYPE_CHECKING:
    from ..models import Error, Job, Queue
    from .heartbeat import DeadWorker, Terms

logger = logging.getLogger(__name__)
#: seconds a clean spends at most deleting what outlived its retention
RETENTION_BUDGET = 0.25
#: seconds between two looks at whether the processes of adopted tasks are still there
ADOPTED_POLL = 0.2


class Recovery:
    """Takes back, for one worker, what dead holders left."""

    def __init__(self, listener_id: str, queues: list[Queue], tasks: RunningTasks,
                 scripts: Callable[[], Scripts], *, job_model: type[Job], terms: Terms,
                 clean_interval: float, log: Callable[..., None] | None = None,
                 error_model: type[Error] | None = None) -> None:
        self.listener_id = listener_id
        self.queues = {queue.pk.get(): queue for queue in queues}
        self.queue_model = type(queues[0])
        self.job_model = job_model
        self.error_model = error_model
        self.tasks = tasks
        self.scripts = scripts
        self.terms = terms
        self.clean_interval = clean_interval
        #: `log(message, level)`: the worker's own, so that its lines carry its id
        self.log = log or (lambda message, level=logging.INFO: logger.log(level, message))
        self._next_clean = 0.0
        self._next_poll = 0.0

    # -- dead workers --------------------------------------------------------------------------
    def take_back(self, dead: DeadWorker) -> dict[str, str]:
        """Take back the tasks of a dead worker, in every queue it listened to; forget it.

        Returns `{task id: outcome}` of the tasks put back or failed.
        """
        names = dead.queues or self.queue_model.job_model.queue_names()
        # an earlier worker of this worker's own id: its listing and record are this one's
        own = dead.worker_id == self.listener_id
        recovered: dict[str, str] = {}
        for name in names:
            queue = self.queue_model.named(name)
            if not own:
                self.unlist(queue, dead.worker_id)
            # whether or not it was still listed (it may have been taken for dead once and
            # come back unlisted), its tasks are taken back: each step is fenced by holder
            task_ids = queue.reserved(dead.worker_id).lrange(0, -1)
            if task_ids:
                self.log(f"taking back the tasks of {dead.worker_id} in {name}: {dead.why}",
                         logging.WARNING)
            for task_id in task_ids:
                if dead.same_machine:
                    recovered.update(self.adopt(queue, task_id))
                else:
                    recovered.update(self.recover(name, task_id, dead.worker_id,
                                                  process_gone=False))
        if not own:
            self.scripts().upkeep.forget_worker(dead.worker_id, dead.machine)
        return recovered

    def unlist(self, queue: Queue, worker_id: str) -> None:
        """Take a dead worker out of a queue's listeners (a set of another type: logged)."""
        try:
            queue.remove_listener(worker_id)
        except ProtocolError as error:
            self.log(f"[{queue.pk.get()}] {error}", logging.ERROR)

    def take_back_each(self, found: list[DeadWorker]) -> tuple[dict[str, str], list[str]]:
        """`take_back` each dead worker apart: one that fails (Redis away) does not stop
        the others. Returns the outcomes, and the ids of the workers not taken back."""
        recovered: dict[str, str] = {}
        failed: list[str] = []
        for dead in found:
            try:
                recovered.update(self.take_back(dead))
            except HOUSEKEEPING_ERRORS as error:
                self.log(f"could not take back the tasks of {dead.worker_id}: {error}",
                         logging.ERROR)
                failed.append(dead.worker_id)
        return recovered, failed

    def recover(self, queue: str, task_id: str, holder: str | None, *, process_gone: bool,
                attempt: int | None = None) -> dict[str, str]:
        """Put one task of a dead holder back in line (or fail it, attempts used)."""
        return self.scripts().upkeep.recover(
            [(queue, task_id, attempt, holder)], time.time(), expired_only=False,
            max_attempts=self.terms.max_attempts, process_gone=process_gone,
            retention=self.terms.retention,
            why="its worker and process are gone" if process_gone else "its worker is gone")

    # -- this host's dead listeners -------------------------------------------------------------
    def clean(self) -> dict[str, str]:
        """Every `clean_interval`: adopt this host's dead listeners' tasks, take back expired
        leases in every queue. Returns `{task id: outcome}` of the tasks taken back."""
        now = time.monotonic()
        if now < self._next_clean:
            return {}
        self._next_clean = now + self.clean_interval
        recovered = self.adopt_orphans()
        recovered.update(light_clean(self.queue_model, max_attempts=self.terms.max_attempts,
                                     retention=self.terms.retention))
        self.apply_retention()
        return recovered

    def apply_retention(self, budget: float = RETENTION_BUDGET) -> int:
        """Delete the finished tasks of the worker's queues and the stored errors whose
        retention ran out (see `retention`), a chunk at a time for at most `budget`
        seconds: a backlog is worked off over the next cleans. How many were deleted."""
        now, deadline, deleted = time.time(), time.monotonic() + budget, 0
        while time.monotonic() < deadline:
            done = clean_finished(self.queue_model, list(self.queues), now)
            if self.error_model is not None:
                done += clean_errors(self.error_model, now)
            deleted += done
            if done < CLEAN_CHUNK:
                break
        return deleted

    def adopt_orphans(self) -> dict[str, str]:
        """Take over the tasks of this host's dead listeners on the worker's queues: those
        that are not workers of this library (a worker has a record, and the lease keeper
        judges it by its machine, never by its host name)."""
        records, now = self.queue_model.worker_records(), time.time()
        recovered: dict[str, str] = {}
        for queue in self.queues.values():
            try:
                listeners = sorted(queue.listeners.smembers())
            except ResponseError:  # a listener set of another type: nobody to adopt there
                continue
            for listener in listeners:
                if (listener == self.listener_id or listener in records
                        or not is_this_host(listener_host_and_pid(listener)[0])
                        or not listener_is_dead(listener, records, now)):
                    continue
                if not queue.remove_listener(listener):
                    continue  # another worker of this host adopts it
                self.log(f"adopting the tasks of {listener}, whose process is gone")
                for task_id in queue.reserved(listener).lrange(0, -1):
                    recovered.update(self.adopt(queue, task_id))
        return recovered

    def adopt(self, queue: Queue, task_id: str) -> dict[str, str]:
        """Watch, or take back, one task of a dead holder of this machine."""
        name = queue.pk.get()
        reservation = self.scripts().upkeep.terms(name, task_id, self.terms.ttr,
                                           self.terms.max_run_time, self.terms.max_attempts)
        if reservation is None:
            return {}
        status, pid, pstart = (reservation.fields.get(field)
                               for field in ("status", "pid", "pstart"))
        if (status == Status.STARTED and pid and pid.isdigit()
                and process_alive(int(pid), pstart or None)):
            self.watch(queue, reservation, int(pid), pstart or None)
            return {}
        if status not in RUNNING:
            return {}
        return self.recover(name, task_id, reservation.node, process_gone=True,
                            attempt=reservation.attempt or None)

    def watch(self, queue: Queue, reservation: Reservation, pid: int, pstart: str | None) -> None:
        """Follow a task running in a process this worker did not fork, to its end."""
        job = self.job_model.from_reservation(reservation)
        self.tasks.add(RunningTask(job, queue, Origin.ADOPTED, pid=pid, pstart=pstart))
        self.log(f"[{reservation.queue}|{reservation.task_id}] still running in process {pid}: "
                 "watching it")

    def poll_adopted(self) -> None:
        """Post `ENDED` for the adopted tasks whose process is gone (looked at every
        `ADOPTED_POLL` seconds: a turn of the worker's loop costs nothing per task)."""
        now = time.monotonic()
        if now < self._next_poll:
            return
        self._next_poll = now + ADOPTED_POLL
        for task in self.tasks.snapshot():
            if task.origin is Origin.ADOPTED and not process_alive(task.pid, task.pstart):
                self.tasks.post(task, Event.ENDED)
