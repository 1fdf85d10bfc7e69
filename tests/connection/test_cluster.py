"""The cluster key mode on a real Redis Cluster (issue 15): three masters and three
replicas on local ports (tests/clusters.py), the models bound with
`use_redis(url, cluster=True)`. Each step on a queue runs on its queue's slot: the
protocol steps, priorities, micro-queues, leases; queues spread over the shards; and no
command crossed slots (each node counts the CROSSSLOT errors it answered).

Run with `python3 -m pytest -m cluster` (CI runs it in its own step).
"""

from __future__ import annotations

import os
import subprocess
import time

import pytest
import redis
from clusters import LocalCluster
from helpers import kill, read_runs, wait_for, worker_command

from limpyd_blueque import Job, Queue, use_redis

pytestmark = pytest.mark.cluster
LISTENER = "host.example_7"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = LocalCluster(tmp_path_factory.mktemp("cluster"))
    yield cluster
    cluster.stop()


@pytest.fixture
def bound(cluster, redis_url):
    """The models on the cluster, every master emptied first; the tests' server after."""
    for port in cluster.masters():
        redis.Redis(port=port).flushall()
    database = use_redis(cluster.url, cluster=True)
    yield database
    assert crossed_slots(cluster) == 0
    use_redis(redis_url)


def crossed_slots(cluster):
    """How many CROSSSLOT errors the nodes answered since they started."""
    total = 0
    for node in cluster.nodes:
        stats = redis.Redis(port=node.port).info("errorstats")
        total += int(stats.get("errorstat_CROSSSLOT", {}).get("count", 0))
    return total


def test_a_tasks_life_on_one_slot(bound):
    queue = Queue.named("thumbnails")
    job = queue.enqueue({"image": "cat.jpg"}, ttr=30)
    assert job.task_id.startswith("{thumbnails}")
    assert Job.load(job.task_id).status.hget() == "pending"
    held, reservation = Queue.reserve_from(["thumbnails"], LISTENER)
    assert held.task_id == job.task_id and reservation.attempt == 1
    held.start(LISTENER, 4242)
    held.complete({"width": 128}, listener_id=LISTENER)
    data = Job.load(job.task_id).data()
    assert (data.status, data.result) == ("complete", '{"width":128}')
    assert queue.statistics()["tasks"]["complete"] == 1
    assert Job.queue_names() == ["thumbnails"]


def test_priorities_and_micro_queues(bound):
    queue = Queue.named("reports")
    low = queue.enqueue({"n": 1})
    high = queue.enqueue({"n": 2}, priority=5)
    first_a = queue.enqueue({"n": 3}, utube="customer-a", priority=9)
    second_a = queue.enqueue({"n": 4}, utube="customer-a", priority=9)
    taken = [Queue.reserve_from(["reports"], LISTENER)[0].task_id for _ in range(3)]
    assert taken == [first_a.task_id, high.task_id, low.task_id]  # second_a waits its turn
    assert second_a.status.hget() == "pending"
    Job.load(first_a.task_id).complete("done", listener_id=LISTENER)
    assert Queue.reserve_from(["reports"], LISTENER)[0].task_id == second_a.task_id


def test_groups_and_their_limits_on_one_slot(bound, cluster):
    queue = Queue.named("exports")
    queue.set_limit("*", max_running=1)
    queue.enqueue_many([{"n": n} for n in range(3)], group="customer:1")
    late = queue.enqueue({"n": 9}, group="customer:2")
    first = Queue.reserve_from(["exports"], LISTENER)[0]
    assert Queue.reserve_from(["exports"], LISTENER)[0].task_id == late.task_id
    assert Queue.reserve_from(["exports"], LISTENER)[0] is None  # both at their limit
    assert queue.limits()["*"].running == 2  # one of each group, both under '*'
    assert queue.limits()["*"].waiting == 2  # customer:1's, held back
    first.complete("ok", listener_id=LISTENER)
    assert Queue.reserve_from(["exports"], LISTENER)[0].group.hget() == "customer:1"
    slots = {redis.Redis(port=port).cluster("keyslot", key)
             for port in cluster.masters()[:1] for key in (
                 "blueque:group:{exports}:customer:1", "blueque:held:{exports}",
                 "blueque:slots:{exports}:customer:1", "blueque:limits:{exports}")}
    assert len(slots) == 1


