"""Workflows on a real Redis, without workers (each node taken and finished by hand): a
submission written whole, nodes released in order, status and results, cancel, a
workflow grown from inside a running node (run twice: nothing added twice), retention
held until done, and a submission of 10,000 nodes in three round trips."""

from __future__ import annotations

import time

import pytest
from helpers import LISTENER, take

from limpyd_blueque import ConfigurationError, Job, Queue, Workflow, WorkflowNotFound
from limpyd_blueque.protocol.keys import keyspace

pytestmark = pytest.mark.timeout(60)
K = keyspace()


def finish(queue_name, result="ok", fail=False):
    job = take(queue_name)
    assert job is not None, f"nothing to take in {queue_name}"
    done = job.fail(result, listener_id=LISTENER) if fail else job.complete(
        result, listener_id=LISTENER)
    assert done
    return job


def statuses(*nodes):
    return [Job.load(node.task_id).status.hget() for node in nodes]


def split_and_merge(queue_name):
    """A submitted workflow `split` then `merge`, and the job of `split`, taken."""
    wf = Workflow()
    split = wf.add(queue_name, "split")
    merge = wf.add(queue_name, "merge", after=[split])
    wf.submit()
    job = take(queue_name)
    assert job.task_id == split.task_id
    return wf, split, merge, job


def died(*args, **kwargs):
    raise SystemExit("killed")


def test_a_diamond_runs_in_order_and_reports_its_status_and_results(conn):
    wf = Workflow("diamond")
    top = wf.add("wf-a", "top")
    left = wf.add("wf-b", "left", after=[top])
    right = wf.add("wf-a", "right", after=[top])
    bottom = wf.add("wf-b", "bottom", after=[left, right])
    workflow_id = wf.submit()
    assert statuses(top, left, right, bottom) == ["pending", "waiting", "waiting", "waiting"]
    loaded = Workflow.load(workflow_id)
    assert loaded.name == "diamond" and loaded.state == "submitted"
    assert loaded.node_ids() == sorted(n.task_id for n in (top, left, right, bottom))
    status = loaded.status()
    assert (status["pending"], status["waiting"], status["total"], status.done) == (1, 3, 4,
                                                                                   False)
    assert finish("wf-a", "T").task_id == top.task_id
    assert statuses(left, right, bottom) == ["pending", "pending", "waiting"]
    assert finish("wf-b", "L").task_id == left.task_id
    assert statuses(bottom) == ["waiting"]
    assert finish("wf-a", "R").task_id == right.task_id
    job = take("wf-b")
    assert job.task_id == bottom.task_id
    assert job.parent_results() == {left.task_id: "L", right.task_id: "R"}
    assert job.complete("B", listener_id=LISTENER)
    status = loaded.status()
    assert status.done and status["complete"] == 4
    assert loaded.results() == {top.task_id: "T", left.task_id: "L", right.task_id: "R",
                                bottom.task_id: "B"}
    assert loaded.wait(timeout=1) == loaded.results()
    assert conn.hget(K.workflow(workflow_id), "done_at")


def test_nodes_are_kept_out_of_retention_until_the_workflow_is_done(conn):
    wf = Workflow()
    first = wf.add("keep", "1")
    second = wf.add("keep", "2", after=[first])
    wf.submit()
    finish("keep")
    assert conn.zscore(K.retention("keep"), first.task_id) is None  # its workflow runs on
    finish("keep")
    for node in (first, second):  # done: both filed, as a task of no workflow is
        assert conn.zscore(K.retention("keep"), node.task_id) > time.time() + 6 * 86400
    assert 0 < conn.ttl(K.workflow(wf.workflow_id)) <= 7 * 86400 + 1


def test_a_failed_node_cancels_its_dependents_and_the_workflow_is_done(conn):
    wf = Workflow()
    first = wf.add("wff", "1")
    second = wf.add("wff", "2", after=[first])
    third = wf.add("wff", "3", after=[second])
    cleanup = wf.add("wff", "c", after=[first], on_parent_failure="run")
    wf.submit()
    finish("wff", "broken", fail=True)
    assert statuses(second, third, cleanup) == ["canceled", "canceled", "pending"]
    finish("wff")
    assert wf.status().done


def test_cancel_leaves_no_node_queued_or_waiting(conn):
    wf = Workflow()
    first = wf.add("wfc", "1")
    second = wf.add("wfc", "2", after=[first])
    other = wf.add("wfc", "3")
    wf.submit()
    running = take("wfc")
    assert wf.cancel() == 3
    assert statuses(second, other) == ["canceled", "canceled"]
    assert running.cancel_requested()
    assert conn.llen(K.pending("wfc")) == 0 and conn.zcard(K.waiting("wfc")) == 0
    assert running.complete("late", listener_id=LISTENER)  # filed as canceled: it came first
    assert statuses(first) == ["canceled"] and wf.status().done


