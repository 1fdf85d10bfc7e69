"""What a worker's beat costs Redis: the same for one running task as for hundreds, and
every lease it no longer holds still found lost (lua/renew.lua)."""

from __future__ import annotations

import os
import time

import pytest

from limpyd_blueque import Job, Queue
from limpyd_blueque.protocol.scripts import Lease, Reservation
from limpyd_blueque.worker.running import Origin, RunningTask, RunningTasks
from limpyd_blueque.worker.watch import READS_PER_STALL_TIMEOUT, TaskWatch

pytestmark = pytest.mark.timeout(60)
LISTENER = "beats.host_1"


def held(queue, count, ttr=60.0):
    """`count` tasks enqueued and started for this process, and their leases."""
    return [lease for lease, _ in held_jobs(queue, count, ttr)]


def held_jobs(queue, count, ttr=60.0):
    """`count` tasks enqueued and started for this process: (lease, job) of each."""
    queue.enqueue_many([{"i": i} for i in range(count)])
    found = []
    for _ in range(count):
        job = queue.reserve(LISTENER, pid=os.getpid(), ttr=ttr)
        found.append((Lease(queue.pk.get(), job.task_id, job.task.attempt, ttr, job.task.lease),
                      job))
    return found


def commands_of(conn, call):
    """The commands Redis ran for `call()`, those run by its scripts included."""
    conn.config_resetstat()
    result = call()
    stats = conn.info("commandstats")
    ran = sum(entry["calls"] for name, entry in stats.items()
              if name not in ("cmdstat_info", "cmdstat_config"))
    return ran, result


def renew(leases, canceling=()):
    return Queue.scripts().upkeep.renew(leases, canceling=canceling)


def rewritten(leases, renewal):
    return [lease._replace(written=renewal.renewed[lease.task_id]) for lease in leases]


def test_a_beat_costs_the_same_commands_for_one_task_as_for_two_hundred(database, conn):
    one = held(Queue.named("one"), 1)
    many = held(Queue.named("many"), 200)
    # the first renewal knows each deadline from its reservation, each its own: one read
    # per lease, once; from then on the leases renewed together share one deadline
    first_one, renewal_one = commands_of(conn, lambda: renew(one, ["one"]))
    first_many, renewal_many = commands_of(conn, lambda: renew(many, ["many"]))
    assert first_many == first_one + 199
    assert not renewal_one.lost and not renewal_many.lost
    again_one, _ = commands_of(conn, lambda: renew(rewritten(one, renewal_one), ["one"]))
    again_many, renewal = commands_of(conn, lambda: renew(rewritten(many, renewal_many), ["many"]))
    assert again_one == again_many == first_one
    assert len(renewal.renewed) == 200


def test_a_renewal_extends_every_lease_it_holds(database, conn):
    queue = Queue.named("q")
    leases = held(queue, 3, ttr=30.0)
    before = {lease.task_id: conn.zscore(queue.keys().leases("q"), lease.task_id)
              for lease in leases}
    time.sleep(0.05)
    renewal = renew(leases)
    for lease in leases:
        after = conn.zscore(queue.keys().leases("q"), lease.task_id)
        assert after > before[lease.task_id]
        assert float(renewal.renewed[lease.task_id]) == after


def test_a_lease_another_attempt_took_is_lost_though_its_deadline_was_known(database, conn):
    queue = Queue.named("q")
    (lease,) = held(queue, 1, ttr=30.0)
    # taken back (its holder judged dead), then reserved again by another worker
    Queue.scripts().upkeep.recover([("q", lease.task_id, lease.attempt, LISTENER)],
                                   time.time(), expired_only=False, max_attempts=None,
                                   why="test", process_gone=True)
    other = queue.reserve("beats.host_2", pid=os.getpid(), ttr=30.0)
    assert other.task_id == lease.task_id
    renewal = renew([lease])
    assert renewal.lost == {lease.task_id: "started"}
    assert conn.zscore(queue.keys().leases("q"), lease.task_id) == pytest.approx(
        float(other.task.lease))


def test_a_finished_task_s_lease_is_lost_and_not_written_again(database, conn):
    queue = Queue.named("q")
    ((lease, job),) = held_jobs(queue, 1)
    job.complete("done")
    renewal = renew([lease])
    assert renewal.lost == {lease.task_id: "complete"}
    assert conn.zscore(queue.keys().leases("q"), lease.task_id) is None