def test_a_queues_own_limit_holds_back_all_its_tasks_and_a_new_queue_is_known(bound):
    from limpyd_blueque.operations.overview import queue_names, queue_overviews

    fresh = Queue.named("ahead")
    fresh.set_limit(None, max_running=1)  # before its first task: it is a known queue
    assert "ahead" in queue_names()
    fresh.enqueue_many([{"n": n} for n in range(3)])
    assert Queue.reserve_from(["ahead"], LISTENER)[0] is not None
    assert Queue.reserve_from(["ahead"], LISTENER)[0] is None  # the queue is full
    (row,) = queue_overviews(["ahead"]).queues
    assert (row.waiting, row.running, row.held_back) == (0, 1, 2)


def test_fail_requeue_bury_kick_cancel_and_delete(bound):
    queue = Queue.named("emails")
    job = queue.enqueue({"to": "a@example.com"})
    held, _ = Queue.reserve_from(["emails"], LISTENER)
    held.fail("ValueError: no", listener_id=LISTENER)
    assert job.status.hget() == "failed"
    assert Job.load(job.task_id).requeue()
    held, _ = Queue.reserve_from(["emails"], LISTENER)
    assert held.bury("poisoned", listener_id=LISTENER)
    assert queue.kick(5) == 1
    assert job.status.hget() == "pending"
    assert job.cancel() and job.status.hget() == "canceled"
    job.delete()
    assert not redis.Redis(port=bound.connection.get_node_from_key(job.key).port).exists(job.key)


def test_leases_are_renewed_and_a_dead_holders_task_comes_back(bound):
    queue = Queue.named("long")
    job = queue.enqueue({}, ttr=1)
    Queue.reserve_from(["long"], LISTENER)
    time.sleep(1.2)  # its lease ends: the next clean takes it back
    from limpyd_blueque.upkeep.cleaning import light_clean

    light_clean()
    assert job.status.hget() == "pending"
    assert Queue.reserve_from(["long"], LISTENER)[1].attempt == 2


def test_a_hundred_queues_spread_over_the_shards(bound, cluster):
    for n in range(100):
        Queue.named(f"queue-{n}").enqueue({"n": n})
    masters = cluster.masters()
    sizes = [redis.Redis(port=port).dbsize() for port in masters]
    assert len(masters) == 3
    assert all(size > 10 for size in sizes), sizes
    assert sorted(Job.queue_names()) == sorted(f"queue-{n}" for n in range(100))
    assert sum(Queue.named(f"queue-{n}").counts()["pending"] for n in range(100)) == 100
    every = Queue.statistics_all()  # one pipeline, split by node
    assert len(every) == 100
    assert sum(figures["tasks"]["pending"] for figures in every.values()) == 100


def test_reserving_from_several_queues_takes_them_in_their_order(bound):
    Queue.named("second").enqueue({"n": 2}, priority=9)
    first = Queue.named("first").enqueue({"n": 1})
    held, _ = Queue.reserve_from(["first", "second"], LISTENER)
    assert held.task_id == first.task_id  # each queue's priorities, queue by queue
    held, _ = Queue.reserve_from(["first", "second"], LISTENER)
    assert held.task_id.startswith("{second}")
    assert Queue.reserve_from(["first", "second"], LISTENER)[0] is None


def test_listeners_are_registered_on_their_queues_slot(bound):
    queue = Queue.named("listened")
    assert queue.add_listener("host_1") and queue.add_listener("host_2")
    assert Queue.listener_counts() == {"listened": 2}
    assert "listened" in Job.queue_names()
    assert queue.remove_listener("host_1")
    assert Queue.listener_counts() == {"listened": 1}


@pytest.mark.timeout(120)
def test_worker_processes_run_tasks_and_a_killed_ones_tasks_come_back(bound, cluster, tmp_path):
    ids = [job.task_id for name in ("alpha", "beta")
           for job in Queue.named(name).enqueue_many(["1.5"] * 4)]
    env = {**os.environ, "CRASH_LOG": str(tmp_path / "tasks.log")}
    url = f"redis+cluster://127.0.0.1:{cluster.nodes[0].port}/0"

    def start():
        log = open(tmp_path / "worker.log", "a")  # noqa: SIM115 - the worker's own copy
        return subprocess.Popen(worker_command(
            url, "--queues=alpha,beta", "--callback=jobs.crash_task", "--concurrency=2",
            "--ttr=3", "--heartbeat-interval=0.5", "--liveness-interval=0.3",
            "--liveness-timeout=2", "--timeout=0.3", "--no-title", "--logger-level=WARNING"),
            env=env, stdout=subprocess.DEVNULL, stderr=log)

    workers = [start()]
    try:
        wait_for(lambda: len(read_runs(tmp_path / "tasks.log")) >= 2, timeout=30)
        kill(workers[0].pid)  # its task processes are left running: their leases keep them
        workers[0].wait()
        workers.append(start())
        wait_for(lambda: all(Job.load(task_id).status.hget() == "complete" for task_id in ids),
                 timeout=90, interval=0.2)
    finally:
        for worker in workers:
            kill(worker.pid)
            worker.wait()
    assert len(read_runs(tmp_path / "tasks.log")) == 8