def test_a_running_node_grows_its_workflow_and_its_dependents_wait_for_the_new_nodes(conn):
    wf = Workflow()
    split = wf.add("grow", "split")
    merge = wf.add("grow", "merge", after=[split])
    wf.submit()
    for attempt in range(2):  # run twice (its worker died after the submit): added once
        job = take("grow")
        assert job.task_id == split.task_id
        inside = job.workflow()
        parts = [inside.add("grow-parts", f"part {i}") for i in range(3)]
        inside.submit()
        if attempt == 0:
            job.release()  # back in line, as when its worker died
    assert len(Workflow.load(wf.workflow_id).node_ids()) == 5
    assert conn.smembers(K.after("grow", merge.task_id)) == {split.task_id,
                                                            *(p.task_id for p in parts)}
    assert job.complete("split", listener_id=LISTENER)
    assert statuses(merge) == ["waiting"]
    for _ in parts:
        finish("grow-parts", "p")
    merged = take("grow")
    assert merged.task_id == merge.task_id
    assert set(merged.parent_results()) == {split.task_id, *(p.task_id for p in parts)}


def test_mistakes_are_refused_before_anything_is_written(conn):
    wf = Workflow()
    with pytest.raises(ConfigurationError, match="no node of this workflow"):
        wf.add("bad", "x", after=["elsewhere"])
    with pytest.raises(ConfigurationError, match="identifier"):
        wf.add("bad", "x", identifier="once")
    with pytest.raises(ConfigurationError, match="at least one node"):
        wf.submit()
    with pytest.raises(ConfigurationError):
        wf.add("bad queue", "x")
    with pytest.raises(ConfigurationError):
        Workflow(name="")
    with pytest.raises(WorkflowNotFound):
        Workflow.load("nope")
    assert conn.dbsize() == 0


def test_a_submission_refused_half_way_leaves_no_node_behind(conn):
    Queue.named("half").enqueue("x", task_id="taken")
    wf = Workflow()
    first = wf.add("half-2", "1")
    wf.add("half", "2", after=[first])
    wf._added[-1].node = type(wf._added[-1].node)("taken", "half")  # an id in use
    with pytest.raises(Exception, match="exists"):
        wf.submit()
    assert not conn.exists(K.task(first.task_id), K.workflow(wf.workflow_id),
                           K.workflow_nodes(wf.workflow_id))
    assert conn.zcard(K.waiting("half-2")) == 0 and not conn.keys("blueque:children:*")
    assert Job.load("taken").status.hget() == "pending"


def test_ten_thousand_nodes_are_submitted_in_a_few_round_trips(conn, count_commands):
    wf = Workflow("fan")
    parts = [wf.add("fan-out", i) for i in range(10_000)]
    wf.add("fan-in", "sum", after=parts)
    began = time.perf_counter()
    with count_commands() as counted:
        wf.submit()
    took = time.perf_counter() - began
    print(f"\n10,001 nodes submitted in {took:.2f} s")
    assert conn.llen(K.pending("fan-out")) == 10_000
    assert conn.zcard(K.waiting("fan-in")) == 1
    assert counted.count < 200  # script calls of at most 1,000 items, no command per node


def test_a_growing_node_that_died_half_way_through_its_submit_links_its_nodes_when_run_again(
        conn, monkeypatch):
    _, split, merge, job = split_and_merge("half-grow")
    inside = job.workflow()
    parts = [inside.add("half-parts", f"part {i}") for i in range(2)]
    monkeypatch.setattr(Workflow, "_link", died)
    with pytest.raises(SystemExit):
        inside.submit()  # its nodes written, never linked nor released
    monkeypatch.undo()
    assert statuses(*parts) == ["waiting", "waiting"]
    job.release()
    again = take("half-grow")
    assert again.task_id == split.task_id
    inside = again.workflow()
    assert [inside.add("half-parts", f"part {i}") for i in range(2)] == parts
    inside.submit()
    assert statuses(*parts) == ["pending", "pending"]
    assert conn.smembers(K.after("half-grow", merge.task_id)) == {
        split.task_id, *(p.task_id for p in parts)}


def test_the_repair_never_releases_the_nodes_of_a_workflow_never_submitted(conn, monkeypatch):
    from limpyd_blueque.models import dependencies

    wf = Workflow()
    root = wf.add("unsent", "1")
    monkeypatch.setattr(Workflow, "_link", died)
    with pytest.raises(SystemExit):
        wf.submit()  # its producer died before the workflow was submitted
    monkeypatch.setattr(dependencies, "REPAIR_AFTER", 0.0)
    dependencies.repair(Job.scripts(), "unsent")
    assert statuses(root) == ["waiting"]


