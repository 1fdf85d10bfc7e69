"""Tasks that wait for other tasks (`after`, `on_parent_failure`) on a real Redis: the
status `waiting` and its keys, the release once every parent finished (with the task's
own options applied then), each failure policy, parents finished already or missing,
cascades, cancel, repair after a producer died half way, and results passed on."""

from __future__ import annotations

import time

import pytest
from helpers import LISTENER, take

from limpyd_blueque import ConfigurationError, Job, Queue, aio
from limpyd_blueque.models import dependencies
from limpyd_blueque.protocol.keys import keyspace

pytestmark = pytest.mark.timeout(60)
K = keyspace()


def run(queue_name, result="done", fail=False):
    """Take the next task of `queue_name` and finish it; its job."""
    job = take(queue_name)
    assert job is not None, f"no task to take in {queue_name}"
    if fail:
        assert job.fail(result, listener_id=LISTENER)
    else:
        assert job.complete(result, listener_id=LISTENER)
    return job


def test_a_task_waits_with_status_waiting_in_no_line_until_its_parents_finished(conn):
    queue = Queue.named("deps")
    first, second = queue.enqueue("a"), queue.enqueue("b")
    child = queue.enqueue("c", after=[first, second.task_id])
    assert child.status.hget() == "waiting"
    assert conn.zscore(K.waiting("deps"), child.task_id) is not None
    assert conn.smembers(K.after("deps", child.task_id)) == {first.task_id, second.task_id}
    assert conn.lrange(K.pending("deps"), 0, -1) == [second.task_id, first.task_id]
    assert conn.smembers(K.children("deps", first.task_id)) == {f"deps {child.task_id}"}
    assert first.raw_field("follow") == K.ended("deps")
    run("deps")
    assert child.status.hget() == "waiting"
    assert conn.smembers(K.after("deps", child.task_id)) == {second.task_id}
    run("deps")
    assert child.status.hget() == "pending"
    assert conn.zscore(K.waiting("deps"), child.task_id) is None
    assert not conn.exists(K.after("deps", child.task_id))
    assert conn.llen(K.ended("deps")) == 0  # followed at once, by the finishing call
    assert take("deps").task_id == child.task_id


def test_a_plain_task_pays_nothing_for_dependencies(conn):
    job = Queue.named("plain").enqueue("x")
    run("plain")
    assert job.raw_field("follow") is None
    assert not conn.exists(K.ended("plain"))


def test_the_options_of_a_waiting_task_apply_when_it_is_released(conn):
    queue = Queue.named("opts")
    parent = queue.enqueue("p")
    child = queue.enqueue("c", after=[parent], priority=5, ttl=100, group="g1")
    later = queue.enqueue("l", after=[parent], delay=3600)
    assert child.status.hget() == "waiting" and not child.raw_field("expires_at")
    run("opts")
    assert child.status.hget() == "pending"
    assert child.priority.hget() == "5" and child.group.hget() == "g1"
    assert float(child.raw_field("expires_at")) == pytest.approx(time.time() + 100, abs=5)
    assert later.status.hget() == "scheduled"
    assert conn.zscore(K.scheduled("opts"), later.task_id) > time.time() + 3000
    assert take("opts").task_id == child.task_id


def test_a_parent_in_another_queue_releases_its_child(conn):
    parent = Queue.named("upstream").enqueue("p")
    child = Queue.named("downstream").enqueue("c", after=[parent])
    assert conn.smembers(K.children("upstream", parent.task_id)) == {
        f"downstream {child.task_id}"}
    run("upstream")
    assert child.status.hget() == "pending"


@pytest.mark.parametrize("policy, status", [
    (None, "canceled"), ("cancel", "canceled"), ("fail", "failed"), ("run", "pending")])