class Refused(Exception):
    """A failure with a code, as an application's errors may have."""

    code = "E42"


def test_failing_tasks_store_errors_filtered_as_on_one_redis(bound, cluster, caplog):
    import json
    import sys
    from datetime import datetime, timezone

    from limpyd_blueque import Error, Worker
    from limpyd_blueque.operations.web import WebSettings, create_app
    from limpyd_blueque.upkeep.retention import clean_errors

    fragile = Queue.named("fragile").enqueue_many([{"n": n} for n in range(2)])
    brittle = Queue.named("brittle").enqueue_many([{"n": n} for n in range(3)])

    def failing(job, queue):
        if queue.pk.get() == "fragile":
            raise ValueError("unreadable")
        raise Refused("no entry")
    Worker("fragile,brittle", callback=failing, fork=False, max_loops=5, timeout=0.2).run()
    for job in fragile + brittle:
        data = Job.load(job.task_id).data()
        assert data.status == "failed" and data.error
    assert "unexpected error" not in caplog.text and "keeps no Error" not in caplog.text
    # every key of the records in one slot, beside the workers' records
    error_keys = [key.decode() for port in cluster.masters()
                  for key in redis.Redis(port=port).scan_iter(match="*:error:*")]
    assert error_keys and all(key.startswith("{blueque}:error:") for key in error_keys)
    assert len({redis.Redis(port=cluster.masters()[0]).cluster("keyslot", key)
                for key in error_keys}) == 1
    # filtered by queue, type, code, task and date
    assert len(Error.collection(queue_name="fragile")) == 2
    assert len(Error.collection(type="Refused")) == 3
    assert len(Error.collection(code="E42", queue_name="brittle")) == 3
    (own,) = Error.collection_for_job(brittle[0]).instances()
    assert own.type.hget() == "Refused" and own.message.hget() == "no entry"
    today = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    assert len(Error.collection(date=today)) == 5
    assert len(Error.collection(date__gte=today, type="ValueError")) == 2
    # the admin command and the dashboard read them
    url = "redis+cluster://" + cluster.url.split("://", 1)[1]
    listed = subprocess.run([sys.executable, "-m", "limpyd_blueque.admin", f"--redis-url={url}",
                             "errors", "--queue=brittle", "--code=E42", "--json"],
                            capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)["errors"]
    assert len(rows) == 3 and {row["type"] for row in rows} == {"Refused"}
    assert [row["pk"] for row in rows] == sorted((row["pk"] for row in rows), key=int,
                                                 reverse=True)  # newest first
    assert {row["job"] for row in rows} == {job.task_id for job in brittle}
    page = create_app(WebSettings()).test_client().get("/errors?type=ValueError")
    assert page.status_code == 200 and page.get_data(as_text=True).count("unreadable") >= 2
    # and their retention deletes them, index entries included
    old = Error.add_error("brittle", brittle[0], ValueError("stale"),
                          when=datetime(2020, 1, 1, tzinfo=timezone.utc), ttl=60)
    assert len(Error.collection(queue_name="brittle")) == 4
    assert clean_errors(Error, time.time()) == 1
    assert len(Error.collection(queue_name="brittle")) == 3
    assert old.pk.get() not in set(Error.collection())


def test_what_an_operator_reads_works_on_a_cluster(bound):
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from limpyd_blueque.operations.metrics import registry
    from limpyd_blueque.operations.overview import queue_overviews, task_rows

    for n in range(5):
        Queue.named(f"ops-{n}").enqueue_many([{}] * (n + 1))
    held = Queue.named("ops-held")
    held.set_limit("a", max_running=1)
    held.enqueue_many([{}] * 3, group="a")
    assert Queue.reserve_from(["ops-held"], "host_1")[0] is not None
    assert Queue.reserve_from(["ops-held"], "host_1")[0] is None  # a is held back
    overview = queue_overviews()
    assert {row.queue: row.tasks["pending"] for row in overview.queues} == {
        **{f"ops-{n}": n + 1 for n in range(5)}, "ops-held": 2}
    assert {row.queue: (row.waiting, row.running, row.held_back)
            for row in overview.queues} == {
        **{f"ops-{n}": (n + 1, 0, 0) for n in range(5)}, "ops-held": (0, 1, 2)}
    assert len(task_rows(limit=100).tasks) == 15 + 3
    samples = {(sample.name, sample.labels.get("queue"), sample.labels.get("status")): sample.value
               for family in text_string_to_metric_families(generate_latest(registry()).decode())
               for sample in family.samples}
    assert samples[("blueque_tasks", "ops-4", "pending")] == 5
    assert samples[("blueque_waiting_tasks", "ops-4", None)] == 5
    assert samples[("blueque_tasks_held_back", "ops-held", None)] == 2


