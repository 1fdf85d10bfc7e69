"""Retry policies (issue #32): the delay before each attempt read back from Redis (the
scheduled set's score), backoff capped and jittered, `Retry(delay=...)`, `no_retry_for`,
`retry_deadline`, the most specific setting first (task, queue, worker), today's
`requeue_times` and `requeue_delay_delta` mapped onto the policy, and one stored `Error`
per attempt. Workers run in this process (`fork=False`), one attempt per run."""

from __future__ import annotations

import json
import logging
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest

from limpyd_blueque import ConfigurationError, Error, Job, Queue, Retry, Worker
from limpyd_blueque.protocol.keys import keyspace
from limpyd_blueque.protocol.retries import RetryPolicy, check_names

pytestmark = pytest.mark.timeout(60)
K = keyspace()


class Flaky(Exception):
    """A failure worth retrying."""


class Broken(ValueError):
    """A failure never worth retrying (through its base's name)."""


def failing(job, queue):
    kind = job.known["parameters"]
    if kind == "retry":
        raise Retry(delay=3, message="busy, try later")
    if kind.startswith("retry:"):  # a delay of any value, as a task's code may give
        raise Retry(delay=json.loads(kind[6:]))
    if kind == "retry-policy":
        raise Retry()
    if kind == "broken":
        raise Broken("bad input")
    raise Flaky("not yet")


def attempt(queue_name, worker_class=Worker, **settings):
    """Run one attempt of the next task of `queue_name` in this process; when it is put
    back, the delay before its next attempt (read from the scheduled set), else None."""
    settings.setdefault("fork", False)
    worker_class(queues=[queue_name], callback=failing, max_loops=1, timeout=0.05,
                 logger_level=logging.CRITICAL, **settings).run()
    conn = Queue.client()
    scheduled = conn.zrange(K.scheduled(queue_name), 0, 0, withscores=True)
    if not scheduled:
        return None
    task_id, eta = scheduled[0]
    delay = eta - float(conn.hget(K.task(task_id), "updated"))
    Queue.named(queue_name).enqueue_due(now=eta + 1)  # due now: the next attempt may run
    return round(delay, 3)


def test_the_delays_grow_by_the_backoff_up_to_the_maximum_then_the_task_fails(conn):
    job = Queue.named("backoff").enqueue("flaky", retry_delay=10, retry_backoff=2,
                                          retry_max_delay=30, max_attempts=5)
    delays = [attempt("backoff") for _ in range(5)]
    assert delays == [10, 20, 30, 30, None]  # 10 * 2**(k-1), capped; the 5th attempt fails
    assert job.status.hget() == "failed"
    errors = Error.collection_for_job(job).instances()
    assert sorted(int(error.attempt.hget()) for error in errors) == [1, 2, 3, 4, 5]


def test_jitter_stays_within_its_fraction(conn):
    Queue.named("jitter").enqueue("flaky", retry_delay=100, retry_jitter=0.2)
    delays = [attempt("jitter") for _ in range(4)]
    assert all(80 <= delay <= 120 for delay in delays)
    assert len(set(delays)) > 1
    policy = RetryPolicy(retries=3, retry_delay=100, retry_jitter=0.2)
    assert all(80 <= policy.delay_before(1, random.Random(seed).uniform) <= 120
               for seed in range(50))


def test_a_task_raising_retry_chooses_its_delay_without_any_policy(conn):
    job = Queue.named("asked").enqueue("retry")
    assert attempt("asked") == 3  # no requeue_times, no retry setting: Retry still retries
    assert job.status.hget() == "pending"  # (made due by `attempt`)
    assert "busy, try later" in job.error.hget()
    job = Queue.named("asked-policy").enqueue("retry-policy", retry_delay=4, retry_backoff=3)
    assert [attempt("asked-policy") for _ in range(2)] == [4, 12]


def test_retry_spends_the_task_s_attempts(conn):
    job = Queue.named("asked-max").enqueue("retry", max_attempts=2)
    assert [attempt("asked-max") for _ in range(2)] == [3, None]
    assert job.status.hget() == "failed"