def test_a_node_grows_its_workflow_several_times_in_one_run(conn):
    _, split, merge, job = split_and_merge("twice")
    first = job.workflow()
    a = first.add("twice-parts", "a")
    first.submit()
    second = job.workflow()  # another handle, in the same run: the ranks go on
    b = second.add("twice-parts", "b")
    c = second.add("twice-parts", "c")
    second.submit()
    assert len({a.task_id, b.task_id, c.task_id}) == 3
    assert statuses(a, b, c) == ["pending"] * 3
    assert conn.smembers(K.after("twice", merge.task_id)) == {
        split.task_id, a.task_id, b.task_id, c.task_id}


def test_a_node_growing_a_canceled_workflow_cancels_what_it_adds(conn):
    wf = Workflow()
    wf.add("cg", "grower")
    wf.submit()
    job = take("cg")
    assert wf.cancel() == 1  # asked to stop: it learns it at its next beat
    inside = job.workflow()
    late = inside.add("cg-parts", "late")
    inside.submit()
    assert statuses(late) == ["canceled"]
    assert conn.llen(K.pending("cg-parts")) == 0


def test_nodes_written_by_a_growing_run_that_died_before_recording_them_never_hold_it(
        conn, monkeypatch):
    wf = Workflow()
    grower = wf.add("ghost", "g", max_attempts=1)
    wf.submit()
    job = take("ghost")
    inside = job.workflow()
    inside.add("ghost-parts", "p")
    monkeypatch.setattr(Workflow, "_record", died)
    with pytest.raises(SystemExit):
        inside.submit()
    monkeypatch.undo()
    assert job.fail("gave up", listener_id=LISTENER)  # it never runs again
    status = Workflow.load(wf.workflow_id).status()
    assert status.done and status["total"] == 1 and status["failed"] == 1
    assert statuses(grower) == ["failed"]


def test_a_follower_dying_before_the_retention_of_a_done_workflow_leaves_it_to_the_next(
        conn, monkeypatch):
    from limpyd_blueque.models import dependencies

    wf = Workflow()
    only = wf.add("late-keep", "1")
    wf.submit()
    job = take("late-keep")
    monkeypatch.setattr(dependencies, "retain_nodes", died)
    with pytest.raises(SystemExit):
        job.complete("x", listener_id=LISTENER)  # its step done, its follow-up cut short
    monkeypatch.undo()
    assert not conn.hexists(K.workflow(wf.workflow_id), "done_at")
    dependencies.follow_up(Job.scripts(), ["late-keep"])  # a worker's, half a second later
    assert conn.hexists(K.workflow(wf.workflow_id), "done_at")
    assert conn.zscore(K.retention("late-keep"), only.task_id) is not None


def test_a_node_put_back_in_line_after_its_end_reopens_its_workflow(conn):
    wf = Workflow()
    first = wf.add("again", "1")
    wf.submit()
    finish("again", "broken", fail=True)
    assert wf.status().done
    assert Job.load(first.task_id).requeue()
    assert not wf.status().done and not conn.hexists(K.workflow(wf.workflow_id), "done_at")
    assert conn.zscore(K.retention("again"), first.task_id) is None
    finish("again", "fixed")
    assert wf.status().done and wf.results() == {first.task_id: "fixed"}
    assert conn.zscore(K.retention("again"), first.task_id) is not None


def test_a_node_deleted_before_it_ran_counts_as_canceled(conn):
    wf = Workflow()
    first = wf.add("gone", "1")
    second = wf.add("gone", "2", after=[first])
    third = wf.add("gone", "3", after=[first], on_parent_failure="run")
    wf.submit()
    Job.load(first.task_id).delete()
    assert statuses(second, third) == ["canceled", "pending"]
    assert not conn.exists(K.children("gone", first.task_id))
    finish("gone")
    status = wf.status()
    assert status.done and status["total"] == 2  # the deleted node is no task any more


def test_a_status_loaded_while_submitting_becomes_done(conn):
    wf = Workflow()
    only = wf.add("loaded", "1")
    wf.submit()
    conn.hset(K.workflow(wf.workflow_id), "state", "submitting")
    loaded = Workflow.load(wf.workflow_id)
    conn.hset(K.workflow(wf.workflow_id), "state", "submitted")
    finish("loaded")
    assert loaded.status().done and loaded.wait(timeout=1) == {only.task_id: "ok"}
