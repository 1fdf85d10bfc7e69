"""What a worker does beside running tasks: leases, adoption, cleaning, collecting and
stopping its task processes. `Worker` inherits it; it is split out to keep each concern
readable on its own.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from typing import TYPE_CHECKING, Any, Callable

from .atomic import Scripts
from .cleaning import light_clean
from .connection import private_client
from .exceptions import TaskTimeout
from .liveness import is_this_host, process_alive
from .exceptions import LimpydBluequeError, RedisUnavailable
from .processes import (
    EXIT_REDIS_UNAVAILABLE, DoneNotices, Heartbeat, RunningTask, describe_exit, reap, signal_group,
)

if TYPE_CHECKING:
    from .models import Queue


class Supervision:
    """Leases, adoption, cleaning and the task processes of a `Worker`."""

    # -- periodic work ----------------------------------------------------------------------
    def clean(self) -> None:
        """Every `clean_interval`: adopt orphans of this host, take back expired leases."""
        now = time.monotonic()
        if now < self._next_clean:
            return
        self._next_clean = now + self.clean_interval
        self.adopt_orphans()
        recovered = light_clean(self.queue_model, max_attempts=self.max_attempts)
        for task_id, outcome in recovered.items():
            if outcome != "skipped":
                self.log(self.task_recovered_message(task_id, outcome), logging.WARNING)

    # -- adoption ------------------------------------------------------------------------------
    def adopt_orphans(self) -> None:
        """Take over the tasks of this host's listeners whose worker process is gone.

        A task still running in its own process is watched until it ends (its lease is
        renewed meanwhile); a reserved task that never started goes back to pending, to
        be run; a started task whose process is gone is taken back like an expired lease.
        """
        alive_until = dict(self.queue_model.client().zrange(
            self.queue_model.keys().workers, 0, -1, withscores=True))
        now = time.time()
        for name in self.queues:
            queue = self.queue(name)
            for listener in sorted(queue.listeners.smembers()):
                listener_host, _, pid = listener.rpartition("_")
                if (listener == self.id or not is_this_host(listener_host) or not pid.isdigit()
                        or process_alive(int(pid))):
                    continue
                if alive_until.get(listener, 0) > now:
                    # its worker still beats: a process of the same id on another
                    # machine that shares this host name, not a dead one here
                    continue
                if not queue.remove_listener(listener):
                    continue  # another worker of this host adopts it
                self.log(f"adopting the tasks of {listener}, whose process is gone")
                for task_id in queue.reserved(listener).lrange(0, -1):
                    self.adopt(queue, task_id)

    def adopt(self, queue: Queue, task_id: str) -> None:
        """Watch, rerun or take back one task of a dead listener."""
        job = self.job_model.lazy_connect(task_id)
        try:
            data = job.data()
        except LimpydBluequeError:
            return
        pid, pstart = data.pid, data.extra.get("pstart") or None
        if data.status == "started" and process_alive(pid, pstart):
            job.known = {"queue": data.queue, "node": data.node,
                         "attempt": str(data.attempt) if data.attempt else ""}
            ttr = (float(data.extra["ttr"]) if data.extra.get("ttr")
                   else queue.settings().get("ttr", self.ttr))
            task = RunningTask(job, queue, data.attempt or None, ttr, pid=pid, adopted=True,
                               pstart=pstart)
            with self._lock:
                self.running[task_id] = task
            self.log(f"[{queue.pk.get()}|{task_id}] still running in process {pid}: watching it")
        elif data.status in ("reserved", "started"):
            outcome = self.queue_model.scripts().recover(
                [(queue.pk.get(), task_id, data.attempt or None, data.node)], time.time(),
                expired_only=False, max_attempts=self.max_attempts,
                why="its worker and process are gone").get(task_id)
            self.log(self.task_recovered_message(task_id, outcome), logging.WARNING)

    # -- retries ------------------------------------------------------------------------------
    def retrying(self, step: Callable[[], Any]) -> Any:
        """Run `step`, retrying for `outcome_retry_timeout` seconds while Redis is away."""
        deadline = time.monotonic() + self.outcome_retry_timeout
        while True:
            try:
                return step()
            except RedisUnavailable as error:
                if time.monotonic() > deadline:
                    raise
                self.log(f"{error}; retrying", logging.WARNING)
                time.sleep(0.5)

    def watch_orphaned(self, current: Callable[[], RunningTask | None]) -> None:
        """In a task's process: renew its own lease whenever its worker is gone.

        Between a worker that leaves its tasks running and the next worker that adopts
        them, nobody else renews their leases; this thread keeps them, and ends the
        process if another attempt took the task meanwhile. `current()` gives the task
        once the process has one (a spare starts the thread before its task arrives).
        """
        parent = os.getppid()
        scripts: list[Scripts] = []  # made once orphaned: a task that is not costs nothing

        def beat() -> None:
            task = current()
            if task is None or os.getppid() == parent:
                return
            if not scripts:
                scripts.append(Scripts(private_client(self.job_model.client()),
                                       self.job_model.keys()))
            lost = scripts[0].renew([(task.queue_name, task.task_id, task.attempt, task.ttr)],
                                 time.time())
            if lost and lost.get(task.task_id) not in ("complete", "failed"):
                self.log(self.job_lost_message(task.job, task.queue, lost[task.task_id]),
                         logging.ERROR)
                os.killpg(0, signal.SIGKILL)  # the task's own children too

        def interval() -> float:
            task = current()
            ttr = task.ttr if task is not None else None
            return min(self.heartbeat_interval, ttr / 3) if ttr else self.heartbeat_interval

        Heartbeat(interval, beat, name="limpyd-blueque-orphan-heartbeat").start()

    def beat_interval(self) -> float:
        """Seconds to the next renewal: a third of the shortest lease running, at most
        `heartbeat_interval`."""
        with self._lock:
            ttrs = [task.ttr for task in self.running.values() if task.ttr]
        return min([self.heartbeat_interval] + [ttr / 3 for ttr in ttrs])

    # -- task processes -------------------------------------------------------------------------
    def collect_ended(self) -> None:
        """Record the end of task children; one killed before recording fails with the signal."""
        if not self.fork:
            return
        with self._lock:
            by_pid = {task.pid: task for task in self.running.values()}
        for kind, pid in self._done.collect() if self._done else ():
            task = by_pid.get(pid)
            if task is None or task.adopted:
                continue
            task.recorded = True
            if kind == DoneNotices.DONE:
                del by_pid[pid]
                with self._lock:
                    self.running.pop(task.task_id, None)  # its slot is free at once
                self._exiting.add(pid)
        self.reap_exiting()
        for task in by_pid.values():
            if task.overdue and not task.adopted:
                task.timed_out = True
                signal_group(task.pid, signal.SIGKILL)
        spare = getattr(self, "_spare", None)
        if spare is not None and reap([spare.pid]):
            spare.close()
            self._spare = None  # died while waiting: the next task gets a new one
        ended = reap(pid for pid, task in by_pid.items() if not task.adopted)
        with self._lock:  # first free every slot: handling one may fail
            for pid, _ in ended:
                self.running.pop(by_pid[pid].task_id, None)
        for pid, status in ended:
            try:
                self.process_ended(by_pid[pid], status)
            except Exception:  # noqa: BLE001 - its lease ends, and the task is taken back
                self.log(f"[{by_pid[pid].queue_name}|{by_pid[pid].task_id}] could not record "
                         "the end of its process", logging.ERROR, exc_info=True)
        for task in by_pid.values():
            if task.adopted and not process_alive(task.pid, task.pstart):
                self.adopted_ended(task)
        if not self.running and self.status == "running":
            self.set_status("waiting")

    def process_ended(self, task: RunningTask, status: int) -> None:
        """A task process ended before giving notice: record why (signal, exit code)."""
        problem = describe_exit(status)
        if task.timed_out:
            problem = TaskTimeout(task.max_run_time)
        if problem is not None and not task.lost and not task.recorded:
            self.job_error(task.job, task.queue, problem, None)
        elif os.WIFEXITED(status) and os.WEXITSTATUS(status) == EXIT_REDIS_UNAVAILABLE:
            self.retrying(lambda: self.requeue_interrupted(task))

    def reap_exiting(self, wait: bool = False) -> None:
        """Collect the task processes that gave notice of their outcome and then exited."""
        for pid, _ in reap(self._exiting):
            self._exiting.discard(pid)
        if wait:
            for pid in list(self._exiting):
                try:
                    os.waitpid(pid, 0)
                except ChildProcessError:
                    pass
            self._exiting.clear()

    def adopted_ended(self, task: RunningTask) -> None:
        """An adopted task's process ended: its outcome is recorded, or it is taken back."""
        with self._lock:
            self.running.pop(task.task_id, None)
        outcome = self.queue_model.scripts().recover(
            [(task.queue_name, task.task_id, task.attempt, task.job.known.get("node"))],
            time.time(), expired_only=False,
            max_attempts=self.max_attempts, why="its process ended without an outcome"
        ).get(task.task_id)
        if outcome == "skipped":
            self.log(f"[{task.queue_name}|{task.task_id}] adopted task ended and recorded its outcome")
        else:
            self.log(self.task_recovered_message(task.task_id, outcome), logging.WARNING)

    # -- leases -----------------------------------------------------------------------------
    def renew_leases(self) -> None:
        """Heartbeat: extend the lease of every running task; stop the ones lost."""
        with self._lock:
            tasks = list(self.running.values())
        tasks = [t for t in tasks if not t.lost and not t.recorded]
        leases = [(t.queue_name, t.task_id, t.attempt, t.ttr) for t in tasks]
        now = time.time()
        lost = self._heartbeat_scripts.renew(leases, now)
        # this worker is alive until three beats are missed
        self._heartbeat_scripts.client.zadd(self.queue_model.keys().workers,
                                            {self.id: now + 3 * self.heartbeat_interval})
        for task in tasks:
            if (task.task_id in lost and lost[task.task_id] not in ("complete", "failed")
                    and not task.recorded):  # read again: the notice may have come since
                self.lease_lost(task, lost[task.task_id])

    def lease_lost(self, task: RunningTask, status: str) -> None:
        """Another attempt holds the task now: stop running it here."""
        task.lost = True
        self.log(self.job_lost_message(task.job, task.queue, status), logging.ERROR)
        if self.fork and task.pid and not task.adopted:
            signal_group(task.pid, signal.SIGKILL)

    # -- stopping -----------------------------------------------------------------------------
    def terminate_running(self) -> bool:
        """Apply `on_terminate` to the running tasks; True if some were left running."""
        if not self.running or not self.fork:
            return False
        # a worker ending by itself (max_loops, max_duration) waits for its tasks; the
        # policy applies to a stop signal (a second signal switches it to "requeue")
        deadline = None
        if self.end_signal_caught and self.terminate_timeout is not None:
            deadline = time.monotonic() + self.terminate_timeout
        while self.running:
            if self.end_signal_caught and self.on_terminate == "detach":
                self.log(f"leaving {len(self.running)} task(s) running for the next worker "
                         "of this host")
                return True
            if self.end_signal_caught and self.on_terminate == "requeue":
                break
            if deadline is not None and time.monotonic() >= deadline:
                break
            self._wakeups.wait(0.2)
            self.collect_ended()
        if self.running:
            self.interrupt_running()
        return False

    def interrupt_running(self, grace: float = 10.0) -> None:
        """SIGTERM the task processes, SIGKILL them after `grace` seconds, requeue them."""
        with self._lock:
            tasks = list(self.running.values())
        for task in tasks:
            task.lost = True  # their end is ours: no failure is recorded for it
            signal_group(task.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while self.running and time.monotonic() < deadline:
            time.sleep(0.05)
            self.collect_ended()
        for task in list(self.running.values()):
            signal_group(task.pid, signal.SIGKILL)
        while self.running:
            time.sleep(0.02)
            self.collect_ended()
        for task in tasks:
            self.requeue_interrupted(task)

    def requeue_interrupted(self, task: RunningTask) -> None:
        """Put an interrupted task back at the front of its queue, if it is still ours."""
        if task.job.requeue(listener_id=self.id, attempt=task.attempt, front=True):
            self.log(f"[{task.queue_name}|{task.task_id}] interrupted, back at the front of the queue")

