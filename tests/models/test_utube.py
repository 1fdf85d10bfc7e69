"""Micro-queues (utube) on a real Redis: among the tasks sharing a utube key in a queue, one
at a time is reserved or running, in the order they were enqueued; other keys are not
held back."""

from __future__ import annotations

import json
import time

import pytest
from helpers import LISTENER, OTHER, start_worker, wait_for
from helpers import take as reserve

from limpyd_blueque import Queue
from limpyd_blueque.exceptions import ConfigurationError

QUEUE_NAME = "ut"


@pytest.fixture
def queue(database):
    return Queue.named("ut")


def take(listener=LISTENER, **options):
    return reserve(QUEUE_NAME, listener, **options)


def test_one_task_of_a_key_at_a_time_in_order_and_other_keys_go_on(queue, conn):
    a1 = queue.enqueue("a1", utube="customer-a")
    a2 = queue.enqueue("a2", utube="customer-a")
    b1 = queue.enqueue("b1", utube="customer-b")
    plain = queue.enqueue("plain")
    assert conn.zcard("blueque:utube_waiting:ut") == 1
    assert a2.status.hget() == "pending"
    first, second, third = take(), take(OTHER), take(OTHER)
    assert [first.task_id, second.task_id, third.task_id] == [a1.task_id, b1.task_id,
                                                              plain.task_id]
    assert take(OTHER) is None  # a2 waits behind a1, which runs
    assert first.complete("ok")
    assert take(OTHER).task_id == a2.task_id
    assert conn.hgetall("blueque:utubes:ut") == {"customer-a": a2.task_id,
                                                 "customer-b": b1.task_id}


@pytest.mark.parametrize("how", ["fail", "bury", "cancel-next", "delete-next", "expire"])
def test_the_key_goes_to_the_next_task_whatever_ends_the_first(queue, conn, how):
    first = queue.enqueue("1", utube="k", ttl=0.2 if how == "expire" else None)
    second = queue.enqueue("2", utube="k")
    third = queue.enqueue("3", utube="k")
    if how == "expire":
        time.sleep(0.3)
        assert queue.expire_due() == [first.task_id]
        assert take().task_id == second.task_id
        return
    held = take()
    if how == "fail":
        held.fail("boom")
    elif how == "bury":
        held.bury()
    elif how == "cancel-next":
        assert second.cancel()
        held.complete("ok")
    else:
        second.delete()
        held.complete("ok")
    expected = third if how in ("cancel-next", "delete-next") else second
    assert take().task_id == expected.task_id


def test_a_released_or_recovered_task_keeps_its_place_at_the_head_of_its_key(queue, conn):
    first = queue.enqueue("1", utube="k")
    second = queue.enqueue("2", utube="k")
    held = take(ttr=30)
    assert held.release()
    assert take().task_id == first.task_id
    conn.zadd("blueque:leases:ut", {first.task_id: 0})  # its holder died: its lease ran out
    Queue.scripts().upkeep.recover([("ut", first.task_id, None, None)], time.time(),
                                   expired_only=True, max_attempts=None, why="test")
    assert first.status.hget() == "pending"
    assert take().task_id == first.task_id
    assert take() is None and second.status.hget() == "pending"


def test_a_scheduled_utube_task_joins_its_key_when_due(queue, conn):
    running = queue.enqueue("1", utube="k")
    take()
    later = queue.enqueue("2", utube="k", eta=time.time() + 0.1)
    time.sleep(0.15)
    assert queue.enqueue_due() == [later.task_id]
    assert conn.zscore("blueque:utube_waiting:ut", later.task_id) is not None
    assert take() is None
    assert running.status.hget() == "reserved"


def test_statistics_and_collections_count_the_tasks_waiting_behind(queue, conn):
    for n in range(3):
        queue.enqueue(str(n), utube="k")
    assert queue.statistics()["tasks"]["pending"] == 3
    from limpyd_blueque import Job
    assert len(Job.collection(queue="ut", status="pending")) == 3


def test_a_bad_utube_key_is_refused(queue, conn):
    for bad in ("", "has space", "x" * 201, 5):
        with pytest.raises(ConfigurationError, match="utube"):
            queue.enqueue("x", utube=bad)
    assert conn.dbsize() == 0


def test_truncate_and_drop_free_the_keys(queue, conn):
    for n in range(4):
        queue.enqueue(str(n), utube=f"k{n % 2}")
    assert queue.truncate() == 4
    assert conn.hlen("blueque:utubes:ut") == 0
    queue.enqueue("again", utube="k0")
    assert take() is not None


def test_micro_queues_across_workers_never_run_two_of_a_key_and_keep_the_order(
        redis_url, queue, conn):
    keys, per_key = 200, 3
    for rank in range(per_key):
        queue.enqueue_many([{"key": f"k{key}", "rank": rank, "sleep": 0.005}
                            for key in range(keys)],
                           options=[{"utube": f"k{key}"} for key in range(keys)])
    started = time.monotonic()
    workers = [start_worker(redis_url, "--queues=ut", "--callback=jobs.utube_callback",
                            "--concurrency=3", "--timeout=0.5", f"--max-loops={keys * per_key}")
               for _ in range(3)]
    try:
        wait_for(lambda: conn.llen("test:utube") == keys * per_key, timeout=120)
    finally:
        for worker in workers:
            worker.terminate()
            worker.wait(20)
    elapsed = time.monotonic() - started
    runs = [json.loads(entry) for entry in conn.lrange("test:utube", 0, -1)]
    by_key: dict[str, list[dict]] = {}
    for run in runs:
        by_key.setdefault(run["key"], []).append(run)
    for key, key_runs in by_key.items():
        key_runs.sort(key=lambda run: run["start"])
        assert [run["rank"] for run in key_runs] == list(range(per_key)), key
        for before, after in zip(key_runs, key_runs[1:]):
            assert before["end"] <= after["start"], f"two tasks of {key} ran at once"
    print(f"\n{keys} keys x {per_key} tasks, 3 workers x 3 slots: {elapsed:.1f} s, never two "
          "of a key at once, each key in order")


def test_a_key_whose_task_a_blueque_client_finished_goes_to_the_oldest_waiting_first(
        queue, conn):
    first = queue.enqueue("1", utube="k")
    second = queue.enqueue("2", utube="k")
    take()
    # a Blueque client finishes it, knowing nothing of micro-queues
    conn.hset(first.key, "status", "complete")
    third = queue.enqueue("3", utube="k")
    assert take().task_id == second.task_id
    assert take() is None and third.status.hget() == "pending"
