"""Tarantool's queue operations on a real Redis: ttl, release, bury and kick, touch, peek,
delete, truncate, drop, statistics; fenced where a holder acts."""

from __future__ import annotations

import time

import pytest
from helpers import LISTENER, OTHER
from helpers import take as reserve

from limpyd_blueque import InvalidTransition, Job, Queue, TaskNotFound
from limpyd_blueque.exceptions import ConfigurationError, QueueBusy
from limpyd_blueque.protocol.scripts import Lease

QUEUE_NAME = "tt"


@pytest.fixture
def queue(database):
    return Queue.named("tt")


def take(listener=LISTENER, **options):
    return reserve(QUEUE_NAME, listener, **options)


# -- ttl --------------------------------------------------------------------------------------
def test_a_task_not_started_within_its_ttl_expires_and_is_never_run(queue, conn):
    job = queue.enqueue("x", ttl=0.2, identifier="once", priority=2)
    time.sleep(0.3)
    assert queue.expire_due() == [job.task_id]
    assert job.status.hget() == "expired"
    assert conn.zcard("blueque:prioritized:tt") == 0
    assert conn.lrange("blueque:expired:tt", 0, -1) == [job.task_id]
    assert conn.hlen("blueque:identifiers:tt") == 0 and conn.zcard("blueque:expiry:tt") == 0
    assert take() is None
    assert [j.task_id for j in Job.collection(queue="tt", status="expired").instances()] == [
        job.task_id]
    job.delete()
    assert not conn.exists(job.key)


def test_reserve_expires_a_task_past_its_ttl_instead_of_running_it(queue):
    late = queue.enqueue("late", ttl=0.1)
    fresh = queue.enqueue("fresh")
    time.sleep(0.2)
    passed = []
    job, _ = Queue.reserve_from(["tt"], LISTENER, report=passed.append)
    assert job.task_id == fresh.task_id
    assert passed[0].expired == [late.task_id]
    assert late.status.hget() == "expired"


def test_the_queue_ttl_applies_and_a_delay_adds_to_it(queue, conn):
    queue.configure(ttl=50)
    now = time.time()
    plain = queue.enqueue("x")
    delayed = queue.enqueue("y", delay=100)
    own = queue.enqueue("z", ttl=5)
    assert float(plain.expires_at.hget()) == pytest.approx(now + 50, abs=2)
    assert float(delayed.expires_at.hget()) == pytest.approx(now + 150, abs=2)
    assert float(own.expires_at.hget()) == pytest.approx(now + 5, abs=2)
    assert queue.settings()["ttl"] == 50


def test_a_started_task_never_expires(queue, conn):
    job = queue.enqueue("x", ttl=0.1)
    taken = take(pid=99)
    time.sleep(0.2)
    assert queue.expire_due() == []
    assert conn.zcard("blueque:expiry:tt") == 0
    assert taken.complete("ok") and job.status.hget() == "complete"


def test_a_bad_ttl_is_refused_before_anything_is_written(queue, conn):
    for bad in (-1, 0, float("nan"), "soon"):
        with pytest.raises(ConfigurationError, match="ttl"):
            queue.enqueue("x", ttl=bad)
    assert conn.dbsize() == 0


# -- release, bury, kick, touch ------------------------------------------------------------
def test_release_gives_the_task_back_uncounted_at_the_front(queue, conn):
    first = queue.enqueue("a")
    queue.enqueue("b")
    job = take()
    assert job.release() is True
    assert first.status.hget() == "pending" and first.uncounted.hget() == "1"
    assert take(OTHER).task_id == first.task_id  # the front of the line
    assert job.release() is False  # no longer held by that attempt


def test_release_with_a_delay_schedules_it(queue, conn):
    queue.enqueue("a")
    job = take()
    assert job.release(delay=60) is True
    assert job.status.hget() == "scheduled"
    assert conn.zscore("blueque_scheduled_tasks_tt", job.task_id) > time.time() + 50


