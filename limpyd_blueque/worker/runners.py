"""How a task runs: the strategy a worker hands each task to.

`ForkedRunner` runs each task in a process of its own (a spare forked ahead, notices on a
pipe, the writes its task processes ask for, reaping, killing on lease loss or over the
maximum run time, stopping);
`InProcessRunner` runs it in the worker's own process. Both apply the transitions of
`running.RunningTask` and the actions that go with them, in one place (`apply`). Inside a
task process, `TaskProcess` plays the runner's part for the one task it runs.
"""

from __future__ import annotations

import gc
import logging
import os
import signal
import time
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

from ..exceptions import (
    CpuLimitExceeded,
    MemoryLimitExceeded,
    TaskKilled,
    TaskNotFound,
    TimeLimitExceeded,
    WorkerInterrupted,
)
from ..protocol.liveness import process_start_time
from ..protocol.statuses import RUNNING
from .bounds import (
    MEMORY_INTERVAL,
    Usage,
    can_watch_memory,
    group_memory,
    holding,
    in_process_limits,
)
from .processes import (
    EXIT_REDIS_UNAVAILABLE,
    Channel,
    DoneNotices,
    Payload,
    Spare,
    describe_exit,
    reap,
    signal_group,
)
from .relay import Desk
from .running import Event, Origin, RunningTask, TaskState
from .task_process import TaskProcess, run_spare

if TYPE_CHECKING:
    from ..models import Job, Queue
    from .contract import TaskHost
    from .outcomes import OutcomeRecorder

#: seconds a task process is given to stop after SIGTERM before SIGKILL
INTERRUPT_GRACE = 10.0
#: seconds between two looks at every running task's deadlines (run time, cancel grace),
#: and between two reaps when no SIGCHLD said a child ended (a safety net)
LOOK_INTERVAL = 0.1
REAP_INTERVAL = 1.0


