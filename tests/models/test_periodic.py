"""Periodic tasks: declared, listed and removed with the models and the `blueque` command;
each tick enqueued once, whatever the number of workers; missed ticks run once; no overlap
unless asked."""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone

import pytest
from helpers import kill, start_worker, wait_for
from jobs import events

from limpyd_blueque import (
    ConfigurationError,
    InvalidName,
    InvalidParameters,
    ProtocolError,
    Queue,
)
from limpyd_blueque.models.periodic import STILL_RUNS, catch_up, tick_due
from limpyd_blueque.worker.scheduling import DueTasks

LISTENER = "worker.example.com_4242"
HASH, DUE = "blueque:periodic:jobs", "blueque:periodic_due:jobs"


@pytest.fixture
def queue(database):
    return Queue.named("jobs")


class Log:
    """Collects what the ticks log, as `DueTasks` and `tick_due` call it."""

    def __init__(self):
        self.lines = []

    def __call__(self, message, level=logging.INFO):
        self.lines.append((level, message))

    def at(self, level):
        return [message for found, message in self.lines if found == level]


def tick(queue, now):
    log = Log()
    return tick_due(queue.scripts(), queue.pk.get(), log, now=now), log


def periodic_tasks(conn):
    """Every task hash with a `periodic` field."""
    found = [conn.hgetall(key) for key in conn.scan_iter("blueque_task_*")]
    return sorted((task for task in found if "periodic" in task),
                  key=lambda task: float(task["periodic_tick"]))


def definition(conn, name):
    return json.loads(conn.hget(HASH, name))


# -- declaring, listing, removing -----------------------------------------------------------
def test_every_seconds_stores_the_definition_and_the_first_tick(queue, conn):
    before = time.time()
    task = queue.every(60, {"report": "daily"}, name="reports")
    assert definition(conn, "reports") == {
        "schedule": 60, "parameters": '{"report":"daily"}', "overlap": False,
        "last_task": None, "last_tick": None}
    due = conn.zscore(DUE, "reports")
    assert before + 60 <= due <= time.time() + 60
    assert (task.queue, task.name, task.schedule, task.next_tick) == ("jobs", "reports", 60, due)
    assert conn.zscore("blueque_queues", "jobs") == 0  # listed, as a queue with tasks is
    assert conn.llen("blueque_pending_tasks_jobs") == 0  # nothing enqueued before the tick


def test_every_cron_ticks_on_the_next_matching_minute_in_utc(queue, conn):
    task = queue.every("*/5  * * * *", "x", name="five", overlap=True)
    now = time.time()
    assert task.schedule == "*/5 * * * *"  # whitespace normalized
    assert now < task.next_tick <= now + 300
    assert task.next_tick % 300 == 0
    assert definition(conn, "five")["overlap"] is True
    daily = queue.every("0 3 * * *", "x", name="nightly").next_tick
    assert datetime.fromtimestamp(daily, timezone.utc).strftime("%H:%M:%S") == "03:00:00"
    assert queue.every("@hourly", "x", name="hourly").next_tick % 3600 == 0


def test_periodic_tasks_are_listed_by_name_with_their_next_tick(queue, conn):
    queue.every(30, "b", name="beta")
    queue.every("0 0 1 1 *", "a", name="alpha")
    listed = queue.periodic_tasks()
    assert [(t.name, t.schedule, t.parameters) for t in listed] == [
        ("alpha", "0 0 1 1 *", "a"), ("beta", 30, "b")]
    assert [t.next_tick for t in listed] == [conn.zscore(DUE, "alpha"), conn.zscore(DUE, "beta")]
    assert Queue.named("other").periodic_tasks() == []


def test_declaring_again_keeps_the_next_tick_and_last_run_unless_the_schedule_changes(
        queue, conn):
    first = queue.every(60, "v1", name="p")
    count, _ = tick(queue, first.next_tick + 0.5)
    assert count == 1
    ticked = queue.periodic_tasks()[0]
    again = queue.every(60, "v2", name="p", overlap=True)
    assert (again.next_tick, again.last_task) == (ticked.next_tick, ticked.last_task)
    assert (again.parameters, again.overlap) == ("v2", True)
    changed = queue.every(3600, "v3", name="p")
    assert changed.next_tick == pytest.approx(time.time() + 3600, abs=5)
    assert changed.last_task == ticked.last_task


