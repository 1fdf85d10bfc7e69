"""Workflows under faults, with real workers: a 50-node graph (a chain, a fan-out of 20 and
its fan-in, a diamond, a node that adds 5 nodes as it runs and their fan-in, a failing
node and its three policies) run by three workers killed
with SIGKILL (with their task processes) three times on the way, and a workflow canceled
while its nodes run. Every node reaches its outcome exactly once, none starts before the
tasks it waits for finished, a failed node's dependents follow their policy within a
second, and a canceled workflow leaves nothing running or in line."""

from __future__ import annotations

import os
import subprocess
import time
from collections import Counter, defaultdict

import psutil
import pytest
from helpers import kill, wait_for, worker_command

from limpyd_blueque import Job, Workflow
from limpyd_blueque.models import dependencies
from limpyd_blueque.protocol.keys import keyspace

pytestmark = [pytest.mark.crash, pytest.mark.timeout(240)]
QUEUES = ("wf-chain", "wf-fan", "wf-diamond", "wf-fail")
K = keyspace()


def start(redis_url, log_path):
    return subprocess.Popen(
        worker_command(redis_url, f"--queues={','.join(QUEUES)}",
                       "--job-model=jobs.WorkflowJob", "--concurrency=2", "--ttr=3",
                       "--heartbeat-interval=0.5", "--clean-interval=0.5", "--timeout=0.2",
                       "--max-attempts=1000", "--no-title", "--logger-level=WARNING"),
        env={**os.environ, "CRASH_LOG": str(log_path)}, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)


def sigkill_with_tasks(worker):
    try:
        children = [child.pid for child in psutil.Process(worker.pid).children()]
    except psutil.NoSuchProcess:
        children = []
    kill(worker.pid)
    for pid in children:
        kill(pid)
    worker.wait()


def graph():
    """The 50 nodes: {name: node}, the workflow, and each node's expected status."""
    wf = Workflow("night")
    nodes, expected = {}, {}
    previous = None
    for index in range(13):  # a chain
        previous = nodes[f"chain{index}"] = wf.add(
            "wf-chain", "0.3", after=[previous] if previous else [])
    source = nodes["source"] = wf.add("wf-fan", "0.2")
    parts = [wf.add("wf-fan", "0.5", after=[source]) for _ in range(20)]  # a fan-out
    nodes.update({f"part{index}": part for index, part in enumerate(parts)})
    nodes["sum"] = wf.add("wf-fan", "sum", after=parts)  # its fan-in
    top = nodes["top"] = wf.add("wf-diamond", "0.2")
    nodes["left"] = wf.add("wf-diamond", "0.4", after=[top])
    nodes["right"] = wf.add("wf-diamond", "0.2", after=[top])
    nodes["bottom"] = wf.add("wf-diamond", "0.1", after=[nodes["left"], nodes["right"]])
    grower = nodes["grower"] = wf.add("wf-fan", "grow:5")  # a fan-out known at run time
    nodes["grown-sum"] = wf.add("wf-fan", "sum", after=[grower])
    broken = nodes["broken"] = wf.add("wf-fail", "fail", max_attempts=1)
    for policy in ("cancel", "fail", "run"):
        nodes[policy] = wf.add("wf-fail", "0.1", after=[broken], on_parent_failure=policy)
    expected = {name: "complete" for name in nodes}
    expected.update(broken="failed", cancel="canceled", fail="failed")
    return wf, nodes, expected


def read_log(path):
    """{task id: [(event, pid, time)]} of the log."""
    events = defaultdict(list)
    for line in path.read_text().splitlines():
        event, task_id, pid, *moment = line.split()
        events[task_id].append((event, int(pid), float(moment[0]) if moment else None))
    return events