class TaskRunner:
    """Runs the tasks a worker reserved, and applies what happens to them."""

    #: most tasks run at once (None: no limit)
    max_concurrency: int | None = None
    #: whether its tasks can outlive the worker (`on_terminate="detach"`)
    can_detach = False
    #: whether a stopping worker can interrupt its tasks at a deadline (`terminate_timeout`)
    can_time_out = False
    #: whether its tasks' memory and CPU time can be bounded, and their processes stopped
    #: to be handed over (`on_terminate="release"`)
    can_bound = False

    def __init__(self, worker: TaskHost) -> None:
        self.worker = worker
        self.tasks = worker.tasks

    def describe(self) -> str:
        """How tasks run, for the worker's first log line."""
        return ""

    def start(self) -> None:
        """Get ready, before the first task."""

    def next_process(self) -> tuple[int, str | None]:
        """The pid (and start mark) of the process that will run the next task."""
        raise NotImplementedError

    def launch(self, job: Job, queue: Queue) -> None:
        """Run a task reserved and started for `next_process()`."""
        raise NotImplementedError

    def wakeup_fds(self) -> list[int]:
        """Descriptors whose data should end the worker's wait."""
        return []

    def collect(self) -> None:
        """Apply what happened to the running tasks since the last turn."""
        for task, event, detail in self.tasks.posted():
            self.apply(task, event, detail)

    def running(self, task: RunningTask) -> None:
        """`task` now runs: count it, and show it."""
        self.tasks.add(task)
        self.worker.set_status("running")

    def recorded(self, job: Job) -> None:
        """The outcome of `job` is stored."""
        task = self.tasks.get(job.task_id)
        if task is not None and task.job is job:
            self.apply(task, Event.RECORDED)

    def recorder(self, default: OutcomeRecorder) -> OutcomeRecorder:
        """How the hooks of the task run here record its outcome: the worker's recorder
        (`default`), or in a task process the one its `TaskProcess` was handed."""
        return default

    def stop_signal(self) -> None:
        """A stop signal arrived (called from the signal handler)."""

    def spare_from_stop(self) -> None:
        """The task's outcome is stored: what is left (its hooks) is not stopped by the
        SIGTERM of a cancel (a task process only; its SIGKILL still ends it)."""

    def terminate(self) -> bool:
        """The worker stops: apply `on_terminate`; True if tasks were left running."""
        return False

    def close(self) -> None:
        """Release what `start` took."""

    # -- the state machine's actions --------------------------------------------------------
    def apply(self, task: RunningTask, event: Event, detail: Any = None) -> None:
        """Move `task` by `event` and do what the new state asks."""
        old = task.state
        new = task.move(event)
        if new is TaskState.LOST:
            self.worker.log(self.worker.job_lost_message(task.job, task.queue, detail or ""),
                            logging.ERROR)
            if task.origin is Origin.FORKED:
                signal_group(task.pid, signal.SIGKILL)
        elif new is TaskState.TIMED_OUT:  # over its run time or a bound: its whole group
            signal_group(task.pid, signal.SIGKILL)
        elif new is TaskState.RECORDED and old is TaskState.RELEASING:
            task.kill_at = None  # put back by itself: its hooks run to their end
        elif new is TaskState.RELEASING:
            self.worker.log(f"[{task.queue_name}|{task.task_id}] asked to save its place and "
                            "return Release: the worker stops")
            task.release_asked = time.monotonic()
            task.kill_at = task.release_asked + self.worker.release_timeout
            self.tell_stop(task)
        elif new is TaskState.INTERRUPTED and task.origin is not Origin.IN_PROCESS:
            signal_group(task.pid, signal.SIGTERM)
        elif new is TaskState.CANCELING:
            self.worker.log(self.worker.job_cancel_asked_message(task.job, task.queue),
                            logging.WARNING)
            task.job.note_cancel_requested()
            if task.origin is not Origin.IN_PROCESS:  # in-process: it stops by itself
                task.kill_at = time.monotonic() + self.worker.cancel_grace
                signal_group(task.pid, signal.SIGTERM)
        elif new is TaskState.ENDED:
            self.tasks.remove(task)
            self.forget(task)
            self.ended(task, old, detail)

    def forget(self, task: RunningTask) -> None:
        """`task`'s process is gone: drop what the runner kept to talk to it."""

    def tell_stop(self, task: RunningTask) -> None:
        """Tell the task that its worker stops and hands it over (`Job.stop_requested`)."""

    def bounded(self, job: Job) -> Any:
        """The context the task's code runs in, holding it to its bounds."""
        return nullcontext()

    def ended(self, task: RunningTask, old: TaskState, status: int | None) -> None:
        """A task's process is gone: put it back, or apply the rule for an end without
        an outcome (`Worker.process_ended`), as the state it ended in says."""
        try:
            if old is TaskState.INTERRUPTED:
                self.worker.retrying(lambda: self.worker.requeue_interrupted(task))
            elif old is TaskState.RELEASING:
                self.worker.retrying(lambda: self.worker.requeue_released(task))
            elif old is TaskState.CANCELING:
                if task.origin is Origin.ADOPTED and self.settled(task):
                    return
                self.worker.retrying(lambda: self.worker.process_canceled(task))
            elif old in (TaskState.RUNNING, TaskState.TIMED_OUT):
                cause = self.cause(task, old, status)
                if task.origin is Origin.ADOPTED and self.settled(task):
                    return  # its process stored its outcome before it ended, as it should
                if cause is None:  # it could not reach Redis (or Redis was full): counted
                    self.worker.retrying(
                        lambda: self.worker.requeue_interrupted(task, uncounted=False))
                else:
                    self.worker.process_ended(task, cause)
        except Exception:  # noqa: BLE001 - its lease ends, and the task is taken back
            self.worker.log(f"[{task.queue_name}|{task.task_id}] could not record the end of "
                            "its process", logging.ERROR, exc_info=True)

    def settled(self, task: RunningTask) -> bool:
        """True when an adopted task's attempt is no longer running: its process (not a
        child of this worker, so it sends no notice) stored its outcome, or another
        attempt holds it."""
        try:
            data = task.job.data()
        except TaskNotFound:
            return True
        if data.attempt == task.attempt and data.status in RUNNING:
            return False
        self.worker.log(f"[{task.queue_name}|{task.task_id}] adopted task ended: now "
                        f"{data.status} (attempt {data.attempt})")
        return True

    @staticmethod
    def cause(task: RunningTask, old: TaskState, status: int | None) -> TaskKilled | None:
        """Why a process ended without an outcome (None: it could not reach Redis)."""
        if task.over_limit is not None:
            return task.over_limit
        if old is TaskState.TIMED_OUT:
            return TimeLimitExceeded(task.max_run_time or 0)
        if status is None:  # not our child: how it ended is unknown
            return TaskKilled("the process running the task ended without recording an "
                              "outcome", "unknown")
        if os.WIFEXITED(status) and os.WEXITSTATUS(status) == EXIT_REDIS_UNAVAILABLE:
            return None
        limit, usage = task.bounds.cpu_limit, task.usage
        if (limit is not None and usage is not None and usage.cpu >= limit
                and os.WIFSIGNALED(status)
                and os.WTERMSIG(status) in (signal.SIGKILL, signal.SIGXCPU)):
            return CpuLimitExceeded(limit, usage.cpu)  # the kernel's kill at its limit
        return describe_exit(status)


