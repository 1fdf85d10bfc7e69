"""The operator's `blueque` subcommands, run as users run them: real processes on the tests'
Redis, with tasks made, run and failed by the library. Each table is read for its ids,
statuses and counts, each `--json` for its exact shape (docs/admin.rst), and each mistake
for its one line on stderr."""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta, timezone

import pytest
from helpers import kill_task_processes, script, signals_scene, start_worker, wait_for
from jobs import RecordingJob

from limpyd_blueque import Job, Queue, Worker
from limpyd_blueque.operations.overview import live_workers

pytestmark = pytest.mark.timeout(60)

Q = "adm"


#: the installed `blueque` console script, as operators run it
ADMIN = script("blueque", "limpyd_blueque.admin")


def blueque(redis_url, *args, stdin=subprocess.DEVNULL, timeout=30):
    return subprocess.run([*ADMIN, f"--redis-url={redis_url}", *args], capture_output=True,
                          text=True, timeout=timeout, stdin=stdin)


def blueques(redis_url, *commands):
    """The results of several read-only commands, run at the same time (each process spends
    most of its life importing)."""
    with ThreadPoolExecutor(max_workers=len(commands)) as pool:
        return list(pool.map(lambda args: blueque(redis_url, *args), commands))


def document(result, code=0):
    assert result.returncode == code, result.stderr
    return json.loads(result.stdout)


def assert_one_line(result, code, text):
    assert result.returncode == code, (result.stdout, result.stderr)
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert text in result.stderr
    assert "Traceback" not in result.stderr


# -- shapes of the JSON documents (docs/admin.rst) --------------------------------------------
NUMBER = (int, float)
OPTIONAL_NUMBER = (int, float, type(None))
OPTIONAL_STR = (str, type(None))
SKIPPED = [{"key": str, "problem": str}]
COUNTS = {"complete": int, "failed": int, "canceled": int}
STATUSES = ("waiting", "scheduled", "pending", "reserved", "started", "complete", "failed",
            "canceled", "buried", "expired", "total")
QUEUE = {"queue": str, "tasks": {name: int for name in STATUSES}, "stalled": int,
         "listeners": int, "oldest_waiting": ({"id": str, "age": OPTIONAL_NUMBER}, None),
         "finished": {"last_minute": COUNTS, "last_hour": COUNTS}, "paused": bool,
         "waiting": int, "running": int, "held_back": int}
PROGRESS = {"done": NUMBER, "total": OPTIONAL_NUMBER, "fraction": OPTIONAL_NUMBER,
            "message": OPTIONAL_STR, "moved_at": str, "time_left": OPTIONAL_NUMBER,
            "attempt": int}
TASK = {"id": str, "status": str, "queue": str, "created": OPTIONAL_STR,
        "age": OPTIONAL_NUMBER, "started": OPTIONAL_STR, "attempt": int, "node": OPTIONAL_STR,
        "progress": (PROGRESS, None), "stalled": bool, "cancel_requested": bool}
ERROR = {"pk": str, "queue": str, "job": str, "identifier": OPTIONAL_STR, "at": str,
         "type": str, "code": OPTIONAL_STR, "message": str, "attempt": (int, type(None))}
WORKER = {"id": str, "host": str, "pid": int, "queues": [str],
          "running": [{"id": str, "queue": str}], "since": str, "last_beat": str,
          "alive_until": str, "concurrency": int, "running_count": int,
          "load": (float, int, type(None)), "state": str, "paused": [str], "idle": bool,
          "stopping": bool}
RECORD = {"id": str, "at": str, "fields": dict,
          "attempts": {"attempt": int, "uncounted": int, "max_attempts": (int, type(None)),
                       "next_at": OPTIONAL_NUMBER},
          "progress": (PROGRESS, None),
          "checkpoint": ({"size": int, "attempt": int, "at": str}, None),
          "lease": ({"holder": OPTIONAL_STR, "expires_at": OPTIONAL_STR,
                     "expires_in": OPTIONAL_NUMBER}, None),
          "errors": [ERROR], "skipped": SKIPPED, "peak_rss": (int, type(None))}
