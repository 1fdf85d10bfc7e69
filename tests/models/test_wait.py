"""A producer waiting for a task's outcome (`Job.wait`, `aio.Queue.wait`) on a real Redis:
the result once complete, the failure or the cancel raised, a timeout, a task finished
already answered at once, woken by the finish's message and still answered when that
message is lost; 1,000 waiters at once, each woken by its task's end (the time printed)."""

from __future__ import annotations

import asyncio
import statistics
import threading
import time

import pytest
from helpers import LISTENER, start_worker, take

from limpyd_blueque import (
    Error,
    Job,
    Queue,
    TaskCanceled,
    TaskFailed,
    TaskNotFound,
    Worker,
    aio,
)
from limpyd_blueque.models import waiting

pytestmark = pytest.mark.timeout(120)


def later(seconds, action):
    """Run `action` in a thread after `seconds`; the thread."""
    def run():
        time.sleep(seconds)
        action()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def complete_next(queue_name, result):
    job = take(queue_name)
    assert job.complete(result, listener_id=LISTENER)
    return time.time()


def test_wait_returns_the_result_once_the_task_completes(database, conn):
    job = Queue.named("w").enqueue({"n": 1})
    finished = []
    completer = later(0.3, lambda: finished.append(complete_next("w", "forty-two")))
    began = time.monotonic()
    assert job.wait(timeout=10) == "forty-two"
    woken = time.time()
    assert 0.25 < time.monotonic() - began < 1.4  # woken by the message, not the read
    completer.join(10)  # (the waiter may wake before its completer records the time)
    assert woken - finished[0] < 1.0
    assert conn.hget(f"blueque_task_{job.task_id}", "waited") == f"blueque:outcome:{job.task_id}"


def test_a_task_finished_already_answers_at_once(database):
    job = Queue.named("w").enqueue("x")
    complete_next("w", "done")
    began = time.monotonic()
    assert job.wait(timeout=0) == "done"
    assert time.monotonic() - began < 1.0


def failing(job, queue):
    error = ValueError("disk full")
    error.code = "ENOSPC"
    raise error


def failure_waited_for(job, **worker):
    """The `TaskFailed` a waiter of `job` gets while a worker (in the main thread: it
    handles signals) runs it and it fails for good."""
    raised = []

    def wait():
        try:
            job.wait(timeout=30)
        except TaskFailed as error:
            raised.append(error)

    waiter = later(0, wait)
    time.sleep(0.2)
    Worker("wf", callback=failing, fork=False, timeout=0.2, **worker).run()
    waiter.join(30)
    assert len(raised) == 1
    return raised[0]


def test_a_failed_task_raises_task_failed_with_its_error_and_its_stored_error(database):
    job = Queue.named("wf").enqueue("x")
    failure = failure_waited_for(job, max_loops=1, requeue_times=0)
    assert failure.task_id == job.task_id
    assert "disk full" in failure.error
    assert isinstance(failure.stored_error, Error)
    assert failure.stored_error.code.hget() == "ENOSPC"


def test_the_stored_error_is_the_last_attempts(database):
    job = Queue.named("wf").enqueue("x")
    failure = failure_waited_for(job, max_loops=2, requeue_times=1, requeue_delay_delta=0)
    assert job.attempt.hget() == "2"
    assert failure.stored_error.attempt.hget() == "2"


def test_a_wait_goes_on_through_lost_connections(database, conn):
    job = Queue.named("w").enqueue("x")
    results = []
    waiter = later(0, lambda: results.append(job.wait(timeout=20)))
    time.sleep(0.3)
    killed = conn.client_kill_filter(_type="pubsub") + conn.client_kill_filter(
        _type="normal", skipme=True)
    assert killed >= 2  # the waiter's subscription and its reads
    time.sleep(0.3)
    complete_next("w", "after the storm")
    waiter.join(10)
    assert results == ["after the storm"]


def test_a_canceled_task_raises_task_canceled_at_once(database):
    job = Queue.named("w").enqueue("x")
    later(0.2, job.cancel)
    began = time.monotonic()
    with pytest.raises(TaskCanceled) as raised:
        job.wait(timeout=10)
    assert raised.value.status == "canceled"
    assert time.monotonic() - began < 1.4  # the cancel's message, not the read


def test_a_task_that_does_not_finish_in_time_raises_timeout_error(database):
    job = Queue.named("w").enqueue("x")
    began = time.monotonic()
    with pytest.raises(TimeoutError, match=r"did not finish within 0\.3 s"):
        job.wait(timeout=0.3)
    assert 0.3 <= time.monotonic() - began < 1.5
    with pytest.raises(ValueError, match="timeout"):
        job.wait(timeout=-1)