def test_only_the_current_attempt_may_release_bury_or_touch(queue, conn):
    queue.enqueue("a", max_attempts=5)
    stale = take()
    conn.zadd("blueque:leases:tt", {stale.task_id: 0})  # its lease ran out
    Queue.scripts().upkeep.recover([("tt", stale.task_id, None, None)], time.time(),
                                   expired_only=True, max_attempts=None, why="test")
    current = take(OTHER)
    before = conn.hgetall(current.key)
    assert stale.release(listener_id=LISTENER, attempt=1) is False
    assert stale.bury(listener_id=LISTENER, attempt=1) is False
    assert stale.touch(30, listener_id=LISTENER, attempt=1) is False
    assert current.touch(30, listener_id=OTHER, attempt=1) is False  # superseded attempt
    assert conn.hgetall(current.key) == before


def test_bury_puts_a_task_aside_and_kick_returns_the_oldest_first(queue, conn):
    ids = [queue.enqueue(str(n)).task_id for n in range(3)]
    for _ in ids:
        assert take().bury("poison") is True
    assert Job.load(ids[0]).status.hget() == "buried"
    assert Job.load(ids[0]).error.hget() == "poison"
    assert conn.lrange("blueque:buried:tt", 0, -1) == ids[::-1]
    assert conn.zcard("blueque:leases:tt") == 0
    assert queue.kick(2) == 2
    assert [take().task_id, take().task_id] == ids[:2]
    assert queue.kick(10) == 1 and queue.kick() == 0


def test_touch_extends_the_lease_and_the_heartbeat_does_not_shorten_it(queue, conn):
    queue.enqueue("a")
    job = take(ttr=30)
    before = conn.zscore("blueque:leases:tt", job.task_id)
    assert job.touch(600) is True
    after = conn.zscore("blueque:leases:tt", job.task_id)
    assert after == pytest.approx(before + 600, abs=1)
    Queue.scripts().upkeep.renew([Lease("tt", job.task_id, job.task.attempt, 30)])
    assert conn.zscore("blueque:leases:tt", job.task_id) == pytest.approx(after, abs=0.01)
    with pytest.raises(ConfigurationError):
        job.touch(-5)


# -- peek, delete, truncate, drop ------------------------------------------------------------
def test_peek_reads_without_changing(queue, conn):
    job = queue.enqueue({"n": 1})
    before = conn.hgetall(job.key)
    assert queue.peek(job.task_id).parameters == '{"n":1}'
    assert conn.hgetall(job.key) == before
    with pytest.raises(TaskNotFound):
        Queue.named("other").peek(job.task_id)


@pytest.mark.parametrize("state", ["pending", "scheduled", "buried", "canceled", "failed"])
def test_delete_takes_a_task_out_of_every_structure_in_any_state_but_running(
        queue, conn, state):
    job = queue.enqueue("x", delay=60 if state == "scheduled" else None)
    if state in ("buried", "failed"):
        held = take()
        held.bury() if state == "buried" else held.fail("boom")
    elif state == "canceled":
        job.cancel()
    job.delete()
    assert not conn.exists(job.key)
    # left: the queue index and its counters (calls, and the minute's finished tasks)
    assert {key for key in conn.keys("*") if not key.startswith("blueque:stats:tt:m:")} <= {
        "blueque_queues", "blueque:stats:tt"}


def test_truncate_deletes_the_waiting_tasks_only(queue, conn):
    for n in range(2500):
        queue.enqueue(str(n), priority=n % 3, delay=60 if n % 5 == 0 else None)
    running = take()
    assert queue.truncate() == 2499
    assert running.status.hget() == "reserved"
    assert queue.counts()["pending"] == 0 and queue.counts()["scheduled"] == 0


