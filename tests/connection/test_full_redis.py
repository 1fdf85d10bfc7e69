"""A Redis that fills up (`maxmemory` reached, `noeviction`) while tasks run: the tasks go
on, their worker goes on, and what cannot be written is logged, not raised.

A running task's progress report waits for the next one; a stored `Error` is given up (the
failure itself is on the task); the worker's own record is left for the others to find
stale; an outcome step is retried, as when Redis is out of reach. Each test runs on a
redis-server of its own, whose memory limit it lowers to one byte and raises again.
"""

from __future__ import annotations

import logging

import pytest
import redis

from limpyd_blueque import BluequeDatabase, BluequeModel, Job, Queue, RedisFull, Worker
from limpyd_blueque.connection.embedded import EmbeddedRedis
from limpyd_blueque.worker.outcomes import OutcomeRecorder


@pytest.fixture(scope="module")
def server():
    with EmbeddedRedis(options=["--maxmemory-policy", "noeviction"]) as private:
        yield private


@pytest.fixture
def raw(server, database):
    """The private server, emptied, bound to the models for the test."""
    client = redis.Redis.from_url(server.url, decode_responses=True)
    client.flushall()
    FillsRedis.url = server.url
    BluequeModel.use_database(BluequeDatabase(server.url))
    yield client
    client.config_set("maxmemory", 0)
    BluequeModel.use_database(database)


class FillsRedis(Job):
    """Reports progress, then fills Redis (no write passes any more), reports again, and
    fails or completes as its parameters say."""

    url = ""  # the server's, set by the `raw` fixture

    def run(self, queue):
        self.set_progress(1, 3, "before")
        redis.Redis.from_url(self.url).config_set("maxmemory", 1)
        self.set_progress(2, 3, "while full")  # not raised: written next time
        if self.known["parameters"] == "fail":
            raise ValueError("failed while Redis was full")
        return "done while full"


def run_one(raw, parameters, fork):
    job = Queue.named("full").enqueue(parameters)
    worker = Worker(queues="full", job_model=FillsRedis, max_loops=1, fork=fork, timeout=1)
    worker.run()  # returns: nothing of a full Redis ends the worker
    raw.config_set("maxmemory", 0)
    return raw.hgetall(f"blueque_task_{job.task_id}")


@pytest.mark.parametrize("fork", [True, False], ids=["forked", "in-process"])
def test_a_task_failing_while_redis_is_full_is_filed_failed_and_its_error_logged(
        raw, fork, caplog):
    caplog.set_level(logging.INFO, logger="limpyd-blueque")
    task = run_one(raw, "fail", fork)
    assert task["status"] == "failed"
    assert task["error"] == "ValueError: failed while Redis was full"
    assert '"message": "before"' in task["progress"]  # the report made while full waited
    assert raw.keys("blueque:error:*") == []  # no Error record: Redis refused it
    if not fork:  # the task process's log lines are its own
        assert "its Error record was not stored: Redis at" in caplog.text
        assert "its last progress was not written" in caplog.text
    assert "could not remove this worker's record" in caplog.text


@pytest.mark.parametrize("fork", [True, False], ids=["forked", "in-process"])
def test_a_task_completing_while_redis_is_full_keeps_its_result(raw, fork):
    task = run_one(raw, "complete", fork)
    assert task["status"] == "complete"
    assert task["result"] == "done while full"


def test_an_outcome_step_is_retried_while_redis_is_full(raw):
    refusals = []
    lines = []

    def step():
        if len(refusals) < 2:
            refusals.append(RedisFull("Redis at here is full"))
            raise refusals[-1]
        return "recorded"

    recorder = OutcomeRecorder("w", retry_timeout=10,
                               log=lambda message, level=logging.INFO: lines.append(message))
    assert recorder.retrying(step) == "recorded"
    assert len(refusals) == 2 and all("is full; retrying" in line for line in lines)


def test_a_redis_full_for_longer_than_the_retry_timeout_is_raised(raw):
    recorder = OutcomeRecorder("w", retry_timeout=0.2, log=lambda *args: None)
    tries = []

    def step():
        tries.append(1)
        raise RedisFull("Redis at here is full")

    with pytest.raises(RedisFull):
        recorder.retrying(step)
    assert len(tries) >= 1