class InProcessRunner(TaskRunner):
    """Runs each task in the worker's own process, one at a time."""

    max_concurrency = 1

    def describe(self) -> str:
        return "in-process"

    def next_process(self) -> tuple[int, str | None]:
        return os.getpid(), process_start_time(os.getpid())

    def launch(self, job: Job, queue: Queue) -> None:
        task = RunningTask(job, queue, Origin.IN_PROCESS, pid=os.getpid(),
                           bounds=self.worker.bounds_of(job))
        self.running(task)
        if task.bounds.max_memory or task.bounds.cpu_limit:
            self.worker.log(f"[{task.queue_name}|{task.task_id}] its max_memory and cpu_limit "
                            "do not hold in the worker's own process: run with fork=True",
                            logging.WARNING)
        try:
            self.worker.perform(job, queue)
            self.apply(task, Event.RECORDED)  # its outcome is dealt with, even if skipped
        except WorkerInterrupted:
            self.apply(task, Event.INTERRUPT)
        finally:
            self.apply(task, Event.ENDED)
            self.worker.set_status("waiting")

    def bounded(self, job: Job) -> Any:
        """Its soft time limit and `max_run_time`, raised in the task's code (a timer)."""
        task = self.tasks.get(job.task_id)
        if task is None:
            return nullcontext()
        return in_process_limits(task.bounds.soft_time_limit, task.max_run_time)

    def stop_signal(self) -> None:
        if self.worker.on_terminate == "requeue" and len(self.tasks):
            raise WorkerInterrupted()  # out of the task's code, in this very thread