def test_no_such_task_raises_task_not_found(database, conn):
    with pytest.raises(TaskNotFound):
        Job.lazy_connect("nothing-here").wait(timeout=1)
    assert not conn.exists("blueque_task_nothing-here")  # nothing written


def test_a_lost_message_is_made_up_for_by_the_next_read(database, conn):
    job = Queue.named("w").enqueue("x")
    key = f"blueque_task_{job.task_id}"
    # finished by a hand that publishes nothing (as a message lost in a failover)
    later(0.3, lambda: conn.hset(key, mapping={"status": "complete", "result": "quiet"}))
    began = time.monotonic()
    assert job.wait(timeout=10) == "quiet"
    assert time.monotonic() - began < 0.3 + waiting.POLL * (1 + waiting.JITTER) + 0.5



@pytest.mark.asyncio
async def test_aio_wait_gives_the_same_outcomes(client, database):
    queue = aio.Queue("aw", client)
    done, failed, canceled = [await queue.enqueue(n) for n in ("a", "b", "c")]
    complete_next("aw", "fine")
    assert await queue.wait(done, timeout=5) == "fine"
    job = take("aw")
    assert job.task_id == failed and job.fail("broken", listener_id=LISTENER)
    with pytest.raises(TaskFailed, match="broken"):
        await queue.wait(failed, timeout=5)
    waiter = asyncio.ensure_future(queue.wait(canceled, timeout=10))
    await asyncio.sleep(0.2)
    asked = time.monotonic()
    assert await queue.cancel(canceled)
    with pytest.raises(TaskCanceled):
        await waiter
    assert time.monotonic() - asked < 1.4  # told, not read
    assert not aio.Outcomes.of(client).waiters  # nothing left subscribed
    with pytest.raises(TimeoutError):
        await queue.wait(await queue.enqueue("d"), timeout=0.2)
    with pytest.raises(TaskNotFound):
        await queue.wait("missing", timeout=1)


@pytest.mark.asyncio
async def test_a_thousand_waiters_are_each_woken_by_their_tasks_end(
        client, database, conn, redis_url, capsys):
    queue = aio.Queue("many", client)
    ids = await queue.enqueue_many(["x"] * 1000)
    woken: dict[str, float] = {}

    async def wait(task_id):
        await queue.wait(task_id, timeout=60)
        woken[task_id] = time.time()

    waiters = [asyncio.ensure_future(wait(task_id)) for task_id in ids]
    await asyncio.sleep(0.5)
    while not all(conn.hget(f"blueque_task_{task_id}", "waited") for task_id in ids):
        await asyncio.sleep(0.1)  # every waiter subscribed and marked its task
    worker = start_worker(redis_url, "--queues=many", "--callback=jobs.noop", "--no-fork",
                          "--timeout=0.2")  # as fast as it goes: about 1,500 ends a second
    try:
        await asyncio.wait_for(asyncio.gather(*waiters), timeout=60)
    finally:
        worker.terminate()
        worker.wait(20)
    delays = sorted(woken[task_id] - float(conn.hget(f"blueque_task_{task_id}", "updated"))
                    for task_id in ids)
    p99 = delays[int(len(delays) * 0.99) - 1]
    with capsys.disabled():
        print(f"\n1,000 waiters: woken {statistics.median(delays) * 1000:.1f} ms (median), "
              f"{p99 * 1000:.1f} ms (p99) after their task's end")
    # a bound of timed tests, generous under a loaded machine: every waiter woken by its
    # message, none left to its periodic read (quiet, the p99 is a few milliseconds)
    assert p99 < waiting.POLL * (1 - waiting.JITTER)


@pytest.mark.asyncio
async def test_aio_waits_through_new_queue_objects_share_one_subscription(client, database):
    ids = await aio.Queue("each", client).enqueue_many(["x"] * 120)  # more than the pool
    waiters = [asyncio.ensure_future(aio.Queue("each", client).wait(task_id, timeout=30))
               for task_id in ids]
    await asyncio.sleep(0.5)
    for _ in ids:
        complete_next("each", "ok")
    assert await asyncio.wait_for(asyncio.gather(*waiters), timeout=30) == ["ok"] * 120
    assert not aio.Outcomes.of(client).waiters


@pytest.mark.asyncio
async def test_aio_waits_canceled_leave_nothing_behind(client, database):
    queue = aio.Queue("gone", client)
    for _ in range(10):  # a cancel lost once in a few hundred made a round hang
        task_id = await queue.enqueue("x")
        for timeout in [0.0, 0.001, 0.003, 0.01, 0.03] * 8:  # canceled at every stage
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(queue.wait(task_id), timeout=timeout)
        await asyncio.sleep(0.3)
        outcomes = aio.Outcomes.of(client)
        assert not outcomes.waiters and not outcomes.subscribed and outcomes.reader is None
        complete_next("gone", "still told")
        assert await queue.wait(task_id, timeout=5) == "still told"
