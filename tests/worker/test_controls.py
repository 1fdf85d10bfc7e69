"""Operators pause a queue and give workers orders (quiet, stop): real worker processes
take no new task of a paused queue within a second, let running tasks go on, and obey
their orders."""

import time

import pytest
from operating_jobs import wait_status

from limpyd_blueque import Queue
from limpyd_blueque.exceptions import ConfigurationError
from limpyd_blueque.operations.overview import live_workers


def _wait(predicate, timeout=10.0, what="the condition"):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what} not met within {timeout} s"
        time.sleep(0.05)


def _worker_id(process, timeout=10.0):
    def found():
        return [row for row in live_workers().workers if row.pid == process.pid]
    _wait(found, timeout, "the worker's record")
    return found()[0].id


def test_a_paused_queue_gets_no_new_task_and_its_running_task_goes_on(conn, workers):
    queue = Queue.named("paws")
    running = queue.enqueue({"seconds": 1.5})
    workers.start("--queues=paws", "--timeout=5")  # a long wait: the pause must still hold
    wait_status(running, "started", workers)
    assert queue.pause() and not queue.pause()  # the second says it was paused already
    assert queue.is_paused() and Queue.paused_among(["paws", "other"]) == {"paws"}
    time.sleep(1.1)  # the worker read the pause by now
    waiting = queue.enqueue({"seconds": 0})  # enqueueing still works
    wait_status(running, "complete", workers)  # the running task went on
    time.sleep(1.5)
    assert waiting.data().status == "pending"
    resumed_at = time.monotonic()
    assert queue.resume() and not queue.resume()
    wait_status(waiting, "complete", workers)
    print(f"taken {time.monotonic() - resumed_at:.2f} s after the resume")
    assert not queue.is_paused()


def test_a_quiet_worker_takes_no_new_task_and_a_stop_order_stops_it(conn, workers):
    queue = Queue.named("orders")
    process = workers.start("--queues=orders", "--concurrency=2", "--timeout=5")
    worker_id = _worker_id(process)
    assert Queue.tell_worker(worker_id, "quiet")
    assert Queue.worker_orders() == {worker_id: "quiet"}
    time.sleep(1.1)
    waiting = queue.enqueue({"seconds": 0})
    time.sleep(1.5)
    assert waiting.data().status == "pending"
    _wait(lambda: {row.id: row.state for row in live_workers().workers}.get(worker_id)
          == "quiet", what="the quiet state in the worker's record")
    row = next(row for row in live_workers().workers if row.id == worker_id)
    assert (row.concurrency, row.running_count) == (2, 0)
    assert row.load is None or row.load >= 0
    assert Queue.tell_worker(worker_id, None)  # taken back: it takes tasks again
    wait_status(waiting, "complete", workers)
    assert Queue.tell_worker(worker_id, "stop")
    assert process.wait(10) == 0
    assert Queue.worker_orders() == {}  # an order is not left for the next of this id
    assert not Queue.tell_worker(worker_id, "quiet")  # no such live worker now


def test_orders_are_checked(conn):
    with pytest.raises(ConfigurationError, match="unknown worker order 'pause'"):
        Queue.tell_worker("nobody_1", "pause")
    assert not Queue.tell_worker("nobody_1", "stop")
    assert Queue.worker_orders() == {}


def test_a_drop_removes_the_pause(conn):
    queue = Queue.named("gone")
    queue.pause()
    queue.drop()
    assert not queue.is_paused()
    assert not conn.exists("blueque:paused:gone")


def test_a_pause_read_of_another_type_is_no_pause_and_no_order(conn):
    conn.hset("blueque:paused:odd", "x", "1")
    conn.set("blueque:workers:orders", "not a hash")
    # a key there of another type still exists: the queue counts as paused, never an error
    controls = Queue.worker_controls("w_1", ["odd", "fine"])
    assert (controls.paused, controls.order) == (frozenset({"odd"}), None)
    assert Queue.worker_orders() == {}


def _blueque(redis_url, *args):
    import subprocess

    from helpers import script

    return subprocess.run([*script("blueque", "limpyd_blueque.admin"),
                           f"--redis-url={redis_url}", *args],
                          capture_output=True, text=True, timeout=60)


def test_the_commands_pause_resume_and_give_orders(redis_url, conn, workers):
    import json

    Queue.named("cmd").enqueue({"seconds": 0})
    paused = _blueque(redis_url, "pause", "cmd")
    assert paused.returncode == 0 and paused.stdout.startswith("paused: cmd"), paused.stderr
    assert _blueque(redis_url, "pause", "cmd").stdout.strip() == "cmd was paused already"
    stats = _blueque(redis_url, "stats", "--json")
    assert [row["paused"] for row in json.loads(stats.stdout)["queues"]] == [True]
    assert "cmd (paused)" in _blueque(redis_url, "stats").stdout
    unknown = _blueque(redis_url, "pause", "cmdd")
    assert unknown.returncode == 1 and "unknown queue 'cmdd'" in unknown.stderr
    assert json.loads(_blueque(redis_url, "resume", "cmd", "--json").stdout) == {
        "queue": "cmd", "paused": False, "changed": True}
    assert not Queue.named("cmd").is_paused()

    process = workers.start("--queues=cmd", "--timeout=5")
    worker_id = _worker_id(process)
    quiet = _blueque(redis_url, "workers", "--quiet", worker_id)
    assert quiet.returncode == 0 and f"told worker {worker_id} to quiet" in quiet.stdout
    _wait(lambda: " quiet " in _blueque(redis_url, "workers").stdout,
          what="the quiet state in 'blueque workers'")
    nobody = _blueque(redis_url, "workers", "--stop", "nobody_1")
    assert nobody.returncode == 1 and f"live workers: {worker_id}" in nobody.stderr
    assert _blueque(redis_url, "workers", "--stop", worker_id).returncode == 0
    assert process.wait(10) == 0