def test_no_retry_for_fails_at_once_by_name_or_base_name(conn):
    broken = Queue.named("never").enqueue("broken", no_retry_for=["ValueError"])
    assert attempt("never", requeue_times=5) is None
    assert broken.status.hget() == "failed"
    flaky = Queue.named("never").enqueue("flaky", no_retry_for="ValueError,KeyError")
    assert attempt("never", requeue_times=5) == 30  # not a ValueError: retried
    assert flaky.status.hget() == "pending"
    Queue.named("never-worker").enqueue("broken")
    assert attempt("never-worker", requeue_times=5, no_retry_for="Broken") is None


def test_no_new_attempt_past_the_deadline(conn):
    job = Queue.named("deadline").enqueue("flaky", retry_delay=2, retry_deadline=5)
    assert attempt("deadline") == 2
    conn.hset(K.task(job.task_id), "created", repr(time.time() - 4))  # enqueued 4 s ago
    assert attempt("deadline") is None  # its next attempt would start 6 s in: past 5
    assert job.status.hget() == "failed"


def test_requeue_times_and_requeue_delay_delta_keep_working(conn):
    job = Queue.named("legacy").enqueue("flaky")
    delays = [attempt("legacy", requeue_times=2, requeue_delay_delta=7) for _ in range(3)]
    assert delays == [7, 7, None] and job.status.hget() == "failed"
    job = Queue.named("legacy-backoff").enqueue("flaky")
    delays = [attempt("legacy-backoff", requeue_times=2, requeue_delay_delta=7,
                      retry_backoff=2) for _ in range(3)]
    assert delays == [7, 14, None]


def test_the_task_s_setting_comes_before_its_queue_s_which_comes_before_the_worker_s(conn):
    queue = Queue.named("layers")
    queue.configure(retry_delay=20, no_retry_for=["KeyError"])
    assert queue.settings()["no_retry_for"] == ["KeyError"]
    queue.enqueue("flaky", retry_delay=5)
    assert attempt("layers", retry_delay=50) == 5
    queue.enqueue("flaky")
    assert sorted([attempt("layers", retry_delay=50), attempt("layers", retry_delay=50)]) == [
        5, 20]  # the first task again (5 s), and the new one at its queue's delay
    queue.configure(retry_delay=None)
    Queue.named("layers-worker").enqueue("flaky")
    assert attempt("layers-worker", retry_delay=50) == 50


def test_bad_values_are_refused_before_anything_is_written(conn):
    queue = Queue.named("refused")
    for options in ({"retry_delay": -1}, {"retry_backoff": 0}, {"retry_jitter": 1.5},
                    {"retry_deadline": 0}, {"no_retry_for": ["not a name"]},
                    {"no_retry_for": 42}):
        with pytest.raises(ConfigurationError):
            queue.enqueue("x", **options)
        with pytest.raises(ConfigurationError):
            queue.configure(**options)
    with pytest.raises(ConfigurationError):
        Worker(queues=["refused"], retry_jitter=2)
    assert conn.dbsize() == 0
    assert check_names("ValueError, app.errors.Fatal") == ("ValueError", "app.errors.Fatal")


def test_a_policy_field_another_client_broke_counts_as_unset(conn):
    job = Queue.named("broken-field").enqueue("flaky", retry_delay=6)
    conn.hset(K.task(job.task_id), "retry_backoff", "lots")
    assert [attempt("broken-field") for _ in range(2)] == [6, 6]
    assert Job.load(job.task_id).status.hget() == "pending"