def test_a_graph_runs_each_node_once_in_order_through_killed_workers(redis_url, conn,
                                                                    tmp_path):
    log_path = tmp_path / "runs.log"
    wf, nodes, expected = graph()
    assert len(nodes) == 45  # and 5 grown at run time: 50
    workers = [start(redis_url, log_path) for _ in range(3)]
    wf.submit()
    try:
        for slot, pause in enumerate((1.0, 1.5, 1.5)):  # three SIGKILLs on the way
            time.sleep(pause)
            sigkill_with_tasks(workers[slot])
            workers[slot] = start(redis_url, log_path)
        wait_for(lambda: wf.status().done, timeout=120, interval=0.2)
    finally:
        for worker in workers:
            kill(worker.pid)
            worker.wait()
    by_name = {name: Job.load(node.task_id) for name, node in nodes.items()}
    statuses = {name: job.status.hget() for name, job in by_name.items()}
    assert statuses == expected
    events = read_log(log_path)
    # exactly one outcome per node: each completed node recorded once
    recorded = Counter(task_id for task_id, found in events.items()
                       for event, _, _ in found if event == "recorded")
    for name, status in expected.items():
        assert recorded[nodes[name].task_id] == (1 if status == "complete" else 0), name
    hashes = wf.nodes()  # the 45 nodes and the 5 grown ones
    grown = set(hashes) - {node.task_id for node in nodes.values()}
    assert len(grown) == 5 and all(recorded[task_id] == 1 for task_id in grown)
    # no node began before every task it waits for had finished
    finished_at = {name: float(job.raw_field("updated")) for name, job in by_name.items()}
    ended_at = {task_id: float(fields["updated"]) for task_id, fields in hashes.items()}
    for task_id, fields in hashes.items():
        began = [moment for event, _, moment in events.get(task_id, ()) if event == "begin"]
        for parent in dependencies.parents_of(fields):
            assert all(moment >= ended_at[parent] - 0.05 for moment in began), (task_id,
                                                                                 parent)
    # the fan-in read the results of its 20 parents; the grown one of its grower and the
    # 5 nodes it added (once, whatever the kills)
    assert by_name["sum"].result.hget() == "20"
    assert by_name["grown-sum"].result.hget() == "6"
    assert wf.status()["total"] == 50 and wf.status()["complete"] == 47
    # the failed node's dependents followed their policy within a second (the one that
    # runs anyway then waits for a free slot, as any task in line: it began after)
    for policy in ("cancel", "fail"):
        assert finished_at[policy] - finished_at["broken"] < 1.0, policy
    assert min(moment for event, _, moment in events[nodes["run"].task_id]
               if event == "begin") >= finished_at["broken"]
    retried = sum(1 for found in events.values()
                  if sum(event == "begin" for event, _, _ in found) > 1)
    print(f"\n50 nodes through 3 SIGKILLs: {retried} node(s) began again after a kill, "
          f"each recorded once; the failed node's dependents followed within "
          f"{max(finished_at[p] for p in ('cancel', 'fail')) - finished_at['broken']:.3f} s")
    # done: every node is in its queue's retention, nothing waits or is held
    for name, node in nodes.items():
        assert conn.zscore(K.retention(node.queue), node.task_id) is not None, name
    for queue in QUEUES:
        assert conn.zcard(K.waiting(queue)) == 0 and conn.zcard(K.leases(queue)) == 0
        assert conn.llen(K.pending(queue)) == 0 and conn.llen(K.ended(queue)) == 0


def test_a_canceled_workflow_leaves_nothing_running_or_in_line(redis_url, conn, tmp_path):
    log_path = tmp_path / "runs.log"
    wf = Workflow()
    source = wf.add("wf-fan", "0.1")
    parts = [wf.add("wf-fan", "3", after=[source]) for _ in range(10)]
    wf.add("wf-fan", "sum", after=parts)
    workers = [start(redis_url, log_path) for _ in range(2)]
    try:
        wf.submit()
        wait_for(lambda: wf.status()["started"] >= 2, timeout=30)
        wf.cancel()
        wait_for(lambda: wf.status().done, timeout=20)
    finally:
        for worker in workers:
            kill(worker.pid)
            worker.wait()
    status = wf.status()
    assert status["complete"] == 1 and status["canceled"] == 11
    assert conn.zcard(K.leases("wf-fan")) == 0 and conn.llen(K.pending("wf-fan")) == 0
    assert conn.zcard(K.waiting("wf-fan")) == 0
