"""Typos caught (issue 29, item 5): a queue Redis has never seen, a mistyped subcommand,
choice or error type. `blueque` says the queue is unknown and lists the known ones (exit
code 1; a malformed name is a usage error, 2); `blueque-worker` logs one warning (in a dry
run too); the close names come as "did you mean". Real processes on the tests' Redis."""

from __future__ import annotations

import json
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest
from helpers import script, worker_command
from jobs import RecordingJob

from limpyd_blueque import Queue, Worker

pytestmark = pytest.mark.timeout(120)

ADMIN = script("blueque", "limpyd_blueque.admin")


def blueque(redis_url, *args):
    return subprocess.run([*ADMIN, f"--redis-url={redis_url}", *args], capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)


def blueques(redis_url, *commands):
    """The results of several commands, run at the same time (each spends most of its life
    importing)."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(lambda args: blueque(redis_url, *args), commands))


def one_line(result, code, *texts):
    assert result.returncode == code, (result.args, result.stdout, result.stderr)
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for text in texts:
        assert text in result.stderr, (result.args, result.stderr)


@pytest.fixture
def sleepy(database, conn):
    """Queues `sleepy` (one task failed with a ValueError, one pending) and `other`."""
    queue = Queue.named("sleepy")
    queue.enqueue({"fail": "boom"})
    Worker("sleepy", job_model=RecordingJob, fork=False, max_loops=1, timeout=0.2,
           requeue_times=0).run()
    queue.enqueue("waits")
    Queue.named("other").enqueue("x")


UNKNOWN = "unknown queue 'sleepyy' (did you mean 'sleepy'?); known queues: other, sleepy"
QUEUE_COMMANDS = [
    ["stats", "sleepyy"], ["stats", "other", "sleepyy", "--json"], ["statistics", "sleepyy"],
    ["tasks", "--queue", "sleepyy"], ["errors", "--queue", "sleepyy"],
    ["watch", "sleepyy", "--iterations", "1"], ["kick", "sleepyy"],
    ["requeue", "--failed", "--queue", "sleepyy"],
    ["purge", "--queue", "sleepyy", "--status", "failed", "--yes"],
    ["truncate", "sleepyy", "--yes"], ["drop", "sleepyy", "--yes"],
    ["periodic", "list", "--queue", "sleepyy"], ["periodic", "remove", "sleepyy", "nightly"],
]


def test_a_command_given_an_unknown_queue_names_it_and_the_known_ones(redis_url, sleepy,
                                                                       conn):
    keys_before = sorted(conn.keys("*"))
    for result in blueques(redis_url, *QUEUE_COMMANDS):
        one_line(result, 1, f"blueque: error: {UNKNOWN}")
        assert result.stdout == ""  # no empty table, no row of zeros
    assert sorted(conn.keys("*")) == keys_before  # nothing was written, nor emptied


def test_several_unknown_queues_far_from_any_and_none_known(redis_url, database, conn):
    none_yet, other = blueques(redis_url, ["stats", "nosuchqueue"], ["statistics", "zzz"])
    one_line(none_yet, 1, "unknown queue 'nosuchqueue': no queue is known yet")
    one_line(other, 1, "unknown queue 'zzz': no queue is known yet")
    Queue.named("sleepy").enqueue("x")
    both = blueque(redis_url, "stats", "sleepy", "nosuchqueue", "sleepyy")
    one_line(both, 1, "unknown queues 'nosuchqueue', 'sleepyy' (did you mean 'sleepy'?); "
             "known queues: sleepy")


def test_a_malformed_queue_name_is_a_usage_error(redis_url, sleepy):
    for result in blueques(redis_url, ["stats", "bad queue!"], ["tasks", "--queue", "a:b"],
                           ["drop", "*", "--yes"]):
        one_line(result, 2, "invalid queue name")


def test_known_queues_are_served_and_errors_of_a_dropped_queue_still_listed(redis_url, sleepy,
                                                                            conn):
    stats, tasks = blueques(redis_url, ["stats", "sleepy", "other", "--json"],
                            ["tasks", "--queue", "sleepy", "--json"])
    assert [row["queue"] for row in json.loads(stats.stdout)["queues"]] == ["sleepy", "other"]
    assert len(json.loads(tasks.stdout)["tasks"]) == 2
    assert Queue.named("sleepy").drop() > 0  # its stored error stays
    dropped, unknown = blueques(redis_url, ["errors", "--queue", "sleepy", "--json"],
                                ["errors", "--queue", "sleepyy"])
    assert dropped.returncode == 0, dropped.stderr
    assert [row["message"] for row in json.loads(dropped.stdout)["errors"]] == ["boom"]
    one_line(unknown, 1, "unknown queue 'sleepyy'; known queues: other")


def test_a_mistyped_subcommand_or_choice_gets_did_you_mean(redis_url, database):
    command, status, order = blueques(redis_url, ["stast"], ["tasks", "--status", "pendng"],
                                      ["purge", "--queue", "q", "--status", "Failed"])
    one_line(command, 2, "invalid choice: 'stast' (did you mean 'stats'", "(see --help)")
    one_line(status, 2, "invalid choice: 'pendng' (did you mean 'pending'?)")
    one_line(order, 2, "invalid choice: 'Failed' (did you mean 'failed'?)")
    nothing_close = blueque(redis_url, "xyzzy")
    one_line(nothing_close, 2, "invalid choice: 'xyzzy' (choose from ")
    assert "did you mean" not in nothing_close.stderr


def test_an_error_type_that_matches_nothing_gets_the_types_stored(redis_url, sleepy):
    lower, far, right = blueques(redis_url, ["errors", "--type", "valueerror", "--json"],
                                 ["errors", "--type", "NoSuchError"],
                                 ["errors", "--type", "ValueError", "--json"])
    assert lower.returncode == 0 and json.loads(lower.stdout) == {"errors": []}
    assert lower.stderr.strip() == ("blueque: no stored error has the type 'valueerror' (did "
                                    "you mean 'ValueError'?); the types stored: ValueError")
    assert far.returncode == 0 and "none" in far.stdout
    assert far.stderr.strip() == ("blueque: no stored error has the type 'NoSuchError'; the "
                                  "types stored: ValueError")
    assert right.returncode == 0 and right.stderr == ""
    assert len(json.loads(right.stdout)["errors"]) == 1
    filtered = blueque(redis_url, "errors", "--type", "valueerror", "--queue", "other")
    assert filtered.returncode == 0
    assert filtered.stderr.strip() == ("blueque: no stored error has the type 'valueerror'; "
                                       "none is stored for these filters")


def run_worker(redis_url, *options):
    return subprocess.run(worker_command(redis_url, *options), capture_output=True, text=True,
                          timeout=60)


def test_a_worker_on_a_never_seen_queue_logs_one_warning_in_a_dry_run_too(redis_url, sleepy):
    with ThreadPoolExecutor(max_workers=2) as pool:  # dry runs: no listener is added
        typo, known = pool.map(lambda options: run_worker(redis_url, *options), [
            ("--queues=sleepyy", "--dry-run"), ("--queues=sleepy,other", "--dry-run")])
    run = run_worker(redis_url, "--queues=sleepyy,other", "--max-loops=1", "--timeout=0.1")
    assert typo.returncode == 0, typo.stderr
    assert "dry run: worker ready on queues sleepyy; no task run" in typo.stdout
    warnings = [line for line in typo.stderr.splitlines() if "WARNING" in line]
    assert len(warnings) == 1, typo.stderr
    assert warnings[0].endswith("never seen queue 'sleepyy' (did you mean 'sleepy'?); known "
                                "queues: other, sleepy")
    assert known.returncode == 0 and "WARNING" not in known.stderr, known.stderr
    assert run.returncode == 0, run.stderr
    assert sum("never seen queue" in line for line in run.stderr.splitlines()) == 1, run.stderr