def test_remove_periodic_removes_the_definition_and_the_tick(queue, conn):
    queue.every(60, "x", name="p")
    queue.every(60, "y", name="q")
    assert queue.remove_periodic("p") is True
    assert queue.remove_periodic("p") is False
    assert conn.hkeys(HASH) == ["q"] and conn.zrange(DUE, 0, -1) == ["q"]


@pytest.mark.parametrize("schedule", [
    "* * *", "* * * * * *", "61 * * * *", "0 0 31 2 *", "", "   ", "every minute", "@often",
    "*/0 * * * *", "60", "x" * 300,
])
def test_an_invalid_cron_expression_is_refused_and_writes_nothing(queue, conn, schedule):
    with pytest.raises(ConfigurationError, match="cron expression"):
        queue.every(schedule, "x", name="p")
    assert conn.keys("*") == []


@pytest.mark.parametrize("interval", [0, -1, -0.5, math.nan, math.inf, 10**10, True, None, [60]])
def test_a_bad_interval_is_refused_and_writes_nothing(queue, conn, interval):
    with pytest.raises(ConfigurationError, match="periodic interval"):
        queue.every(interval, "x", name="p")
    assert conn.keys("*") == []


@pytest.mark.parametrize("name", ["", "a b", "a:b", "x*", "é", "x" * 201, None, 7])
def test_a_bad_name_is_refused_and_writes_nothing(queue, conn, name):
    with pytest.raises(InvalidName, match="periodic task name"):
        queue.every(60, "x", name=name)
    assert conn.keys("*") == []


def test_bad_parameters_or_overlap_are_refused_and_write_nothing(queue, conn):
    with pytest.raises(InvalidParameters):
        queue.every(60, b"bytes", name="p")
    with pytest.raises(InvalidParameters):
        queue.every(60, {1, 2}, name="p")
    with pytest.raises(ConfigurationError, match="overlap"):
        queue.every(60, "x", name="p", overlap="yes")
    assert conn.keys("*") == []


def test_a_cron_expression_without_cronsim_says_which_extra_to_install(
        queue, conn, monkeypatch):
    monkeypatch.setitem(sys.modules, "cronsim", None)  # as if it were not installed
    with pytest.raises(ConfigurationError, match=r"limpyd-blueque\[cron\]"):
        queue.every("* * * * *", "x", name="p")
    assert conn.keys("*") == []
    assert queue.every(60, "x", name="p").schedule == 60  # intervals need nothing


# -- ticking ----------------------------------------------------------------------------------
def test_one_tick_enqueues_exactly_one_pending_task(queue, conn):
    declared = queue.every(10, {"n": 1}, name="p")
    due = declared.next_tick
    assert tick(queue, due - 0.1)[0] == 0  # not due yet
    count, log = tick(queue, due + 0.1)
    assert count == 1
    [task] = periodic_tasks(conn)
    task_id = conn.lindex("blueque_pending_tasks_jobs", 0)
    assert conn.llen("blueque_pending_tasks_jobs") == 1
    assert conn.hgetall(f"blueque_task_{task_id}") == task
    assert (task["status"], task["queue"], task["parameters"], task["periodic"]) == (
        "pending", "jobs", '{"n":1}', "p")
    assert float(task["periodic_tick"]) == due
    assert task["created"] == task["updated"]
    assert definition(conn, "p")["last_task"] == task_id
    assert conn.zscore(DUE, "p") == due + 10
    assert any(task_id in line for line in log.at(logging.DEBUG))
    assert tick(queue, due + 0.1)[0] == 0  # the same tick is not enqueued twice


