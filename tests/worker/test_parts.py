"""The worker's parts, each alone on a real Redis: the running-task state machine, the
lease keeper, the outcome recorder, the due-task mover, and where each hook runs."""

from __future__ import annotations

import os
import threading
import time

import pytest
from jobs import RecordingJob, events

from limpyd_blueque import Job, Queue, Worker
from limpyd_blueque.protocol.scripts import Lease, Reservation
from limpyd_blueque.worker.heartbeat import LeaseKeeper, Terms
from limpyd_blueque.worker.outcomes import OutcomeRecorder
from limpyd_blueque.worker.recovery import Recovery
from limpyd_blueque.worker.running import (
    TRANSITIONS,
    Event,
    Origin,
    RunningTask,
    RunningTasks,
    TaskState,
)
from limpyd_blueque.worker.scheduling import DueTasks

pytestmark = pytest.mark.timeout(60)
LISTENER = "parts.host_1"


def running_task(queue_name="p", attempt="1", ttr=None, max_run_time=None, origin=Origin.FORKED):
    reservation = Reservation("t1", queue_name, {"attempt": attempt, "node": LISTENER}, ttr,
                              max_run_time)
    return RunningTask(Job.from_reservation(reservation), Queue.named(queue_name), origin)


# -- the state machine ------------------------------------------------------------------------
def test_every_state_but_running_timed_out_canceling_and_releasing_has_only_the_end_ahead(database):
    for state in TaskState:
        allowed = {event for (source, event) in TRANSITIONS if source is state}
        if state is TaskState.RUNNING:
            assert allowed == set(Event)
        elif state is TaskState.TIMED_OUT:
            assert allowed == {Event.RECORDED, Event.ENDED}
        elif state is TaskState.CANCELING:  # it may store its outcome (filed as canceled),
            # or lose its lease, before its process ends
            assert allowed == {Event.RECORDED, Event.LEASE_LOST, Event.ENDED}
        elif state is TaskState.RELEASING:  # it may return Release (recorded), lose its
            # lease, or be canceled, before its process ends
            assert allowed == {Event.RECORDED, Event.LEASE_LOST, Event.CANCEL, Event.ENDED}
        elif state is TaskState.ENDED:
            assert allowed == set()
        else:
            assert allowed == {Event.ENDED}


def test_an_event_that_does_not_apply_leaves_the_state_alone(database):
    task = running_task()
    assert task.move(Event.RECORDED) is TaskState.RECORDED
    assert task.move(Event.LEASE_LOST) is None  # its own outcome moved it on: nothing to stop
    assert task.move(Event.OVERDUE) is None
    assert task.state is TaskState.RECORDED
    assert task.move(Event.ENDED) is TaskState.ENDED
    assert task.move(Event.ENDED) is None


def test_events_posted_from_another_thread_reach_the_task_of_that_attempt_only(database):
    woken = []
    tasks = RunningTasks(wake=lambda: woken.append(1))
    task = running_task()
    tasks.add(task)
    thread = threading.Thread(target=tasks.post, args=(task, Event.LEASE_LOST, "pending"))
    thread.start()
    thread.join()
    stale = running_task(attempt="0")  # same id, an older attempt
    tasks.post(stale, Event.ENDED)
    assert tasks.posted() == [(task, Event.LEASE_LOST, "pending")]
    assert woken == [1, 1]
    assert tasks.posted() == []


def test_only_running_tasks_have_their_lease_renewed(database):
    tasks = RunningTasks()
    task = running_task(ttr=9.0)
    tasks.add(task)
    assert tasks.leases() == [Lease("p", "t1", 1, 9.0)]
    task.move(Event.RECORDED)
    assert tasks.leases() == []


def test_a_task_is_overdue_past_its_max_run_time_only_while_running(database):
    task = running_task(max_run_time=0.05)
    assert not task.overdue
    time.sleep(0.06)
    assert task.overdue
    task.move(Event.OVERDUE)
    assert not task.overdue


# -- the lease keeper ---------------------------------------------------------------------------
@pytest.fixture
def keeper(database):
    queue = Queue.named("p")
    tasks = RunningTasks()
    keeper = LeaseKeeper(LISTENER, [queue], tasks, heartbeat_interval=10, liveness_interval=1,
                         liveness_timeout=30)
    keeper.start()
    yield keeper
    keeper.stop(detached=False)


def test_a_beat_renews_running_leases_and_says_the_worker_is_alive(keeper, conn):
    queue = Queue.named("p")
    queue.enqueue("x")
    job, _ = Queue.reserve_from(["p"], LISTENER, pid=1, ttr=1)
    keeper.tasks.add(RunningTask(job, queue, Origin.FORKED, pid=1))
    before = conn.zscore("blueque:leases:p", job.task_id)
    keeper.beat()  # only says it is alive: the renewal is due in heartbeat_interval
    assert conn.zscore("blueque:leases:p", job.task_id) == before
    keeper.nudge(job.task.ttr)  # a lease of 1 s: renewed within a third of it
    time.sleep(0.35)
    keeper.beat()
    assert conn.zscore("blueque:leases:p", job.task_id) > before
    assert conn.zscore("blueque:workers", LISTENER) == pytest.approx(time.time() + 30, abs=2)
    assert keeper.tasks.posted() == []