RESULTS = [{"id": str, "outcome": str, "detail": OPTIONAL_STR}]
REPORT = {"relisted": [{"id": str, "key": str}], "indexed": [str], "recovered": dict,
          "dropped": [{"key": str, "member": str}],
          "unknown_status": [{"id": str, "status": OPTIONAL_STR}],
          "listeners_removed": [{"queue": str, "listener": str}],
          "broken": [{"key": str, "problem": str}], "retained": int}


def assert_shape(value, shape, where="document"):
    """`value` has exactly the keys of `shape` (a dict), each of the type it gives; a list
    shape `[item]` checks every item; a tuple lists the shapes allowed (None: null)."""
    if isinstance(shape, tuple) and any(isinstance(s, (dict, list)) or s is None
                                        for s in shape):
        if value is None and None in shape:
            return
        shape = next(s for s in shape if s is not None)
    if isinstance(shape, dict):
        assert isinstance(value, dict), f"{where}: {value!r}"
        assert set(value) == set(shape), f"{where}: keys {sorted(value)} != {sorted(shape)}"
        for key, item in shape.items():
            assert_shape(value[key], item, f"{where}.{key}")
    elif isinstance(shape, list):
        assert isinstance(value, list), f"{where}: {value!r}"
        for index, item in enumerate(value):
            assert_shape(item, shape[0], f"{where}[{index}]")
    else:
        assert isinstance(value, shape) and not (isinstance(value, bool) and shape is int), (
            f"{where}: {value!r} is not {shape}")


# -- a queue with tasks in several states ---------------------------------------------------------
@pytest.fixture
def scene(database, conn):
    """Queue `adm`: 3 complete tasks, 2 failed (each with a stored error), then 2 pending
    (one of priority 5) and 1 scheduled; the ids by kind."""
    queue = Queue.named(Q)
    done = [queue.enqueue({"n": n}).task_id for n in range(3)]
    failed = [queue.enqueue({"fail": f"boom {n}", "code": f"E4{n}"}).task_id for n in range(2)]
    Worker(Q, job_model=RecordingJob, fork=False, max_loops=5, timeout=0.2,
           requeue_times=0).run()
    pending = [queue.enqueue("first").task_id, queue.enqueue("urgent", priority=5).task_id]
    scheduled = queue.enqueue("later", delay=3600).task_id
    return {"complete": done, "failed": failed, "pending": pending, "scheduled": scheduled}


def test_stats_counts_each_status_listeners_oldest_and_recent_finishes(redis_url, scene):
    as_json, table = blueques(redis_url, ["stats", "--json"], ["stats", Q])
    stats = document(as_json)
    assert_shape(stats, {"at": str, "queues": [QUEUE], "skipped": SKIPPED})
    (row,) = stats["queues"]
    assert row["queue"] == Q
    assert {name: row["tasks"][name] for name in ("pending", "scheduled", "complete",
                                                  "failed", "total")} == {
        "pending": 2, "scheduled": 1, "complete": 3, "failed": 2, "total": 8}
    assert (row["stalled"], row["listeners"]) == (0, 0)
    assert (row["waiting"], row["running"], row["held_back"]) == (2, 0, 0)
    assert row["oldest_waiting"]["id"] == scene["pending"][0]  # first in line, enqueued first
    assert row["finished"]["last_hour"] == {"complete": 3, "failed": 2, "canceled": 0}
    assert all(row["finished"]["last_minute"][name] <= row["finished"]["last_hour"][name]
               for name in COUNTS)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0] == "tasks by status"
    assert lines[1].split() == ["queue", *STATUSES]
    assert lines[3].split() == [Q, "0", "1", "2", "0", "0", "3", "2", "0", "0", "0", "8"]
    activity = lines[lines.index("activity") + 3].split()  # title, header, rule, row
    assert (activity[:3], activity[-1]) == ([Q, "0", "0"], "3/2")  # last hour: done/failed
    assert "\x1b" not in table.stdout  # no colour off a terminal