def test_the_command_line_takes_the_policy(redis_url, conn):
    Queue.named("cli-retry").enqueue("x")
    done = subprocess.run(
        [sys.executable, "-m", "limpyd_blueque.cli", f"--redis-url={redis_url}",
         "--queues=cli-retry", "--callback=jobs.fail_callback", "--no-fork", "--max-loops=1",
         "--timeout=0.1", "--retry-delay=8", "--retry-backoff=3", "--retry-jitter=0",
         "--no-retry-for=KeyError,IndexError", "--requeue-times=2",
         f"--pythonpath={Path(__file__).parents[1]}"],
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    (task_id, eta), = conn.zrange(K.scheduled("cli-retry"), 0, 0, withscores=True)
    assert round(eta - float(conn.hget(K.task(task_id), "updated")), 3) == 8


def test_inspect_shows_each_attempt_s_error_and_when_the_next_one_starts(redis_url, conn):
    job = Queue.named("seen").enqueue("flaky", retry_delay=60, retry_backoff=2)
    attempt("seen")
    Worker(queues=["seen"], callback=failing, fork=False, max_loops=1, timeout=0.05,
           logger_level=logging.CRITICAL).run()  # the 2nd attempt: next one in 120 s
    shown = subprocess.run(
        [sys.executable, "-m", "limpyd_blueque.admin", f"--redis-url={redis_url}", "inspect",
         job.task_id, "--json"], capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    record = json.loads(shown.stdout)
    assert [error["attempt"] for error in record["errors"]] == [2, 1]  # newest first
    assert record["attempts"]["attempt"] == 2
    assert 100 < record["attempts"]["next_at"] - time.time() <= 120
    table = subprocess.run(
        [sys.executable, "-m", "limpyd_blueque.admin", f"--redis-url={redis_url}", "inspect",
         job.task_id], capture_output=True, text=True, timeout=60,
        env={**os.environ, "COLUMNS": "200"})
    assert "the next one" in table.stdout and "Flaky" in table.stdout


def test_delays_past_any_bound_are_the_longest_one_and_the_task_never_sticks(conn):
    job = Queue.named("huge").enqueue("flaky", retry_delay=1000, retry_backoff=1000,
                                      max_attempts=5)
    delays = [attempt("huge") for _ in range(5)]
    assert delays[:3] == [1000, 1_000_000, 1_000_000_000] and delays[3] == 1_000_000_000
    assert delays[4] is None and job.status.hget() == "failed"
    policy = RetryPolicy(retries=2000, retry_delay=1, retry_backoff=2)
    assert policy.delay_before(1500) == 1_000_000_000  # (2.0 ** 1499 overflows)
    capped = RetryPolicy(retries=3, retry_delay=100, retry_max_delay=100, retry_jitter=0.5)
    assert all(capped.delay_before(1, random.Random(seed).uniform) <= 100 for seed in range(50))


@pytest.mark.parametrize("asked", ['"soon"', "-5", "1e30", '"nan"', "null"])
def test_a_retry_delay_that_is_none_takes_the_policy_s(conn, asked):
    job = Queue.named("bad-asked").enqueue(f"retry:{asked}", retry_delay=9)
    assert attempt("bad-asked") == 9
    assert Job.load(job.task_id).status.hget() == "pending"


def test_an_overridden_must_requeue_still_decides(conn):
    class ThreeTimes(Worker):
        def must_requeue(self, job, attempt):
            return (attempt or 1) <= 3

    job = Queue.named("override").enqueue("flaky")
    delays = [attempt("override", ThreeTimes, requeue_delay_delta=4) for _ in range(4)]
    assert delays == [4, 4, 4, None] and job.status.hget() == "failed"


def test_an_empty_no_retry_for_overrides_a_less_specific_list(conn):
    Queue.named("empty-list").enqueue("broken", no_retry_for=[])
    assert attempt("empty-list", requeue_times=2, no_retry_for="ValueError") == 30


def test_a_forked_task_s_retry_follows_its_queue_s_policy(conn):
    queue = Queue.named("forked")
    queue.configure(retry_delay=5, retry_backoff=3)
    job = queue.enqueue("flaky")
    assert [attempt("forked", fork=True) for _ in range(2)] == [5, 15]
    assert sorted(int(error.attempt.hget())
                  for error in Error.collection_for_job(job).instances()) == [1, 2]