def test_a_touched_lease_is_never_shortened(database, conn):
    queue = Queue.named("q")
    (lease,) = held(queue, 1, ttr=30.0)
    far = time.time() + 3600
    conn.zadd(queue.keys().leases("q"), {lease.task_id: far})  # as a `touch` would
    renewal = renew([lease])
    assert not renewal.lost
    assert conn.zscore(queue.keys().leases("q"), lease.task_id) == pytest.approx(far)
    assert float(renewal.renewed[lease.task_id]) == pytest.approx(far)


def test_an_endless_lease_is_checked_against_its_task_at_each_renewal(database, conn):
    queue = Queue.named("q")
    queue.enqueue("x")
    job = queue.reserve(LISTENER, pid=os.getpid(), ttr=0)
    assert job.task.lease == "+inf"
    lease = Lease("q", job.task_id, job.task.attempt, None, job.task.lease)
    assert not renew([lease]).lost
    conn.hset(f"blueque_task_{job.task_id}", "attempt", job.task.attempt + 1)  # a newer holder
    assert renew([lease]).lost == {job.task_id: "started"}


def test_a_cancel_asked_reaches_the_beat_and_leaves_the_set_once_settled(database, conn):
    queue = Queue.named("q")
    found = held_jobs(queue, 3)
    leases = [lease for lease, _ in found]
    lease, job = found[1]
    assert job.cancel() is True  # running: asked (its holder stops it)
    key = queue.keys().canceling("q")
    assert conn.smembers(key) == {lease.task_id}
    assert renew(leases, ["q"]).canceling == {lease.task_id}
    assert renew([], ["q"]).canceling == {lease.task_id}  # read whatever is renewed
    assert renew([], []).canceling == frozenset()  # a task process's own beat reads none
    job.complete("done")  # whatever its holder records, it is filed canceled
    assert job.status.hget() == "canceled"
    assert renew(leases, ["q"]).canceling == frozenset()
    assert conn.smembers(key) == set()  # the settled task's entry went at that beat


def test_stray_entries_of_the_cancel_set_are_dropped_and_a_big_set_is_read_in_part(
        database, conn):
    queue = Queue.named("q")
    (lease,) = held(queue, 1)
    key = queue.keys().canceling("q")
    conn.sadd(key, lease.task_id, *(f"gone-{i}" for i in range(1200)))  # no cancel asked
    first = renew([lease], ["q"])
    assert first.canceling == frozenset()
    assert 0 < conn.scard(key) <= 1201 - 500  # at most 500 read (and dropped) a beat
    while conn.scard(key):
        renew([lease], ["q"])
    conn.set(key, "not a set")  # another client's value: the beat goes on without it
    assert not renew([lease], ["q"]).lost


def test_only_tasks_with_a_stall_timeout_have_their_progress_read_and_not_at_every_beat(
        database):
    queue = Queue.named("q")

    class Hooks:
        stall_timeout = None

    def task(task_id, stall):
        reservation = Reservation(task_id, "q", {"attempt": "1"}, 60.0, None, None, stall)
        return RunningTask(Job.from_reservation(reservation), queue, Origin.FORKED)

    watch = TaskWatch(RunningTasks(), Hooks(), lambda: None)
    quiet, watched = task("quiet", None), task("watched", 50.0)
    now = 1000.0
    assert watch.to_read([quiet, watched], now) == ["watched"]
    assert watch.to_read([quiet, watched], now + 1) == []
    later = now + 50.0 / READS_PER_STALL_TIMEOUT
    assert watch.to_read([quiet, watched], later) == ["watched"]
    Hooks.stall_timeout = 20.0  # the worker's own setting covers the others
    assert watch.to_read([quiet, watched], later) == ["quiet"]


def test_a_lease_its_process_speaks_for_is_checked_against_its_task(database, conn):
    queue = Queue.named("q")
    (lease,) = held(queue, 1)
    conn.delete(f"blueque_task_{lease.task_id}")  # gone (another client, an eviction)
    renewal = Queue.scripts().upkeep.renew([lease], alive_for={lease.task_id: 30.0})
    assert renewal.lost == {lease.task_id: ""}
    assert not conn.exists(f"blueque_task_{lease.task_id}")  # no hash made of its mark


def test_dropping_a_queue_drops_its_cancel_requests(database, conn):
    queue = Queue.named("q")
    key = queue.keys().canceling("q")
    conn.sadd(key, "a-settled-task")  # an entry no beat pruned yet
    queue.drop()
    assert not conn.exists(key)
