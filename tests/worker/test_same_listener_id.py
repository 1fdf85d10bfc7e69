"""A worker started with the listener id of an earlier worker of this machine (a
container restarted in place: same host name, same pid) takes the tasks of that worker
back before it takes any, if its process is gone; a live one, or a record it cannot
read, is left alone. (`test_recovery.py` measures it on killed `blueque-worker`s.)"""

from __future__ import annotations

import json
import subprocess
import sys
import time

from helpers import dead_pid, take

from limpyd_blueque import Queue, Worker
from limpyd_blueque.protocol.liveness import MACHINE_ID, process_start_time


def earlier_record(conn, listener, identity):
    """The record an earlier worker left: its identity, and a beat not run out yet."""
    conn.hset("blueque:workers:info", listener, json.dumps(identity))
    conn.zadd("blueque:workers", {listener: time.time() + 60})


def run_worker(listener):
    Worker(queues="q", listener_id=listener, fork=False, max_loops=1, max_duration=5,
           timeout=0.2, callback=lambda job, queue: "done").run()


def test_the_tasks_of_a_dead_earlier_worker_of_this_id_run_at_once(conn):
    job = Queue.named("q").enqueue("x")
    assert take("q", listener="box_1", ttr=3600) is not None  # a lease of an hour
    earlier_record(conn, "box_1", {"machine": MACHINE_ID, "pid": dead_pid(), "pstart": "0:0",
                                   "queues": ["q"]})
    started = time.monotonic()
    run_worker("box_1")
    assert job.status.hget() == "complete"
    assert time.monotonic() - started < 4  # not its hour-long lease
    assert conn.llen("blueque_reserved_tasks_q_box_1") == 0


def test_a_live_worker_with_the_same_id_keeps_its_tasks(conn):
    job = Queue.named("q").enqueue("x")
    take("q", listener="box_1", ttr=3600)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        earlier_record(conn, "box_1", {"machine": MACHINE_ID, "pid": other.pid,
                                       "pstart": process_start_time(other.pid),
                                       "queues": ["q"]})
        run_worker("box_1")
        assert job.status.hget() == "reserved"  # not taken from a worker that lives
    finally:
        other.kill()
        other.wait()


def test_an_unreadable_earlier_record_is_passed_over(conn):
    fresh = Queue.named("q").enqueue("x")
    earlier_record(conn, "box_1", {"machine": MACHINE_ID, "pid": "not a pid"})
    run_worker("box_1")
    assert fresh.status.hget() == "complete"