def test_a_parent_failing_for_good_applies_the_policy(conn, policy, status):
    queue = Queue.named("pol")
    parent = queue.enqueue("p")
    options = {} if policy is None else {"on_parent_failure": policy}
    child = queue.enqueue("c", after=[parent], **options)
    run("pol", "boom", fail=True)
    assert child.status.hget() == status
    if status == "failed":
        assert parent.task_id in child.error.hget()
        assert child.task_id in conn.lrange(K.failed("pol"), 0, -1)
    if status == "canceled":
        assert child.task_id in conn.lrange(K.canceled("pol"), 0, -1)
    assert conn.zscore(K.waiting("pol"), child.task_id) is None


def test_a_canceled_parent_cascades_through_a_chain(conn):
    queue = Queue.named("chain")
    first = queue.enqueue("1")
    second = queue.enqueue("2", after=[first])
    third = Queue.named("chain2").enqueue("3", after=[second])
    assert first.cancel()
    assert second.status.hget() == "canceled"
    assert third.status.hget() == "canceled"


def test_a_parent_finished_already_counts_and_a_missing_one_is_refused(conn):
    queue = Queue.named("done")
    parent = queue.enqueue("p")
    run("done")
    child = queue.enqueue("c", after=[parent])
    assert child.status.hget() == "pending"
    run("done")
    failed = queue.enqueue("f")
    run("done", "no", fail=True)
    orphan = queue.enqueue("o", after=[failed])
    assert orphan.status.hget() == "canceled"
    before = conn.dbsize()
    with pytest.raises(ConfigurationError, match="no task 'nope'"):
        queue.enqueue("x", after=[parent, "nope"])
    with pytest.raises(ConfigurationError, match="on_parent_failure"):
        queue.enqueue("x", after=[parent], on_parent_failure="ignore")
    with pytest.raises(ConfigurationError, match="identifier"):
        queue.enqueue("x", after=[parent], identifier="same")
    assert conn.dbsize() == before


def test_enqueue_many_takes_after_per_task(conn):
    queue = Queue.named("many")
    parent = queue.enqueue("p")
    jobs = queue.enqueue_many(["a", "b"], options=[{"after": [parent]}, {}])
    assert [job.status.hget() for job in jobs] == ["waiting", "pending"]


def test_a_waiting_task_is_canceled_out_of_its_waiting_set(conn):
    queue = Queue.named("wc")
    parent = queue.enqueue("p")
    child = queue.enqueue("c", after=[parent])
    assert child.cancel()
    assert child.status.hget() == "canceled"
    assert conn.zscore(K.waiting("wc"), child.task_id) is None
    assert not conn.exists(K.after("wc", child.task_id))
    run("wc")  # the parent's end finds it canceled: nothing changes
    assert child.status.hget() == "canceled"


def test_parent_results_gives_the_results_of_the_completed_parents(conn):
    queue = Queue.named("res")
    first, second = queue.enqueue("1"), queue.enqueue("2")
    child = queue.enqueue("c", after=[first, second], on_parent_failure="run")
    run("res", "one")
    run("res", "two", fail=True)
    job = take("res")
    assert job.task_id == child.task_id
    assert Job.load(child.task_id).parent_results() == {first.task_id: "one"}


def test_an_end_left_unfollowed_is_followed_by_the_next_follow_up(conn):
    queue = Queue.named("left")
    parent = queue.enqueue("p")
    child = queue.enqueue("c", after=[parent])
    job = take("left")
    # the finishing call's follow-up never ran (its process died right after the step)
    job.follow_up = lambda queue: None
    assert job.complete("x", listener_id=LISTENER)
    assert child.status.hget() == "waiting"
    assert conn.lrange(K.ended("left"), 0, -1) == [parent.task_id]
    assert dependencies.follow_up(Job.scripts(), ["left"]) == 1
    assert child.status.hget() == "pending"
    assert conn.llen(K.ended("left")) == 0


def test_repair_counts_a_parent_that_finished_before_its_child_was_registered(conn,
                                                                            monkeypatch):
    queue = Queue.named("rep")
    parent = queue.enqueue("p")
    monkeypatch.setattr(dependencies, "register", lambda *args, **kwargs: None)
    child = queue.enqueue("c", after=[parent])  # its producer died before registering it
    monkeypatch.undo()
    run("rep")
    assert child.status.hget() == "waiting"
    assert dependencies.repair(Job.scripts(), "rep") == 0  # too recent to be checked
    assert child.status.hget() == "waiting"
    conn.zadd(K.waiting("rep"), {child.task_id: time.time() - 120})
    dependencies.repair(Job.scripts(), "rep")
    assert child.status.hget() == "pending"