def test_stats_give_each_queue_its_tasks_waiting_running_and_held_back(redis_url, database):
    waiting, running, held_back = signals_scene("sig")
    (row,) = document(blueque(redis_url, "stats", "sig", "--json"))["queues"]
    assert (row["waiting"], row["running"], row["held_back"]) == (waiting, running, held_back)
    # pending counts the tasks held back too; running, the reserved and started ones
    assert (row["tasks"]["pending"], row["tasks"]["reserved"], row["tasks"]["started"]) == (
        waiting + held_back, 1, 1)


def test_stats_count_a_queue_at_its_own_limit_as_all_held_back(redis_url, database):
    queue = Queue.named("whole")
    queue.set_limit(None, max_running=1)
    queue.enqueue_many([1, 2, 3])
    assert Queue.reserve_from(["whole"], "host_1")[0] is not None
    (row,) = document(blueque(redis_url, "stats", "whole", "--json"))["queues"]
    assert (row["waiting"], row["running"], row["held_back"]) == (0, 1, 2)


def test_held_groups_or_orders_of_another_type_are_skipped_and_count_none(redis_url, scene,
                                                                          conn):
    keys = Job.keys()
    conn.set(keys.groups_held(Q), "not a sorted set")
    conn.set(keys.worker_orders, "not a hash")
    conn.zadd(keys.workers, {"box_1": time.time() + 60})
    stats, workers = (document(result) for result in blueques(
        redis_url, ["stats", Q, "--json"], ["workers", "--json"]))
    (row,) = stats["queues"]
    assert (row["waiting"], row["held_back"]) == (2, 0)
    assert [item["key"] for item in stats["skipped"]] == [keys.groups_held(Q)]
    (worker,) = workers["workers"]
    assert (worker["idle"], worker["stopping"]) == (True, False)
    assert [item["key"] for item in workers["skipped"]] == [keys.worker_orders]


def test_tasks_lists_rows_by_status_and_queue_within_a_limit(redis_url, scene):
    everything, limited, table = blueques(
        redis_url, ["tasks", "--json"], ["tasks", "--limit", "2", "--status", "complete", "--json"],
        ["tasks", "--queue", Q, "--status", "failed"])
    listing = document(everything)
    assert_shape(listing, {"at": str, "tasks": [TASK], "skipped": SKIPPED})
    by_id = {row["id"]: row["status"] for row in listing["tasks"]}
    assert by_id == {**dict.fromkeys(scene["complete"], "complete"),
                     **dict.fromkeys(scene["failed"], "failed"),
                     **dict.fromkeys(scene["pending"], "pending"),
                     scene["scheduled"]: "scheduled"}
    assert next(row for row in listing["tasks"] if row["id"] in scene["failed"])["attempt"] == 1
    limited = document(limited)
    assert len(limited["tasks"]) == 2
    assert {row["status"] for row in limited["tasks"]} == {"complete"}
    assert table.returncode == 0, table.stderr
    rows = [line.split() for line in table.stdout.splitlines()[3:] if line.strip()]
    assert sorted(row[0] for row in rows) == sorted(scene["failed"])
    # id, status, queue, created (ISO 8601 and its age: "(12.3s ago)"), attempt
    assert {(row[1], row[2], row[6]) for row in rows} == {("failed", Q, "1")}


def test_inspect_shows_every_field_attempts_and_stored_errors(redis_url, scene):
    task_id = scene["failed"][0]
    as_json, table = blueques(redis_url, ["inspect", task_id, "--json"], ["inspect", task_id])
    record = document(as_json)
    assert_shape(record, RECORD)
    assert record["fields"]["status"] == "failed" and record["fields"]["queue"] == Q
    assert record["attempts"] == {"attempt": 1, "uncounted": 0, "max_attempts": None,
                                  "next_at": None}
    assert (record["lease"], record["progress"], record["checkpoint"]) == (None, None, None)
    (error,) = record["errors"]
    assert (error["job"], error["type"], error["code"], error["message"]) == (
        task_id, "ValueError", "E40", "boom 0")
    assert table.returncode == 0, table.stderr
    assert f"task {task_id}" in table.stdout
    assert "ValueError: boom 0" in table.stdout  # the error field
    assert "ValueError   E40" in table.stdout  # the stored error's row