class ForkedRunner(TaskRunner):
    """Runs each task in a process of its own, in a session of its own.

    One spare process is forked ahead and waits on its line (`processes.Channel`); a task
    is reserved and started for its pid, then handed to it. A task process asks its
    worker to write its outcome, progress and checkpoints (`serve`: the worker writes,
    then answers), and says on the notices pipe when its outcome is stored and when it
    is done, which frees its slot at once. The memory of the task processes is weighed
    here (`weigh`), and what each used is read as it is reaped (`measured`).

    One class, though long: its spare, its lines, its reaping, its bounds and its stopping
    all act on one state, the task processes it forked and has not reaped yet.
    """

    can_detach = True
    can_time_out = True
    can_bound = True

    def __init__(self, worker: TaskHost) -> None:
        super().__init__(worker)
        #: in a task process (this runner's copy in the fork): the part that runs its task
        self.in_task_process: TaskProcess | None = None
        self._spare: Spare | None = None
        #: reservations tried since the last task handed over (more than one: the worker
        #: waited for the task it got)
        self._tries = 0
        self.notices: DoneNotices | None = None
        #: the lines to the running task processes, and the writes they ask for
        self.desk = Desk(worker)
        self.exiting: set[int] = set()  # done with their task, not reaped yet
        self._sigchld: Any = None
        # what a turn of the loop looks at costs nothing per running task unless a child
        # ended (SIGCHLD), a task process spoke, or a deadline may have passed
        self._child_ended = True
        self._next_reap = 0.0
        self._next_look = 0.0
        self._next_weigh = 0.0
        #: whether the memory of processes can be read here (/proc)
        self.can_weigh = can_watch_memory()

    def describe(self) -> str:
        return f"{self.worker.concurrency} forked process(es)"

    def start(self) -> None:
        # a child's end ends a wait, and has the next turn reap
        self._sigchld = signal.signal(signal.SIGCHLD, self._on_sigchld)
        # the objects made so far are never collected again: a task process then does
        # not copy every page of the worker while its garbage collector walks them
        gc.freeze()
        self.notices = DoneNotices()

    def wakeup_fds(self) -> list[int]:
        return [self.notices.read, *self.desk.fds()] if self.notices else []

    # -- the spare -------------------------------------------------------------------------------
    def spare(self) -> Spare:
        """The process forked ahead for the next task (made when missing)."""
        if self._spare is None:
            self._spare = Spare(self.task_process, inherited=self.desk.channels())
        return self._spare

    def next_process(self) -> tuple[int, str | None]:
        self._tries += 1
        spare = self.spare()
        return spare.pid, spare.pstart

    def drop_spare(self) -> None:
        """Let the spare go (it exits when its pipe closes) and collect it."""
        spare, self._spare = self._spare, None
        if spare is not None:
            spare.close()
            try:
                os.waitpid(spare.pid, 0)
            except ChildProcessError:
                pass

    def launch(self, job: Job, queue: Queue) -> None:
        spare, self._spare = self.spare(), None
        task = RunningTask(job, queue, Origin.FORKED, pid=spare.pid, pstart=spare.pstart,
                           bounds=self.worker.bounds_of(job))
        self.running(task)
        if task.bounds.max_memory and not self.can_weigh:
            self.worker.log(f"[{task.queue_name}|{task.task_id}] its max_memory does not hold "
                            "here: the memory of processes cannot be read (no /proc)",
                            logging.WARNING)
        payload = {**task.reservation.to_payload(), "bounds": task.bounds.to_payload(),
                   "queue_terms": dict(self.worker.queue_terms(task.queue_name))}
        if not spare.hand_over(payload):
            # the task never ran: it goes back to the front of its queue
            self.worker.log(f"[{task.queue_name}|{task.task_id}] its process died before the "
                            "task reached it: back in line", logging.WARNING)
            self.exiting.add(spare.pid)
            self.apply(task, Event.INTERRUPT)
            self.apply(task, Event.ENDED)
        else:
            self.desk.open(spare.pid, spare.channel)
        waited, self._tries = self._tries > 1, 0
        if not waited:  # a backlog: the next spare is forked while this task runs
            self.spare()
        # else at the next reservation tried: a fork while a task process starts slows
        # that start (measured: pickup p99 5.5-6.4 against 3.2-3.5 ms), and the worker
        # that waited for this task has time for it once it ends

    def task_process(self, channel: Channel) -> int:
        """The body of a spare: get ready, wait for a task on `channel`, run it (see
        `task_process.run_spare`). In this process, the outcomes the worker's hooks record
        are told to the worker's process by the `TaskProcess` this runner hands them to."""
        def hand_over(side: TaskProcess) -> None:
            self.in_task_process = side

        return run_spare(self.worker, self.notices, channel, hand_over)

    def recorded(self, job: Job) -> None:
        if self.in_task_process is not None:
            self.in_task_process.recorded(job)
        else:
            super().recorded(job)

    def spare_from_stop(self) -> None:
        if self.in_task_process is not None:
            self.in_task_process.spare_from_stop()

    def recorder(self, default: OutcomeRecorder) -> OutcomeRecorder:
        if self.in_task_process is not None:
            return self.in_task_process.outcomes
        return default

    def forget(self, task: RunningTask) -> None:
        if task.pid is not None:
            self.desk.close(task.pid)

    def tell_stop(self, task: RunningTask) -> None:
        if task.pid is not None:  # the task process only: its own children are its own
            try:
                os.kill(task.pid, signal.SIGUSR1)
            except (ProcessLookupError, PermissionError):
                pass

    def bounded(self, job: Job) -> Any:
        if self.in_task_process is not None:
            return holding(self.in_task_process.bounds, job)
        return nullcontext()

    # -- what task processes ask -------------------------------------------------------------
    def serve_requests(self, by_pid: dict[int, RunningTask]) -> None:
        """Write what the task processes asked since the last turn (and the outcomes due
        for another try), and answer each."""
        for task, request in self.desk.heard(by_pid) + self.desk.due(by_pid):
            self.serve(task, request)

    def serve(self, task: RunningTask, request: Payload) -> None:
        """In the worker's process: write what `task`'s process asked, then answer it."""
        reply = self.write(task, request)
        if reply is not None:
            self.answer(task, reply)

    def write(self, task: RunningTask, request: Payload) -> Payload | None:
        """Write what `task`'s process asked, fenced by its attempt (see `relay.Desk`); an
        outcome recorded moves the task on at once (a cancel seen later no longer stops
        its process, whose hooks follow), unless its process was already told to stop
        for its cancel (it says so itself if it lives on; if not, the task is
        `process_canceled`). The answer, or None while the outcome waits for Redis."""
        reply = self.desk.write(task, request)
        if (reply is not None and reply.get("reply") == "recorded"
                and task.state is not TaskState.CANCELING):
            self.apply(task, Event.RECORDED)
        return reply

    def answer(self, task: RunningTask, reply: Payload) -> None:
        """Tell `task`'s process what came of its request."""
        self.desk.answer(task, reply)

    # -- what happened -----------------------------------------------------------------------------
    def _on_sigchld(self, signum: int, frame: Any) -> None:
        self._child_ended = True

    def collect(self) -> None:
        now = time.monotonic()
        reaping = self._child_ended or now >= self._next_reap
        if reaping:  # cleared first: a child ending meanwhile is reaped at the next turn
            self._child_ended, self._next_reap = False, now + REAP_INTERVAL
        self.collect_ended(reaping)
        if now >= self._next_look:
            self._next_look = now + LOOK_INTERVAL
            for task in self.tasks.snapshot():
                if task.origin is Origin.FORKED and task.overdue:
                    self.apply(task, Event.OVERDUE)
                if task.kill_at is not None and now >= task.kill_at:  # canceled or released,
                    task.kill_at = None                                 # past its grace
                    signal_group(task.pid, signal.SIGKILL)
        if now >= self._next_weigh:
            self._next_weigh = now + MEMORY_INTERVAL
            self.weigh()
        if reaping and self._spare is not None and reap([self._spare.pid]):
            self._spare.close()
            self._spare = None  # died while waiting: the next task gets a new one
        super().collect()
        if not len(self.tasks) and self.worker.status == "running":
            self.worker.set_status("waiting")

    def weigh(self) -> None:
        """Stop the tasks whose processes use more memory than their `max_memory`."""
        bounded = {task.pid: task for task in self.tasks.snapshot()
                   if task.origin is Origin.FORKED and task.bounds.max_memory
                   and task.state is TaskState.RUNNING and task.pid is not None}
        if not bounded or not self.can_weigh:
            return
        for pid, size in group_memory(bounded).items():
            task = bounded[pid]
            limit = task.bounds.max_memory
            if limit is not None and size > limit:
                task.over_limit = MemoryLimitExceeded(limit, size)
                self.worker.log(f"[{task.queue_name}|{task.task_id}] {task.over_limit}",
                                logging.ERROR)
                self.apply(task, Event.OVERDUE)

    @staticmethod
    def measured(task: RunningTask, usage: Any) -> None:
        """What a task process that ended used: its peak memory goes with the outcome the
        worker records for it (one it did not record itself), its CPU time tells a kill
        at its `cpu_limit`."""
        task.usage = Usage.of(usage)
        task.job.measured_peak = task.usage.peak_rss

    def collect_ended(self, reaping: bool) -> None:
        """Apply what task processes said on the notices pipe and asked on their lines,
        then the ends of those reaped (when `reaping`)."""
        by_pid = self.forked() if reaping else {}
        # reaped first: every notice an ended process gave is in the pipe by now
        ended = reap(by_pid)
        notices = self.notices.collect() if self.notices else []
        if (notices or self.desk.busy) and not reaping:
            by_pid = self.forked()
        for kind, pid in notices:
            task = by_pid.get(pid)
            if kind == DoneNotices.ASKING:
                self.desk.announced(pid)
            elif task is not None:
                self.apply(task, Event.RECORDED)
                if kind == DoneNotices.DONE:
                    self.exiting.add(pid)
                    self.apply(task, Event.ENDED)
        if self.desk.busy:  # what an ended process asked before it ended is served too
            self.serve_requests(by_pid)
        for pid, status, usage in ended:
            self.exiting.discard(pid)
            self.measured(by_pid[pid], usage)
            self.apply(by_pid[pid], Event.ENDED, status)  # ignored if it said it was done
        if reaping:
            self.reap_exiting()

    def forked(self) -> dict[int, RunningTask]:
        """The running tasks of the processes this runner forked, by pid."""
        return {pid: task for pid, task in self.tasks.by_pid().items()
                if task.origin is Origin.FORKED}

    def reap_exiting(self, wait: bool = False) -> None:
        """Collect the task processes that said they are done and then exited."""
        for pid, _, _ in reap(self.exiting):
            self.exiting.discard(pid)
        if wait:
            for pid in list(self.exiting):
                try:
                    os.waitpid(pid, 0)
                except ChildProcessError:
                    pass
            self.exiting.clear()

    # -- stopping ----------------------------------------------------------------------------------
    def terminate(self) -> bool:
        """Apply `on_terminate` to the running tasks; True if some were left running.

        A worker ending by itself (max_loops, max_duration) waits for its tasks; the
        policy applies to a stop signal (a second signal switches it to "requeue"). With
        "release", each task is told to save its place and return `Release`, and put
        back as it is when it did, or when its process ended (killed once
        `release_timeout` passed).
        """
        self.drop_spare()
        worker = self.worker
        deadline = None
        if worker.end_signal_caught and worker.terminate_timeout is not None:
            deadline = time.monotonic() + worker.terminate_timeout
        if worker.end_signal_caught and worker.on_terminate == "release":
            deadline = None  # each task has its release_timeout
            for task in self.tasks.snapshot():
                self.apply(task, Event.RELEASE)
        while len(self.tasks):
            if worker.end_signal_caught and worker.on_terminate == "detach":
                for task in self.tasks.snapshot():  # a canceled task is not left to run on:
                    if task.state is TaskState.CANCELING:  # the next holder files it canceled
                        signal_group(task.pid, signal.SIGKILL)
                worker.log(f"leaving {len(self.tasks)} task(s) running for the next worker of "
                           "this host")
                return True
            if worker.end_signal_caught and worker.on_terminate == "requeue":
                break
            if deadline is not None and time.monotonic() >= deadline:
                break
            worker.wait(0.2)
            worker.collect()
        self.interrupt_running()
        return False

    def interrupt_running(self, grace: float = INTERRUPT_GRACE) -> None:
        """SIGTERM the task processes, SIGKILL them after `grace` seconds; each goes back
        to the front of its queue as its process ends."""
        for task in self.tasks.snapshot():
            if task.state is TaskState.RELEASING:  # stopped now, put back uncounted still
                signal_group(task.pid, signal.SIGTERM)
            self.apply(task, Event.INTERRUPT)
        deadline = time.monotonic() + grace
        while len(self.tasks) and time.monotonic() < deadline:
            time.sleep(0.05)
            self.worker.collect()
        for task in self.tasks.snapshot():
            signal_group(task.pid, signal.SIGKILL)
        while len(self.tasks):
            time.sleep(0.02)
            self.worker.collect()

    def close(self) -> None:
        self.drop_spare()
        self.desk.close_all()  # tasks left running (detached) write for themselves
        self.reap_exiting(wait=True)
        if self.notices is not None:
            self.notices.close()
            self.notices = None
        if self._sigchld is not None:
            signal.signal(signal.SIGCHLD, self._sigchld)
            self._sigchld = None