def test_two_ticks_with_the_same_due_time_enqueue_one_task(queue, conn):
    """The compare-and-set: two workers read the same due time; the second one loses."""
    due = queue.every(10, "x", name="p").next_tick
    seen = conn.hget(HASH, "p")
    scripts = queue.scripts()

    def attempt(task_id):
        return scripts.upkeep.tick("jobs", "p", seen=seen, due=due, next_due=due + 10,
                            task_id=task_id, parameters="x", tick=due, after=seen,
                            now=due, still_runs=STILL_RUNS)

    assert attempt("first") == ("ticked", "first")
    assert attempt("second") == ("raced", "")
    assert [task["periodic"] for task in periodic_tasks(conn)] == ["p"]
    assert conn.lrange("blueque_pending_tasks_jobs", 0, -1) == ["first"]


def test_without_overlap_a_tick_is_skipped_while_the_previous_run_waits_or_runs(queue, conn):
    due = queue.every(10, "x", name="p").next_tick
    assert tick(queue, due)[0] == 1
    count, log = tick(queue, due + 10)  # its run is still pending
    assert count == 0 and len(periodic_tasks(conn)) == 1
    assert "still pending" in log.at(logging.INFO)[0]
    assert conn.zscore(DUE, "p") == due + 20  # skipped, not retried until the next tick
    job = queue.reserve(LISTENER)
    job.start(LISTENER, os.getpid())
    count, log = tick(queue, due + 20)
    assert count == 0 and "still started" in log.at(logging.INFO)[0]
    assert job.complete("done") is True
    assert tick(queue, due + 30)[0] == 1  # resumes once it finished
    ticks = [float(task["periodic_tick"]) for task in periodic_tasks(conn)]
    assert ticks == [due, due + 30]


def test_with_overlap_a_tick_runs_while_the_previous_run_waits(queue, conn):
    due = queue.every(10, "x", name="p", overlap=True).next_tick
    assert tick(queue, due)[0] == 1
    assert tick(queue, due + 10)[0] == 1
    assert len(periodic_tasks(conn)) == 2


def test_missed_interval_ticks_run_once_and_the_others_are_logged_as_skipped(queue, conn):
    due = queue.every(10, "x", name="p").next_tick
    count, log = tick(queue, due + 35)  # no worker ran for the ticks at +0, +10, +20, +30
    assert count == 1
    [task] = periodic_tasks(conn)
    assert float(task["periodic_tick"]) == due + 30  # the latest tick past
    assert conn.zscore(DUE, "p") == due + 40  # the next one, in the future
    [warning] = log.at(logging.WARNING)
    assert "3 missed tick(s) skipped" in warning


def test_missed_cron_ticks_run_once_and_the_others_are_logged_as_skipped(queue, conn):
    due = queue.every("*/5 * * * *", "x", name="p").next_tick
    count, log = tick(queue, due + 2 * 3600 + 1)
    assert count == 1
    [task] = periodic_tasks(conn)
    assert float(task["periodic_tick"]) == due + 2 * 3600
    assert conn.zscore(DUE, "p") == due + 2 * 3600 + 300
    assert "24 missed tick(s) skipped" in log.at(logging.WARNING)[0]


def test_catch_up_rules():
    assert catch_up(10, 100.0, 100.0) == (100.0, 0, 110.0)
    assert catch_up(10, 100.0, 109.9) == (100.0, 0, 110.0)
    assert catch_up(10, 100.0, 130.0) == (130.0, 3, 140.0)
    hour = 1_800_000_000 - 1_800_000_000 % 3600
    assert catch_up("0 * * * *", hour, hour + 10) == (hour, 0, hour + 3600)
    assert catch_up("0 * * * *", hour, hour + 3600) == (hour + 3600, 1, hour + 7200)


def test_a_queue_whose_periodic_keys_hold_another_type_is_logged_not_a_crash(queue, conn):
    conn.set(DUE, "not a sorted set")
    log = Log()
    due = DueTasks([queue], interval=1, log=log)
    assert due.move() == 0
    assert "periodic tasks not ticked" in log.at(logging.ERROR)[0]
    with pytest.raises(ProtocolError):
        queue.every(60, "x", name="p")
    with pytest.raises(ProtocolError):
        queue.periodic_tasks()
    assert conn.keys("*") == [DUE]