def test_errors_are_filtered_through_the_error_indexes(redis_url, scene):
    today = datetime.now(timezone.utc)
    later = (today + timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    found, one, none, table = blueques(
        redis_url, ["errors", "--type", "ValueError", "--since", today.strftime("%Y-%m-%d"),
                    "--json"],
        ["errors", "--code", "E41", "--queue", Q, "--json"], ["errors", "--since", later, "--json"],
        ["errors", "--job", scene["failed"][0], "--limit", "1"])
    found = document(found)
    assert_shape(found, {"errors": [ERROR]})
    assert sorted(row["job"] for row in found["errors"]) == sorted(scene["failed"])
    assert [row["job"] for row in document(one)["errors"]] == [scene["failed"][1]]
    assert document(none)["errors"] == []  # its day matches, its time does not
    assert table.returncode == 0, table.stderr
    assert "boom 0" in table.stdout and "boom 1" not in table.stdout


def test_requeue_puts_failed_tasks_back_by_id_or_all_of_a_queue(redis_url, scene, conn):
    first, second = scene["failed"]
    table = blueque(redis_url, "requeue", first)
    assert table.returncode == 0, table.stderr
    assert [first, "requeued"] == table.stdout.splitlines()[3].split()
    assert Job.load(first).status.hget() == "pending"
    bulk = document(blueque(redis_url, "requeue", "--failed", "--queue", Q, "--json"))
    assert bulk == {"requeued": 1, "results": []}
    assert Job.load(second).status.hget() == "pending"
    refused = blueque(redis_url, "requeue", scene["complete"][0], "--json")
    assert_one_line(refused, 1, f"task {scene['complete'][0]!r} not requeued")
    results = json.loads(refused.stdout)
    assert_shape(results, {"requeued": int, "results": RESULTS})
    assert results["results"][0]["outcome"] == "refused"


def test_requeue_puts_expired_and_buried_tasks_back_too(redis_url, conn):
    queue = Queue.named("back")
    expired = queue.enqueue("late", ttl=0.01)
    time.sleep(0.05)
    assert queue.expire_due() == [expired.task_id]
    queue.enqueue("poison")
    buried, _ = Queue.reserve_from(["back"], "box_1")
    assert buried.bury("bad input")
    results = document(blueque(redis_url, "requeue", expired.task_id, buried.task_id, "--json"))
    assert [row["outcome"] for row in results["results"]] == ["requeued", "requeued"]
    assert results["requeued"] == 2
    assert {Job.load(expired.task_id).status.hget(), buried.status.hget()} == {"pending"}
    assert conn.llen("blueque:expired:back") == conn.llen("blueque:buried:back") == 0


def test_cancel_a_waiting_task_and_leave_a_finished_one(redis_url, scene):
    pending, complete = scene["pending"][0], scene["complete"][0]
    results = document(blueque(redis_url, "cancel", pending, complete, "--json"))
    assert_shape(results, {"canceled": int, "results": RESULTS})
    assert [(row["id"], row["outcome"]) for row in results["results"]] == [
        (pending, "canceled"), (complete, "already_finished")]
    assert Job.load(pending).status.hget() == "canceled"


def test_delete_prints_its_lines_and_reports_each_id_in_json(redis_url, scene, conn):
    first, second = scene["complete"][:2]
    result = blueque(redis_url, "delete", first)
    assert (result.returncode, result.stdout.strip()) == (0, f"deleted {first}")
    both = blueque(redis_url, "delete", second, "no-such-task", "--json")
    assert_one_line(both, 1, "1 of 2 tasks not deleted")
    assert [(row["id"], row["outcome"]) for row in json.loads(both.stdout)["results"]] == [
        (second, "deleted"), ("no-such-task", "not_found")]
    assert not conn.exists(f"blueque_task_{first}", f"blueque_task_{second}")


def test_purge_asks_for_confirmation_then_deletes_in_chunks(redis_url, scene, conn):
    refused = blueque(redis_url, "purge", "--queue", Q, "--status", "complete")
    assert_one_line(refused, 2, "add --yes to confirm (no terminal to ask)")
    primary, secondary = pty.openpty()  # a terminal to answer the question on
    try:
        os.write(primary, b"no\n")
        answered = blueque(redis_url, "purge", "--queue", Q, "--status", "complete",
                           stdin=secondary)
    finally:
        os.close(secondary)
        os.close(primary)
    assert answered.returncode == 1
    assert answered.stdout == ("delete every complete task of queue adm? type 'yes' to confirm: "
                               "nothing deleted\n")
    assert conn.llen(f"blueque_complete_tasks_{Q}") == 3
    purged = document(blueque(redis_url, "purge", "--queue", Q, "--status", "complete", "--yes",
                              "--json"))
    assert purged == {"queue": Q, "status": "complete", "deleted": 3, "passed_over": 0}
    assert conn.llen(f"blueque_complete_tasks_{Q}") == 0
    assert not any(conn.exists(f"blueque_task_{task_id}") for task_id in scene["complete"])
    assert conn.llen(f"blueque_failed_tasks_{Q}") == 2


def test_clean_and_reindex_keep_their_lines_and_take_json(redis_url, database, conn):
    Queue.named(Q).enqueue("x")
    conn.lpush(f"blueque_pending_tasks_{Q}", "ghost")
    cleaned = document(blueque(redis_url, "clean", "--deep", "--json"))
    assert_shape(cleaned, {"taken_back": dict, "deep": REPORT})
    assert cleaned["deep"]["dropped"] == [{"key": f"blueque_pending_tasks_{Q}",
                                           "member": "ghost"}]
    assert_shape(document(blueque(redis_url, "reindex", "--json")), REPORT)


# -- a running task ----------------------------------------------------------------------------
@pytest.fixture
def running(redis_url, database, conn):
    """A `blueque-worker` process running a `progressing` task; the worker and the task."""
    job = Queue.named(Q).enqueue("")
    worker = start_worker(redis_url, f"--queues={Q}", "--callback=jobs.progressing",
                          "--progress-interval=0.1", "--timeout=0.2", "--cancel-grace=1")
    try:
        # far enough that the table's progress bar has a whole cell (more than 1/32 of it):
        # a forked task's first report now reaches Redis as soon as its worker writes it
        wait_for(lambda: job.progress() is not None and job.progress().done >= 15, timeout=20)
        yield worker, job
    finally:
        worker.kill()
        worker.wait()
        kill_task_processes(conn)


def test_workers_tasks_inspect_and_watch_show_a_running_task(redis_url, running):
    worker, job = running
    workers, started, record, frames, table = blueques(
        redis_url, ["workers", "--json"], ["tasks", "--status", "started", "--json"],
        ["inspect", job.task_id, "--json"], ["watch", Q, "--iterations", "2", "--json"],
        ["watch", "--iterations", "1"])
    workers = document(workers)
    assert_shape(workers, {"at": str, "workers": [WORKER], "skipped": SKIPPED})
    (row,) = workers["workers"]
    assert (row["pid"], row["queues"], row["running"]) == (worker.pid, [Q],
                                                           [{"id": job.task_id, "queue": Q}])
    assert row["last_beat"] <= row["alive_until"]
    assert (row["idle"], row["stopping"]) == (False, False)
    (task,) = document(started)["tasks"]
    assert (task["id"], task["node"]) == (job.task_id, row["id"])
    assert task["started"] is not None and task["attempt"] == 1
    assert task["progress"]["total"] == 300 and 0 < task["progress"]["fraction"] < 1
    assert task["progress"]["message"].startswith("item ")
    record = document(record)
    assert record["lease"]["holder"] == row["id"] and record["lease"]["expires_in"] > 0
    frames = [json.loads(line) for line in frames.stdout.splitlines()]
    assert len(frames) == 2
    assert_shape(frames[0], {"at": str, "queues": [QUEUE], "running": [TASK],
                             "skipped": SKIPPED})
    assert [task["id"] for task in frames[-1]["running"]] == [job.task_id]
    assert table.returncode == 0, table.stderr
    line = next(line for line in table.stdout.splitlines() if line.startswith(job.task_id))
    assert "━" in line and "/300 " in line  # its bar, its count


def test_a_worker_told_to_stop_reads_stopping_while_its_task_runs_on(redis_url, running):
    worker, job = running
    (row,) = document(blueque(redis_url, "workers", "--json"))["workers"]
    assert document(blueque(redis_url, "workers", "--stop", row["id"], "--json")) == {
        "worker": row["id"], "order": "stop"}
    # the order waits for it, then its state says it (on_terminate=wait: its task goes on)
    wait_for(lambda: live_workers().workers[0].stopping, timeout=10)
    wait_for(lambda: live_workers().workers[0].state in ("stopping", "terminating"),
             timeout=10)
    assert Queue.worker_orders() == {row["id"]: "stop"}  # kept until it stopped
    (row,) = document(blueque(redis_url, "workers", "--json"))["workers"]
    assert (row["idle"], row["stopping"]) == (False, True)
    assert worker.poll() is None and job.status.hget() == "started"


def test_an_idle_worker_reads_idle_and_not_stopping(redis_url, database, conn):
    Queue.named(Q).enqueue("").delete()  # a known queue, with nothing to run
    worker = start_worker(redis_url, f"--queues={Q}", "--timeout=0.2")
    try:
        wait_for(lambda: [row for row in live_workers().workers if row.state == "waiting"],
                 timeout=20)
        (row,) = document(blueque(redis_url, "workers", "--json"))["workers"]
        assert (row["pid"], row["running"], row["running_count"]) == (worker.pid, [], 0)
        assert (row["idle"], row["stopping"]) == (True, False)
    finally:
        worker.kill()
        worker.wait()


def test_idle_and_stopping_read_from_what_each_record_says(redis_url, database, conn):
    """Records written as workers write them: older ones (no state, no count: idle read
    from their reserved lists), one told to stop that did not read it yet, one whose
    state says it stops."""
    keys = Job.keys()
    held = Queue.named(Q).enqueue("held")
    records = {
        "old.host_1": ({}, [held.task_id]),
        "old.host_2": ({}, []),
        "told.host_3": ({"running_count": 0, "state": "waiting"}, []),
        "ending.host_4": ({"running_count": 1, "state": "terminating"}, []),
        "quiet.host_5": ({"running_count": 0, "state": "quiet"}, []),
    }
    for worker_id, (said, reserved) in records.items():
        identity = {"host": worker_id.split("_")[0], "pid": int(worker_id.split("_")[1]),
                    "queues": [Q], "since": time.time(), "liveness_timeout": 10, **said}
        conn.hset(keys.workers_info, worker_id, json.dumps(identity))
        conn.zadd(keys.workers, {worker_id: time.time() + 60})
        for task_id in reserved:
            conn.lpush(keys.reserved(Q, worker_id), task_id)
    assert Queue.tell_worker("told.host_3", "stop")
    assert Queue.tell_worker("quiet.host_5", "quiet")
    as_json, table = blueques(redis_url, ["workers", "--json"], ["workers"])
    rows = {row["id"]: row for row in document(as_json)["workers"]}
    assert {worker_id: (row["idle"], row["stopping"]) for worker_id, row in rows.items()} == {
        "old.host_1": (False, False), "old.host_2": (True, False),
        "told.host_3": (True, True), "ending.host_4": (False, True),
        "quiet.host_5": (True, False)}
    assert table.returncode == 0, table.stderr
    line = next(line for line in table.stdout.splitlines() if line.startswith("told.host_3"))
    assert "waiting (told to stop)" in line


def test_cancel_of_a_running_task_is_requested_then_recorded(redis_url, running):
    _worker, job = running
    result = document(blueque(redis_url, "cancel", job.task_id, "--json"))
    assert result["results"][0]["outcome"] in ("cancel_requested", "canceled")
    wait_for(lambda: job.status.hget() == "canceled", timeout=15)


def test_watch_stops_on_sigint_with_exit_code_0(redis_url, database):
    Queue.named(Q).enqueue("x")
    watch = subprocess.Popen([sys.executable, "-m", "limpyd_blueque.admin",
                              f"--redis-url={redis_url}", "watch", "--json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert json.loads(watch.stdout.readline())["queues"][0]["tasks"]["pending"] == 1
        watch.send_signal(signal.SIGINT)
        assert watch.wait(timeout=10) == 0
        assert "Traceback" not in watch.stderr.read()
    finally:
        watch.kill()
        watch.wait()


# -- mistakes and hostile data ------------------------------------------------------------------
MISTAKES = [
    (["inspect", "no-such-task"], 1, "no task with id 'no-such-task'"),
    (["errors", "--since", "2026-13-45"], 2, "invalid date '2026-13-45'"),
    (["stats", "bad queue!"], 2, "invalid queue name 'bad queue!'"),
    (["tasks", "--limit", "0"], 2, "'0' must be from 1 to"),
    (["requeue"], 2, "requeue takes task ids, or --failed --queue QUEUE"),
    (["cancel", "no-such-task"], 1, "not canceled: no task with id 'no-such-task'"),
    (["purge", "--queue", Q, "--status", "started", "--yes"], 2, "invalid choice: 'started'"),
]


def test_a_mistake_is_one_line_without_traceback(redis_url, database):
    from limpyd_blueque.connection.embedded import free_port

    unreachable = f"redis://127.0.0.1:{free_port()}/0"
    results = blueques(redis_url, *(args for args, _, _ in MISTAKES),
                       [f"--redis-url={unreachable}", "stats"])
    for result, (_args, code, text) in zip(results, MISTAKES):
        assert_one_line(result, code, text)
    assert_one_line(results[-1], 1, f"cannot reach Redis at {unreachable}")


def test_keys_of_another_type_are_skipped_and_values_shown_escaped(redis_url, scene, conn):
    conn.delete(f"blueque_failed_tasks_{Q}")
    conn.set(f"blueque_failed_tasks_{Q}", "not a list")
    evil = "[bold]evil\x1b[31m"
    conn.lpush(f"blueque_pending_tasks_{Q}", evil)
    conn.hset(f"blueque_task_{evil}", mapping={"status": "pending", "queue": Q,
                                               "created": "yesterday"})
    as_json, table = blueques(redis_url, ["tasks", "--json"], ["tasks"])
    listing = document(as_json)
    assert [item["key"] for item in listing["skipped"]] == [f"blueque_failed_tasks_{Q}"]
    assert evil in [row["id"] for row in listing["tasks"]]
    assert table.returncode == 0, table.stderr
    assert "\x1b" not in table.stdout
    assert "[bold]evil\\x1b[31m" in table.stdout  # shown as it is, escaped, not as markup
    assert f"skipped blueque_failed_tasks_{Q}: WRONGTYPE" in table.stdout


@pytest.mark.parametrize("field, value", [
    ("progress", '{"done": 1%s, "total": 1, "at": 1, "attempt": 1}' % ("0" * 400)),
    ("progress", '{"done": 1, "at": 1e20, "attempt": 1}'),
    ("progress", '{"done": 1, "total": 1e308, "at": 10, "first_at": 9, "first_done": 0.5, '
                 '"attempt": 1}'),
    ("progress", "[" * 100_000 + "]" * 100_000),
    ("checkpoint", '{"state": 1, "attempt": 1, "at": 1e20}'),
    ("checkpoint", "[" * 100_000),
], ids=["huge-done", "far-moment", "huge-total", "deep", "far-checkpoint", "deep-checkpoint"])
def test_progress_or_checkpoint_another_client_broke_reads_as_none(redis_url, conn, field,
                                                                   value):
    job = Queue.named("odd").enqueue("x")
    conn.hset(job.key, field, value)
    progress = job.progress()  # a total out of bounds reads as unknown, the rest as none
    assert progress is None or (progress.total is None and progress.time_left is None)
    assert job.checkpoint_record() is None
    for command in (("tasks", "--queue", "odd"), ("inspect", job.task_id),
                    ("tasks", "--json"), ("inspect", job.task_id, "--json")):
        result = blueque(redis_url, *command)
        assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