def test_drop_is_refused_while_tasks_run_or_listeners_listen_then_deletes_everything(
        queue, conn):
    for n in range(5):
        queue.enqueue(str(n))
    held = take()
    with pytest.raises(QueueBusy):
        queue.drop()
    held.complete("ok")
    queue.add_listener(LISTENER)
    with pytest.raises(QueueBusy):
        queue.drop()
    queue.remove_listener(LISTENER)
    queue.configure(ttr=30)
    assert queue.drop() == 5
    assert conn.keys("*") == []
    with pytest.raises(TaskNotFound):
        Job.load(held.task_id)


def test_a_running_task_cannot_be_deleted(queue):
    queue.enqueue("x")
    job = take()
    with pytest.raises(InvalidTransition, match="running task"):
        job.delete()


# -- statistics ------------------------------------------------------------------------------
def test_statistics_count_tasks_by_status_and_calls(queue):
    for n in range(6):
        queue.enqueue(str(n))
    queue.enqueue("later", delay=60)
    take().complete("ok")
    take().fail("no")
    take().bury()
    take(pid=5)
    released = take()
    released.release()
    stats = queue.statistics()
    tasks, calls = stats["tasks"], stats["calls"]
    assert tasks["pending"] == tasks["ready"] == 2
    assert tasks["scheduled"] == tasks["delayed"] == 1
    assert tasks["taken"] == 1 and tasks["started"] == 1 and tasks["reserved"] == 0
    assert tasks["complete"] == tasks["done"] == 1
    assert tasks["failed"] == 1 and tasks["buried"] == 1
    assert tasks["total"] == 7
    assert calls["put"] == 7 and calls["take"] == 5 and calls["ack"] == 1
    assert calls["fail"] == 1 and calls["bury"] == 1 and calls["release"] == 1
    assert set(Queue.statistics_all()) == {"tt"}


# -- the blueque command ---------------------------------------------------------------------
def blueque(redis_url, *args, stdin=None):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "limpyd_blueque.admin",
                           f"--redis-url={redis_url}", *args], capture_output=True, text=True,
                          timeout=60, stdin=stdin)


def test_the_blueque_command_runs_each_operation(redis_url, queue, conn):
    import json
    import subprocess

    for n in range(3):
        queue.enqueue(str(n))
    take().bury()
    result = blueque(redis_url, "statistics", "tt", "--json")
    assert result.returncode == 0, result.stderr
    stats = json.loads(result.stdout)["tt"]
    assert stats["tasks"]["buried"] == 1 and stats["tasks"]["pending"] == 2
    assert stats["calls"]["bury"] == 1
    assert "tt: " in blueque(redis_url, "statistics").stdout
    assert blueque(redis_url, "kick", "tt", "--count", "5").stdout.strip() == "kicked: 1"
    some = conn.lrange("blueque_pending_tasks_tt", 0, 0)[0]
    peeked = json.loads(blueque(redis_url, "peek", some, "--json").stdout)
    assert peeked["status"] == "pending" and peeked["queue"] == "tt"
    assert "status: pending" in blueque(redis_url, "peek", some).stdout
    assert blueque(redis_url, "delete", some).returncode == 0
    assert not conn.exists(f"blueque_task_{some}")
    refused = blueque(redis_url, "truncate", "tt", stdin=subprocess.DEVNULL)
    assert refused.returncode == 2 and "--yes" in refused.stderr
    assert blueque(redis_url, "truncate", "tt", "--yes").stdout.strip() == "deleted: 2"
    queue.add_listener(LISTENER)
    busy = blueque(redis_url, "drop", "tt", "--yes")
    assert busy.returncode == 1 and "listeners or running tasks" in busy.stderr
    assert "Traceback" not in busy.stderr
    queue.remove_listener(LISTENER)
    assert blueque(redis_url, "drop", "tt", "--yes").returncode == 0
    missing = blueque(redis_url, "peek", "no-such-task")
    assert missing.returncode == 1 and "no task with id" in missing.stderr