def test_an_unreadable_definition_is_logged_and_the_others_tick(queue, conn):
    due = queue.every(10, "x", name="good").next_tick
    conn.hset(HASH, "bad", "{not json")
    conn.zadd(DUE, {"bad": due, "stray": due})  # "stray": due, but defined nowhere
    count, log = tick(queue, due)
    assert count == 1
    assert "periodic task bad not ticked" in log.at(logging.ERROR)[0]
    assert conn.zscore(DUE, "stray") is None  # dropped
    assert conn.zscore(DUE, "bad") == due  # left for an operator: `blueque periodic remove`


# -- the `blueque` command --------------------------------------------------------------------
def admin(redis_url, *arguments):
    return subprocess.run([sys.executable, "-m", "limpyd_blueque.admin",
                           f"--redis-url={redis_url}", "periodic", *arguments],
                          capture_output=True, text=True, timeout=30)


def test_blueque_periodic_lists_and_removes(queue, redis_url, conn):
    queue.every("0 3 * * *", "x", name="nightly")
    Queue.named("other").every(90, "y", name="often", overlap=True)
    listed = admin(redis_url, "list")
    assert listed.returncode == 0, listed.stderr
    nightly, often = listed.stdout.splitlines()
    assert nightly.startswith("jobs nightly schedule='0 3 * * *' next=")
    assert "T03:00:00+00:00 overlap=no last_task=-" in nightly
    assert often.startswith("other often schedule=90s next=") and "overlap=yes" in often
    assert admin(redis_url, "list", "--queue=other").stdout.splitlines() == [often]
    removed = admin(redis_url, "remove", "jobs", "nightly")
    assert removed.returncode == 0 and conn.hkeys(HASH) == []
    again = admin(redis_url, "remove", "jobs", "nightly")
    assert again.returncode == 1
    assert again.stderr.strip() == "blueque: error: no periodic task 'nightly' in queue 'jobs'"


def test_blueque_periodic_mistakes_are_one_line(queue, redis_url, conn):
    bad_name = admin(redis_url, "remove", "jobs", "a:b")
    assert bad_name.returncode == 2 and len(bad_name.stderr.splitlines()) == 1
    assert "invalid periodic task name" in bad_name.stderr
    conn.set(DUE, "x")
    conn.hset("blueque:periodic:other", "p", '{"schedule":"\\u001b[31m"}')
    conn.zadd("blueque_queues", {"jobs": 0, "other": 0})
    broken = admin(redis_url, "list")
    assert broken.returncode == 1 and "Traceback" not in broken.stderr
    assert len(broken.stderr.splitlines()) == 2  # one line per broken queue
    assert "\x1b" not in broken.stderr


# -- three workers ----------------------------------------------------------------------------
def test_three_workers_enqueue_each_tick_exactly_once_and_run_it(queue, redis_url, conn):
    workers = [start_worker(redis_url, "--queues=jobs", "--callback=jobs.callback", "--no-fork",
                            "--timeout=0.2", "--schedule-interval=0.05")
               for _ in range(3)]
    try:
        wait_for(lambda: conn.scard("blueque_listeners_jobs") == 3, timeout=20)
        first = queue.every(0.5, {"tick": True}, name="half").next_tick
        wait_for(lambda: definition(conn, "half")["last_tick"] == first + 1.5, timeout=15)
        queue.remove_periodic("half")  # ticks at +0, +0.5, +1, +1.5 (more on a slow machine)
        tasks = periodic_tasks(conn)
        ids = list(conn.scan_iter("blueque_task_*"))
        wait_for(lambda: all(conn.hget(key, "status") == "complete" for key in ids), timeout=10)
    finally:
        for worker in workers:
            kill(worker.pid, signal.SIGTERM)
        for worker in workers:
            try:
                worker.wait(timeout=10)
            except subprocess.TimeoutExpired:
                kill(worker.pid)
                worker.wait()
    ticks = [float(task["periodic_tick"]) for task in tasks]
    assert len(ticks) >= 4
    assert ticks == [first + n * 0.5 for n in range(len(ticks))]  # each once, none missed
    ran = [entry["task"] for entry in events(conn) if entry["event"] == "callback"]
    assert sorted(ran) == sorted(key.removeprefix("blueque_task_") for key in ids)