def test_a_beat_posts_lease_lost_for_a_task_another_attempt_took(keeper, conn):
    queue = Queue.named("p")
    queue.enqueue("x")
    job, _ = Queue.reserve_from(["p"], LISTENER, pid=1, ttr=30)
    keeper.tasks.add(RunningTask(job, queue, Origin.FORKED, pid=1))
    recovery = Recovery("other.host_2", [queue], keeper.tasks, keeper.scripts_or_fail,
                        job_model=Job, terms=Terms(30, None, 5), clean_interval=0.01)
    assert recovery.recover("p", job.task_id, LISTENER, process_gone=True) == {
        job.task_id: "pending"}
    Queue.reserve_from(["p"], "other.host_2", pid=2)
    keeper.nudge(0.01)  # renewal due within 3 ms
    time.sleep(0.05)
    keeper.beat()
    posted = [(task.task_id, event, status) for task, event, status in keeper.tasks.posted()]
    assert (job.task_id, Event.LEASE_LOST, "started") in posted


def test_stopping_the_keeper_forgets_the_worker_unless_tasks_were_left_running(keeper, conn):
    assert conn.zscore("blueque:workers", LISTENER) is not None
    keeper.stop(detached=True)
    assert conn.zscore("blueque:workers", LISTENER) is not None
    keeper.stop(detached=False)
    assert conn.zscore("blueque:workers", LISTENER) is None


# -- the outcome recorder -------------------------------------------------------------------------
def test_an_outcome_is_recorded_once_and_refused_to_a_superseded_attempt(database, conn):
    queue = Queue.named("p")
    queue.enqueue("x")
    job, _ = Queue.reserve_from(["p"], LISTENER, pid=1)
    recorder = OutcomeRecorder(LISTENER, retry_timeout=1)
    assert recorder.complete(job, "done") is True
    assert recorder.complete(job, "again") is False
    assert job.result.hget() == "done"
    stale = Job.from_reservation(Reservation(job.task_id, "p", {"attempt": "0", "node": LISTENER}))
    assert recorder.fail(stale, "late") is False
    assert job.status.hget() == "complete"


def test_an_adopted_task_is_failed_on_behalf_of_its_dead_holder(database, conn):
    queue = Queue.named("p")
    queue.enqueue("x")
    job, _ = Queue.reserve_from(["p"], "dead.host_7", pid=1)
    recorder = OutcomeRecorder(LISTENER, retry_timeout=1)
    assert recorder.holder(job) == "dead.host_7"
    assert recorder.fail(job, "TaskKilled: gone") is True
    assert job.status.hget() == "failed"


# -- the due-task mover ----------------------------------------------------------------------
def test_due_tasks_move_once_per_interval(database, conn):
    queue = Queue.named("p")
    due = DueTasks([queue], interval=3600)
    queue.schedule("a", time.time() + 0.05)
    time.sleep(0.06)
    assert due.move() == 1
    queue.schedule("b", time.time() + 0.01)
    time.sleep(0.02)
    assert due.move() == 0  # not before an hour
    assert conn.llen("blueque_pending_tasks_p") == 1


# -- where each hook runs ---------------------------------------------------------------------
def test_hooks_run_in_the_task_process_except_on_error_of_a_killed_task(database, conn):
    queue = Queue.named("w")
    ok, failing, killed = (queue.enqueue({"n": 1}), queue.enqueue({"fail": "no"}),
                           queue.enqueue({"kill": True}))
    Worker("w", job_model=RecordingJob, max_loops=3, timeout=0.2).run()
    worker_pid = os.getpid()

    def pids(job):
        return {e["event"]: e["pid"] for e in events(conn, job.pk.get())}

    ran = pids(ok)
    assert ran["on_started"] == ran["run"] == ran["on_success"] != worker_pid
    failed = pids(failing)
    assert failed["on_started"] == failed["run"] == failed["on_error"] != worker_pid
    crashed = pids(killed)
    assert crashed["on_started"] == crashed["run"] != worker_pid
    assert crashed["on_error"] == worker_pid  # its process is gone: the worker's runs it


def test_a_task_run_in_process_speaks_for_itself_for_a_whole_lease(keeper, conn):
    """A long call holding the GIL can keep an in-process worker from beating: its task is
    marked alive for its lease, so that other machines do not take it back meanwhile."""
    queue = Queue.named("p")
    queue.enqueue("x")
    job, _ = Queue.reserve_from(["p"], LISTENER, pid=os.getpid(), ttr=300)
    keeper.tasks.add(RunningTask(job, queue, Origin.IN_PROCESS, pid=os.getpid()))
    keeper.nudge(0.01)
    time.sleep(0.05)
    keeper.beat()
    alive_until = float(conn.hget(f"blueque_task_{job.task_id}", "alive_until"))
    assert alive_until == pytest.approx(time.time() + 300, abs=5)


def test_a_worker_taken_for_dead_knows_it_at_its_next_beat(keeper, conn):
    keeper.beat()
    assert not keeper.revived
    conn.zrem("blueque:workers", LISTENER)  # another worker took it for dead, and forgot it
    keeper.beat()
    assert keeper.revived