def test_racing_holders_and_kickers_each_get_exactly_one_outcome(queue, conn):
    import threading

    for n in range(40):
        queue.enqueue(str(n))
    jobs = [take() for _ in range(40)]
    results: list[bool] = []

    def bury_or_release(job, how):
        results.append(job.bury() if how else job.release())

    threads = [threading.Thread(target=bury_or_release, args=(job, how))
               for job in jobs for how in (True, False)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results.count(True) == 40  # per task, the bury or the release: never both
    statistics = queue.statistics()["tasks"]
    assert statistics["buried"] + statistics["pending"] == 40
    kicked: list[int] = []
    kickers = [threading.Thread(target=lambda: kicked.append(queue.kick(40)))
               for _ in range(4)]
    for thread in kickers:
        thread.start()
    for thread in kickers:
        thread.join()
    assert sum(kicked) == statistics["buried"]
    assert queue.statistics()["tasks"]["pending"] == 40


def test_a_stale_instance_never_acts_on_a_later_attempt(queue, conn):
    queue.enqueue("x", max_attempts=5)
    stale = take()
    stale.release()
    current = take()  # the same listener, a later attempt
    assert stale.bury() is False and stale.touch(60) is False and stale.release() is False
    assert current.bury() is True


def test_queue_delete_deletes_one_task_and_never_the_queue_keys(queue, conn):
    job = queue.enqueue("x")
    other = queue.enqueue("y")
    with pytest.raises(ConfigurationError, match="drop"):
        queue.delete()
    queue.delete(job.task_id)
    assert not conn.exists(job.key)
    assert conn.lrange("blueque_pending_tasks_tt", 0, -1) == [other.task_id]
    with pytest.raises(TaskNotFound):
        Queue.named("elsewhere").delete(other.task_id)


def test_a_task_that_releases_or_buries_itself_is_not_completed_nor_skipped(queue, conn):
    from limpyd_blueque import Worker

    def callback(job, queue):
        (job.bury if job.parameters.hget() == "bury" else job.release)(None)
        return "ignored"

    buried = queue.enqueue("bury")
    released = queue.enqueue("release")
    logs = []
    worker = Worker("tt", callback=callback, fork=False, max_loops=2, timeout=0.2)
    worker.log = lambda message, *args, **kwargs: logs.append(message)
    worker.run()
    assert buried.status.hget() == "buried"
    assert released.status.hget() == "pending" and released.result.hget() is None
    assert any("buried by its own code" in line for line in logs)
    assert not any("skipped" in line for line in logs)


def test_a_structure_of_another_type_is_set_aside_and_its_queue_goes_on(database, conn):
    from limpyd_blueque import Error
    from limpyd_blueque.exceptions import MisfitKeySetAside

    queue = Queue.named("aside")
    job = queue.enqueue("x")
    conn.delete("blueque:leases:aside")
    conn.set("blueque:leases:aside", "not a sorted set")
    passed = []
    assert Queue.reserve_from(["aside"], "host_1", pid=1, report=passed.append) == (None, None)
    assert passed[0].broken == {"aside": "blueque:leases:aside holds a string"}
    key, kind = passed[0].misfits["aside"]
    assert (key, kind) == ("blueque:leases:aside", "zset")
    with pytest.raises(ConfigurationError):
        queue.set_aside("blueque_task_" + job.task_id, "hash", "host_1")  # not a structure
    found, aside = queue.set_aside(key, kind, "host_1")
    assert found == "string" and aside.startswith("blueque:leases:aside:set_aside:")
    assert conn.get(aside) == "not a sorted set" and not conn.exists(key)
    assert queue.set_aside(key, kind, "host_1") is None  # nothing left to move
    taken, _ = Queue.reserve_from(["aside"], "host_1", pid=1)
    assert taken.task_id == job.task_id  # the queue goes on
    error = Error.add_queue_error("aside", MisfitKeySetAside(key, found, kind, aside))
    assert error.job_pk.hget() == "" and error.type.hget() == "MisfitKeySetAside"
    assert Error.collection(queue_name="aside", type="MisfitKeySetAside").instances()