@pytest.mark.asyncio
async def test_asyncio_producers_on_a_cluster(bound, cluster):
    from limpyd_blueque import Worker, aio

    client = aio.connect(f"redis+cluster://127.0.0.1:{cluster.nodes[0].port}/0")
    try:
        queue = aio.Queue("async-thumbnails", client)
        task_id = await queue.enqueue({"image": "cat.jpg"}, priority=2)
        assert task_id.startswith("{async-thumbnails}")
        waiting = await queue.enqueue_many([{"n": n} for n in range(3)])
        assert await queue.cancel(waiting[0]) is True
        assert (await queue.statistics())["tasks"]["pending"] == 3
        assert "async-thumbnails" in Job.queue_names()
        Worker("async-thumbnails", callback=lambda job, queue: "ok", fork=False, max_loops=3,
               timeout=0.2).run()
        assert (await queue.get(task_id)).status == "complete"
        assert (await queue.get(waiting[0])).status == "canceled"
    finally:
        await client.aclose()


def test_tasks_and_workflows_waiting_across_slots(bound, cluster):
    from redis.crc import key_slot

    from limpyd_blueque import Workflow
    from limpyd_blueque.models import dependencies

    keys = Job.keys()
    slots = {key_slot(keys.pending(name).encode()) for name in ("extract", "load", "report")}
    assert len(slots) == 3  # three queues, three slots
    parent = Queue.named("extract").enqueue("e")
    child = Queue.named("load").enqueue("l", after=[parent], priority=3)
    assert child.status.hget() == "waiting"
    held, _ = Queue.reserve_from(["extract"], LISTENER)
    assert held.complete("rows", listener_id=LISTENER)
    assert child.status.hget() == "pending" and child.priority.hget() == "3"
    wf = Workflow("night")
    first = wf.add("extract", "1")
    parts = [wf.add("load", str(n), after=[first]) for n in range(5)]
    last = wf.add("report", "r", after=parts)
    wf.submit()
    assert Queue.reserve_from(["load"], LISTENER)[0].task_id == child.task_id
    for queue, count in (("extract", 1), ("load", 5)):
        for _ in range(count):
            held, _ = Queue.reserve_from([queue], LISTENER)
            # the finishing call's follow-up left to the next one (its process died)
            held.follow_up = lambda queue: None
            assert held.complete(f"{queue} done", listener_id=LISTENER)
        dependencies.follow_up(Job.scripts(), [queue])
    final = Queue.reserve_from(["report"], LISTENER)[0]
    assert final.task_id == last.task_id
    assert set(final.parent_results()) == {part.task_id for part in parts}
    assert final.complete("sent", listener_id=LISTENER)
    assert Workflow.load(wf.workflow_id).status().done


def test_a_worker_runs_a_workflow_spread_over_three_slots(bound, cluster, tmp_path):
    from limpyd_blueque import Workflow

    wf = Workflow()
    first = wf.add("extract", "0.1")
    parts = [wf.add("load", "0.1", after=[first]) for _ in range(6)]
    wf.add("report", "sum", after=parts)
    wf.submit()
    url = f"redis+cluster://127.0.0.1:{cluster.nodes[0].port}/0"
    worker = subprocess.Popen(worker_command(
        url, "--queues=extract,load,report", "--job-model=jobs.WorkflowJob",
        "--concurrency=2", "--timeout=0.2", "--no-title", "--logger-level=WARNING"),
        env={**os.environ, "CRASH_LOG": str(tmp_path / "runs.log")},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: wf.status().done, timeout=60, interval=0.2)
    finally:
        kill(worker.pid)
        worker.wait()
    assert wf.status()["complete"] == 8
    assert wf.results()[sorted(set(wf.node_ids()) - {first.task_id}
                               - {p.task_id for p in parts})[0]] == "6"
