"""Filtering tasks with limpyd collections, indexed by the Blueque structures themselves."""

import time

import pytest

from limpyd_blueque import Job, Queue

LISTENER = "h_1"


@pytest.fixture
def tasks(database):
    """One task in each status, spread over two queues."""
    a, b = Queue.named("a"), Queue.named("b")
    made = {
        "scheduled": a.schedule("s", time.time() + 3600),
        "complete": a.enqueue("c"),
        "failed": b.enqueue("f"),
    }
    a.reserve(LISTENER, pid=1).complete("ok")
    b.reserve(LISTENER, pid=1).fail("ko")
    made["started"] = a.enqueue("st")
    a.reserve(LISTENER, pid=2)
    made["reserved"] = b.enqueue("r")
    b.reserve(LISTENER)
    made["pending"] = a.enqueue("p")
    return {status: job.pk.get() for status, job in made.items()}


def ids(collection):
    return set(collection)


def test_filter_by_status(tasks):
    for status, task_id in tasks.items():
        assert ids(Job.collection(status=status)) == {task_id}, status


def test_filter_by_queue(tasks):
    in_b = {tasks["failed"], tasks["reserved"]}
    assert ids(Job.collection(queue="b")) == in_b
    assert ids(Job.collection(queue="a")) == set(tasks.values()) - in_b


def test_filter_by_queue_and_status(tasks):
    assert ids(Job.collection(queue="a", status="complete")) == {tasks["complete"]}
    assert ids(Job.collection(queue="b", status="complete")) == set()


def test_filter_with_in(tasks):
    assert ids(Job.collection(status__in=["pending", "failed"])) == {tasks["pending"],
                                                                     tasks["failed"]}
    assert ids(Job.collection(queue__in=["a", "b"])) == set(tasks.values())


def test_no_filter_lists_every_task(tasks):
    assert ids(Job.collection()) == set(tasks.values())


def test_collections_sort_and_load_instances(tasks):
    ordered = list(Job.collection(queue="a").sort(by="created"))
    assert ordered[0] == tasks["scheduled"] and ordered[-1] == tasks["pending"]
    jobs = Job.collection(status="failed").instances()
    assert [job.error.hget() for job in jobs] == ["ko"]


def test_filters_leave_no_temporary_keys(tasks, conn):
    before = set(conn.keys("*"))
    list(Job.collection(queue="a", status="pending"))
    list(Job.collection())
    assert set(conn.keys("*")) == before


def test_index_follows_every_step(database):
    q = Queue.named("q")
    job = q.enqueue("x")
    task_id = job.pk.get()
    assert ids(Job.collection(status="pending")) == {task_id}
    q.reserve(LISTENER)
    assert ids(Job.collection(status="pending")) == set()
    assert ids(Job.collection(status="reserved")) == {task_id}
    job.start(LISTENER, 5)
    assert ids(Job.collection(status="reserved")) == set()
    assert ids(Job.collection(status="started")) == {task_id}
    job.complete("")
    assert ids(Job.collection(status="started")) == set()
    assert ids(Job.collection(status="complete")) == {task_id}
    job.delete()
    assert ids(Job.collection()) == set()


def test_tasks_written_by_another_client_are_found(database, conn):
    conn.hset("blueque_task_x1", mapping={"status": "pending", "queue": "ext", "parameters": "",
                                          "created": 1, "updated": 1})
    conn.zincrby("blueque_queues", 0, "ext")
    conn.lpush("blueque_pending_tasks_ext", "x1")
    assert ids(Job.collection(queue="ext", status="pending")) == {"x1"}


def test_a_list_entry_whose_hash_disagrees_is_not_listed(database, conn):
    # a task left in a pending list with another status, by a crash of a non-atomic client
    conn.hset("blueque_task_odd", mapping={"status": "reserved", "queue": "ext"})
    conn.zincrby("blueque_queues", 0, "ext")
    conn.lpush("blueque_pending_tasks_ext", "odd")
    assert ids(Job.collection(status="pending")) == set()


def test_unknown_status_filters_to_nothing(tasks):
    assert ids(Job.collection(status="nonsense")) == set()


def test_queue_counts(tasks):
    assert Queue.named("a").counts() == {"scheduled": 1, "pending": 1, "running": 1,
                                         "started": 1, "complete": 1, "failed": 0,
                                         "canceled": 0, "buried": 0, "expired": 0,
                                         "waiting": 0}