@pytest.mark.asyncio
async def test_aio_enqueue_takes_after_and_checks_it_before_writing(client, database, conn):
    queue = aio.Queue("adeps", client)
    parent = await queue.enqueue("p")
    done = await queue.enqueue("d")
    run("adeps")  # `parent` done
    child = await queue.enqueue("c", after=[parent, done], on_parent_failure="fail")
    assert Job.load(child).status.hget() == "waiting"
    assert conn.smembers(K.after("adeps", child)) == {done}
    with pytest.raises(ConfigurationError, match="no task 'gone'"):
        await queue.enqueue("x", after=["gone"])
    run("adeps", "broken", fail=True)  # `done` fails: the child fails, naming it
    assert Job.load(child).status.hget() == "failed"
    assert done in Job.load(child).error.hget()


def test_deleting_a_task_deletes_its_dependency_keys(conn):
    queue = Queue.named("del")
    parent = queue.enqueue("p")
    child = queue.enqueue("c", after=[parent])
    child.delete()
    assert conn.zcard(K.waiting("del")) == 0 and not conn.exists(K.after("del", child.task_id))
    run("del")
    Job.load(parent.task_id).delete()
    assert not conn.exists(K.children("del", parent.task_id), K.task(parent.task_id))


def test_truncate_and_drop_take_waiting_tasks_and_tell_their_followers(conn):
    upstream, downstream = Queue.named("trunc"), Queue.named("trunc-down")
    parent = upstream.enqueue("p", delay=3600)
    child = downstream.enqueue("c", after=[parent])
    grandchild = downstream.enqueue("g", after=[child], on_parent_failure="fail")
    assert upstream.truncate() == 1
    dependencies.follow_up(Job.scripts(), ["trunc"])
    assert child.status.hget() == "canceled" and grandchild.status.hget() == "failed"
    assert not conn.exists(K.children("trunc", parent.task_id))
    waiting = Queue.named("dropped")
    root = Queue.named("other").enqueue("r")
    orphan = waiting.enqueue("o", after=[root])
    assert waiting.drop() == 1
    assert not conn.exists(K.task(orphan.task_id), K.waiting("dropped"),
                           K.after("dropped", orphan.task_id))


def test_a_deferred_ttl_that_is_no_number_is_unset(conn):
    queue = Queue.named("nan")
    parent = queue.enqueue("p")
    child = queue.enqueue("c", after=[parent], ttl=60)
    conn.hset(K.task(child.task_id), "deferred", '{"a":[],"t":"nan","e":"inf"}')
    run("nan")
    assert child.status.hget() == "pending" and child.raw_field("expires_at") is None


def test_a_follow_field_naming_another_key_is_never_written_to(conn):
    queue = Queue.named("hostile-follow")
    parent = queue.enqueue("p")
    queue.enqueue("c", after=[parent])
    conn.hset(K.task(parent.task_id), "follow", K.pending("elsewhere"))
    run("hostile-follow")
    assert not conn.exists(K.pending("elsewhere"))


def test_waiting_for_a_task_its_parent_failed_answers_at_once(conn):
    from limpyd_blueque import TaskFailed

    queue = Queue.named("quick-fail")
    parent = queue.enqueue("p")
    child = queue.enqueue("c", after=[parent], on_parent_failure="fail")
    run("quick-fail", "boom", fail=True)
    began = time.monotonic()
    with pytest.raises(TaskFailed, match=parent.task_id):
        child.wait(timeout=10)
    assert time.monotonic() - began < 1.0  # no Error record to wait for: it never ran


def test_on_parent_failure_is_taken_without_after(conn):
    job = Queue.named("noafter").enqueue("x", on_parent_failure="run", after=[])
    assert job.status.hget() == "pending"
