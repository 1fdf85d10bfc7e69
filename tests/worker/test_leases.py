"""Long tasks survive crashes: leases, heartbeats, adoption, fencing, scheduling, cleaning."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import redis
from helpers import alive, dead_pid, kill, kill_task_processes, start_worker, wait_for
from jobs import RecordingJob, events

from limpyd_blueque import Job, Queue, Worker
from limpyd_blueque.connection.clients import safety_warnings
from limpyd_blueque.protocol.liveness import host_name
from limpyd_blueque.protocol.scripts import Reservation
from limpyd_blueque.upkeep.cleaning import deep_clean, light_clean

pytestmark = pytest.mark.timeout(90)

HOST = host_name()


def begins(conn, job):
    return [e for e in events(conn, job.pk.get()) if e["event"] == "begin"]


@pytest.fixture
def workers(redis_url):
    """Start `blueque-worker` processes; every one (and its task processes) is killed after."""
    started = []

    def start(*options):
        worker = start_worker(redis_url, "--queues=long", "--callback=jobs.slow_callback",
                              "--timeout=0.2", *options)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        kill(worker.pid)
        worker.wait()


@pytest.fixture(autouse=True)
def no_leftover_task_processes(conn):
    yield
    kill_task_processes(conn)


# -- leases ---------------------------------------------------------------------------------
def test_an_expired_lease_goes_back_to_pending_with_its_attempt_counted(database, conn):
    queue = Queue.named("q")
    job = queue.enqueue("x")
    queue.reserve("gone.host_1", ttr=0.2)
    assert light_clean(Queue) == {}  # not expired yet
    time.sleep(0.3)
    assert light_clean(Queue) == {job.pk.get(): "pending"}
    assert job.status.hget() == "pending"
    assert conn.lrange("blueque_pending_tasks_q", 0, -1) == [job.pk.get()]
    assert conn.llen("blueque_reserved_tasks_q_gone.host_1") == 0
    assert conn.zcard("blueque:leases:q") == 0
    queue.reserve("new.host_2")
    assert job.attempt.hget() == "2"


def test_a_task_that_used_its_attempts_fails_when_its_lease_expires(database, conn):
    queue = Queue.named("q")
    job = queue.enqueue("x")
    queue.reserve("gone.host_1", pid=5, ttr=0.1)
    time.sleep(0.2)
    assert light_clean(Queue, max_attempts=1) == {job.pk.get(): "failed"}
    assert job.status.hget() == "failed"
    assert job.error.hget() == "LeaseExpired: lease expired after 1 attempt(s)"
    assert conn.scard("blueque_started_tasks_q") == 0
    assert conn.lrange("blueque_failed_tasks_q", 0, -1) == [job.pk.get()]


def test_lease_length_comes_from_the_task_then_the_queue_then_the_worker(database, conn):
    queue = Queue.named("q")
    queue.configure(ttr=100)
    own = queue.enqueue("own")
    own.ttr.hset("10")
    from_queue = queue.enqueue("queue")
    now = time.time()
    queue.reserve("h_1", ttr=1000)
    queue.reserve("h_1", ttr=1000)
    assert conn.zscore("blueque:leases:q", own.pk.get()) == pytest.approx(now + 10, abs=2)
    assert conn.zscore("blueque:leases:q", from_queue.pk.get()) == pytest.approx(now + 100, abs=2)
    queue.configure(ttr=None)
    last = queue.enqueue("worker")
    queue.reserve("h_1", ttr=1000)
    assert conn.zscore("blueque:leases:q", last.pk.get()) == pytest.approx(now + 1000, abs=2)


def test_a_healthy_task_running_ten_times_its_ttr_is_never_taken_back(workers, database, conn):
    job = Queue.named("long").enqueue("3")
    workers("--ttr=0.3", "--heartbeat-interval=0.1", "--max-loops=1")
    # an eager cleaner runs beside it all along
    cleaner = workers("--ttr=0.3", "--clean-interval=0.05", "--max-loops=1")
    wait_for(lambda: job.status.hget() == "complete", timeout=20)
    assert len(begins(conn, job)) == 1
    assert job.attempt.hget() == "1"
    cleaner.send_signal(signal.SIGTERM)


# -- adoption -------------------------------------------------------------------------------
def test_killing_a_worker_keeps_its_task_running_and_the_next_worker_adopts_it(
        workers, database, conn):
    job = Queue.named("long").enqueue("2")
    first = workers("--ttr=1")
    child = wait_for(lambda: begins(conn, job))[0]["pid"]
    kill(first.pid)
    first.wait()
    assert alive(child)
    second = workers("--ttr=1", "--max-loops=1")
    wait_for(lambda: job.status.hget() == "complete", timeout=15)
    assert len(begins(conn, job)) == 1  # never run twice
    assert [e["event"] for e in events(conn, job.pk.get())] == ["begin", "end"]
    # the dead worker's listener was taken over
    wait_for(lambda: conn.smembers("blueque_listeners_long") == {f"{HOST}_{second.pid}"})
    assert conn.keys("blueque_reserved_tasks_long_*") == []
    assert conn.scard("blueque_started_tasks_long") == 0


def test_killing_a_worker_and_its_task_makes_the_next_worker_run_it_again(
        workers, database, conn):
    job = Queue.named("long").enqueue("1")
    first = workers("--ttr=1")
    child = wait_for(lambda: begins(conn, job))[0]["pid"]
    kill(first.pid)
    kill(child)
    first.wait()
    workers("--ttr=1", "--max-loops=1")
    wait_for(lambda: job.status.hget() == "complete", timeout=15)
    runs = begins(conn, job)
    assert runs[0]["pid"] == child and len(runs) == 2
    assert job.attempt.hget() == "2"


def test_a_reserved_task_of_a_dead_listener_is_run_by_the_next_worker(workers, database, conn):
    queue = Queue.named("long")
    job = queue.enqueue("0")
    dead = f"{HOST}_{dead_pid()}"
    queue.add_listener(dead)
    queue.reserve(dead)
    workers("--max-loops=1")
    wait_for(lambda: job.status.hget() == "complete", timeout=15)
    assert conn.sismember("blueque_listeners_long", dead) == 0
    assert conn.llen(f"blueque_reserved_tasks_long_{dead}") == 0


def test_a_reused_pid_is_not_taken_for_the_task_process(database, conn):
    # the task claims to run in this very process, but started at another time
    queue = Queue.named("long")
    job = queue.enqueue("0")
    dead = f"{HOST}_{dead_pid()}"
    queue.add_listener(dead)
    queue.reserve(dead, pid=os.getpid())
    from limpyd_blueque.protocol.liveness import process_start_time

    mark = process_start_time(os.getpid())
    job.pstart.hset(mark[:-1] + str((int(mark[-1]) + 1) % 10))  # started at another time
    worker = Worker("long", callback=lambda job, queue: "ran again", fork=False, max_loops=1,
                    timeout=0.2)
    worker.run()
    assert job.status.hget() == "complete"
    assert job.result.hget() == "ran again"


# -- fencing ----------------------------------------------------------------------------------
def test_a_frozen_worker_loses_its_task_and_its_late_result_is_refused(workers, database, conn):
    job = Queue.named("long").enqueue("2")
    frozen = workers("--ttr=0.5", "--heartbeat-interval=0.1")
    first_run = wait_for(lambda: begins(conn, job))[0]["pid"]
    frozen.send_signal(signal.SIGSTOP)
    workers("--ttr=0.5", "--clean-interval=0.1", "--max-loops=1")
    wait_for(lambda: len(begins(conn, job)) == 2, timeout=15)
    frozen.send_signal(signal.SIGCONT)
    # back from the freeze, the worker sees its lease lost and stops its task process
    wait_for(lambda: not alive(first_run), timeout=10)
    wait_for(lambda: job.status.hget() == "complete", timeout=15)
    ends = [e for e in events(conn, job.pk.get()) if e["event"] == "end"]
    assert [e["pid"] for e in ends] == [begins(conn, job)[1]["pid"]]
    assert job.attempt.hget() == "2"


def test_a_result_from_a_zombie_attempt_is_refused_and_reported(database, conn):
    queue = Queue.named("z")
    job = queue.enqueue({"n": 1})
    stale = RecordingJob.from_reservation(Reservation(job.pk.get(), "z", {"node": "old.host_1",
                                                                         "attempt": "1"}))
    queue.reserve("old.host_1", pid=1, ttr=0.05)
    time.sleep(0.1)
    light_clean(Queue)
    queue.reserve("new.host_2", pid=2)  # attempt 2
    worker = Worker("z", job_model=RecordingJob, listener_id="old.host_1")
    worker.job_success(stale, queue, "late")
    assert [e["event"] for e in events(conn, job.pk.get())] == ["on_skipped"]
    assert job.status.hget() == "started" and job.result.hget() is None
    assert Job.load(job.pk.get()).complete("fresh", listener_id="new.host_2", attempt=2)
    assert not Job.load(job.pk.get()).complete("again", listener_id="new.host_2", attempt=2)


# -- limits -----------------------------------------------------------------------------------
@pytest.mark.parametrize("fork", [True, False], ids=["forked", "in-process"])
def test_a_task_over_its_max_run_time_is_killed_and_failed(database, conn, fork):
    queue = Queue.named("w")
    job = queue.enqueue({"sleep": 30})
    job.max_run_time.hset("0.5")
    started = time.monotonic()
    Worker("w", job_model=RecordingJob, fork=fork, max_loops=1, timeout=0.2).run()
    assert time.monotonic() - started < 10
    assert job.status.hget() == "failed"
    assert job.error.hget().startswith("TimeLimitExceeded: the task ran longer than its "
                                       "maximum run time of 0.5 seconds")
    run = next(e for e in events(conn, job.pk.get()) if e["event"] == "run")
    assert alive(run["pid"]) is not fork  # a task process is killed; in-process, interrupted


def test_a_queue_max_run_time_applies_to_its_tasks(database, conn):
    queue = Queue.named("w")
    queue.configure(max_run_time=0.3)
    job = queue.enqueue({"sleep": 30})
    Worker("w", job_model=RecordingJob, max_loops=1, timeout=0.2).run()
    assert job.error.hget().startswith("TimeLimitExceeded")


def test_there_is_no_max_run_time_by_default(database):
    assert Worker("w").max_run_time is None


# -- scheduling -------------------------------------------------------------------------------
def test_due_tasks_move_to_pending_exactly_once_with_many_workers(database, conn):
    queue = Queue.named("s")
    jobs = [queue.schedule(i, time.time() + 0.2) for i in range(200)]
    time.sleep(0.3)
    barrier = threading.Barrier(4)

    def mover():
        barrier.wait()
        for _ in range(5):
            Queue.named("s").enqueue_due()

    threads = [threading.Thread(target=mover) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    pending = conn.lrange("blueque_pending_tasks_s", 0, -1)
    assert sorted(pending) == sorted(job.pk.get() for job in jobs)
    assert conn.zcard("blueque_scheduled_tasks_s") == 0


def test_an_idle_worker_schedules_within_its_interval(database, conn):
    queue = Queue.named("w")
    job = queue.schedule({"n": 1}, time.time() + 0.5)
    started = time.monotonic()
    Worker("w", job_model=RecordingJob, fork=False, max_loops=1, timeout=5,
           schedule_interval=0.1).run()
    assert job.status.hget() == "complete"
    assert time.monotonic() - started < 2


# -- cleaning and bad data ----------------------------------------------------------------------
def test_deep_clean_fixes_what_crashes_leave_and_reports_the_rest(database, conn):
    queue = Queue.named("d")
    lost = queue.enqueue("lost")
    conn.lrem("blueque_pending_tasks_d", 0, lost.pk.get())          # hash without list entry
    orphan = queue.enqueue("orphan")
    dead = f"{HOST}_{dead_pid()}"
    queue.add_listener(dead)
    queue.reserve(dead, pid=4)
    conn.zrem("blueque:leases:d", orphan.pk.get())                   # held, no lease, dead holder
    conn.lpush("blueque_pending_tasks_d", "ghost")                  # list entry without hash
    conn.lpush("blueque_failed_tasks_d", "ghost2")
    foreign = queue.enqueue("foreign")
    queue.add_listener("other.host_7")
    conn.lrem("blueque_pending_tasks_d", 0, foreign.pk.get())
    conn.lpush("blueque_reserved_tasks_d_other.host_7", foreign.pk.get())
    conn.hset(foreign.key, mapping={"status": "reserved", "node": "other.host_7"})  # reference-held
    conn.hset("blueque_task_weird", mapping={"status": "paused", "queue": "d"})

    report = deep_clean(Queue)
    assert (lost.pk.get(), "blueque_pending_tasks_d") in report.relisted
    assert report.recovered == {orphan.pk.get(): "pending"}
    assert report.indexed == [foreign.pk.get()]
    assert ("blueque_pending_tasks_d", "ghost") in report.dropped
    assert ("blueque_failed_tasks_d", "ghost2") in report.dropped
    assert report.unknown_status == [("weird", "paused")]
    assert report.listeners_removed == [("d", dead)]
    assert sorted(conn.lrange("blueque_pending_tasks_d", 0, -1)) == sorted(
        [lost.pk.get(), orphan.pk.get()])
    assert conn.zscore("blueque:leases:d", foreign.pk.get()) == float("inf")
    assert set(Job.collection(queue="d", status="reserved")) == {foreign.pk.get()}
    assert conn.hget("blueque_task_weird", "status") == "paused"   # left alone
    # a second pass finds nothing more to do
    again = deep_clean(Queue)
    assert (again.relisted, again.recovered, again.dropped, again.indexed) == ([], {}, [], [])


def test_deep_clean_and_claim_orphan_judge_listeners_by_the_one_liveness_rule(
        database, conn, redis_url):
    from limpyd_blueque import Client

    queue = Queue.named("d")
    beating = f"{HOST}_{dead_pid()}"      # its process is gone, but its worker still beats
    stopped = "far.example.com_7"           # a worker of ours that stopped beating
    foreign = "far.example.com_8"           # another client's listener: not known dead
    for listener in (beating, stopped, foreign):
        queue.add_listener(listener)
    conn.zadd("blueque:workers", {beating: time.time() + 60, stopped: time.time() - 1})
    queue.enqueue("held")
    queue.reserve(beating)
    client = Client(redis_url)
    assert client.get_listener("d").claim_orphan() is None
    client.database.connection.close()
    report = deep_clean(Queue)
    assert report.listeners_removed == [("d", stopped)]
    assert queue.listeners.smembers() >= {beating, foreign}


def test_blueque_clean_command_prints_what_it_did(redis_url, database, conn):
    import subprocess
    import sys

    queue = Queue.named("d")
    queue.enqueue("x")
    queue.reserve("gone.host_1", ttr=0.05)
    conn.lpush("blueque_pending_tasks_d", "ghost")
    time.sleep(0.1)
    result = subprocess.run([sys.executable, "-m", "limpyd_blueque.admin",
                             f"--redis-url={redis_url}", "clean", "--deep"],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stderr
    assert "entries dropped (no such task, or another status): 1" in result.stdout
    assert "tasks taken back from dead holders: 0" in result.stdout
    assert "expired leases taken back: 1" in result.stdout


def test_a_task_that_cannot_be_decoded_fails_and_the_worker_goes_on(database, conn, redis_url):
    import redis as redis_py

    queue = Queue.named("w")
    bad = queue.enqueue("placeholder")
    redis_py.Redis.from_url(redis_url).hset(bad.key, "parameters", b"\xff\xfe not utf-8")
    good = queue.enqueue({"n": 2})
    Worker("w", job_model=RecordingJob, fork=False, max_loops=2, timeout=0.2).run()
    assert bad.status.hget() == "failed"
    assert bad.error.hget() == ("InvalidParameters: task parameters are not valid UTF-8 text: "
                                "the task cannot be decoded")
    assert good.status.hget() == "complete"


def test_redis_settings_that_lose_tasks_are_warned_about(conn):
    assert any("persistence is off" in w for w in safety_warnings(conn))
    policy = conn.config_get("maxmemory-policy")["maxmemory-policy"]
    conn.config_set("maxmemory-policy", "allkeys-lru")
    conn.config_set("appendonly", "yes")
    try:
        warnings = safety_warnings(conn)
        assert any("allkeys-lru" in w for w in warnings)
        assert not any("persistence" in w for w in warnings)
    finally:
        conn.config_set("maxmemory-policy", policy)
        conn.config_set("appendonly", "no")


def test_reindex_lists_tasks_another_client_reserved(database, conn):
    # what the reference client leaves after reserving: no lease entry
    conn.hset("blueque_task_ref", mapping={"status": "reserved", "queue": "r", "node": "h_1",
                                           "parameters": "", "created": 1, "updated": 2})
    conn.zincrby("blueque_queues", 0, "r")
    conn.lpush("blueque_reserved_tasks_r_h_1", "ref")
    assert set(Job.collection(queue="r", status="reserved")) == set()
    from limpyd_blueque.upkeep.cleaning import reindex

    report = reindex(Queue)
    assert report.indexed == ["ref"]
    assert set(Job.collection(queue="r", status="reserved")) == {"ref"}
    assert conn.zscore("blueque:leases:r", "ref") == float("inf")
    assert light_clean(Queue) == {}  # an open lease is never taken back
    assert reindex(Queue).indexed == []


# -- what the review of the lease model found ---------------------------------------------
def test_a_queue_lease_shorter_than_the_worker_heartbeat_is_renewed_in_time(workers, database,
                                                                             conn):
    queue = Queue.named("long")
    queue.configure(ttr=0.6)  # the worker's own ttr stays 60 s: a heartbeat every 20 s
    job = queue.enqueue("2.5")
    workers("--max-loops=1")
    workers("--clean-interval=0.1", "--max-loops=1")  # an eager cleaner beside it
    wait_for(lambda: job.status.hget() == "complete", timeout=15)
    assert len(begins(conn, job)) == 1
    assert job.attempt.hget() == "1"


def test_non_numeric_lease_fields_written_on_a_running_task_count_as_unset(database, conn):
    queue = Queue.named("q")
    job = queue.enqueue("x")
    now = time.time()
    queue.reserve("gone.host_1", pid=3, ttr=0.1)
    job.ttr.hset("60s")
    job.max_attempts.hset("five")
    assert conn.zscore("blueque:leases:q", job.pk.get()) == pytest.approx(now + 0.1, abs=1)
    time.sleep(0.2)
    assert light_clean(Queue, max_attempts=None) == {job.pk.get(): "pending"}
    assert job.status.hget() == "pending"


@pytest.mark.parametrize("field, value", [("ttr", "60s"), ("max_attempts", "five"),
                                          ("max_run_time", "abc"), ("eta", "abc")])
def test_a_waiting_task_whose_number_field_does_not_parse_is_quarantined(database, conn,
                                                                          field, value):
    queue = Queue.named("q")
    job = queue.enqueue("x")
    good = queue.enqueue("y")
    conn.hset(f"blueque_task_{job.pk.get()}", field, value)
    passed = []
    taken, _ = Queue.reserve_from(["q"], "host_1", pid=3, report=passed.append)
    assert taken is not None and taken.task_id == good.task_id  # the queue goes on
    ((queue_name, problem),) = passed[0].quarantined.values()
    assert queue_name == "q" and f"{field} field" in problem and value in problem
    assert job.status.hget() == "failed"
    assert conn.hget(f"blueque_task_{job.pk.get()}", "error").startswith("Quarantined: ")
    assert job.pk.get() in conn.lrange("blueque_failed_tasks_q", 0, -1)


def test_killed_children_are_all_recorded_even_when_a_hook_fails(database, conn):
    from jobs import FragileHookJob

    queue = Queue.named("w")
    first, second = queue.enqueue({"kill": True}), queue.enqueue({"kill": True})
    worker = Worker("w", job_model=FragileHookJob, concurrency=2, max_loops=2, timeout=0.2)
    worker.run()
    assert (first.status.hget(), second.status.hget()) == ("failed", "failed")
    assert len(worker.tasks) == 0


def test_detach_applies_to_stop_signals_only_a_worker_ending_by_itself_waits(database, conn):
    queue = Queue.named("w")
    job = queue.enqueue({"sleep": 0.5, "n": 1})
    Worker("w", job_model=RecordingJob, on_terminate="detach", max_loops=1, timeout=0.2).run()
    assert job.status.hget() == "complete"
    assert conn.smembers("blueque_listeners_w") == set()


def test_the_drop_in_listener_gets_a_lease_that_never_expires(database, conn, redis_url):
    from limpyd_blueque import Client

    client = Client(redis_url)
    Queue.named("dropin").configure(ttr=0.1)
    task_id = client.get_queue("dropin").enqueue("x")
    client.get_listener("dropin").listen()
    assert conn.zscore("blueque:leases:dropin", task_id) == float("inf")
    time.sleep(0.2)
    assert light_clean(Queue) == {}


def test_a_waiting_task_whose_queue_field_is_no_queue_name_is_quarantined(redis_url, database,
                                                                          conn):
    raw = redis.Redis.from_url(redis_url)
    queue = Queue.named("q")
    job = queue.enqueue("x")
    raw.hset(f"blueque_task_{job.pk.get()}", "queue", b"q\xff")  # not UTF-8: waits forever
    passed = []
    assert Queue.reserve_from(["q"], "host_1", pid=3, report=passed.append) == (None, None)
    ((queue_name, problem),) = passed[0].quarantined.values()
    assert queue_name == "q" and "is not a queue name" in problem
    assert conn.hget(f"blueque_task_{job.pk.get()}", "status") == "failed"
    assert job.pk.get() in conn.lrange("blueque_failed_tasks_q", 0, -1)
