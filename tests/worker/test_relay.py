"""A forked task process writes through its worker (issue 28, item 3): it opens no Redis
connection of its own unless its worker is gone or its own code uses Redis. Its worker
writes its outcome, its `Error`, its progress and checkpoints, fenced by its attempt,
and answers; an outcome Redis cannot take is tried again at later turns of the worker's
loop, which serves its other tasks meanwhile.

Connections are counted on the private server of the test run: its
`total_connections_received` before and after a worker, already connected and idle,
ran the tasks.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time

import pytest
from helpers import start_worker, wait_for
from relay_workers import HERE

from limpyd_blueque import Error, Job, Queue, RedisFull, Worker
from limpyd_blueque.protocol.scripts import Reservation
from limpyd_blueque.worker.outcomes import OutcomeRecorder, OutcomeStep
from limpyd_blueque.worker.processes import Channel
from limpyd_blueque.worker.relay import stored_already

pytestmark = pytest.mark.timeout(60)


def received(conn):
    return int(conn.info("stats")["total_connections_received"])


def connected(conn):
    return int(conn.info("clients")["connected_clients"])


def statuses(jobs):
    return [job.status.hget() for job in jobs]


@pytest.fixture
def ready_worker(redis_url, conn):
    """A `blueque-worker` on queue "r", connected and idle (it ran one task already)."""
    started = []

    def start(*options):
        worker = start_worker(redis_url, f"--pythonpath={HERE}", "--queues=r", "--timeout=0.2",
                              "--no-title", *options)
        started.append(worker)
        first = Queue.named("r").enqueue("{}")
        wait_for(lambda: first.status.hget() == "complete", timeout=20)
        time.sleep(0.3)  # its next spare is forked, its heartbeat beat
        return worker

    yield start
    for worker in started:
        worker.kill()
        worker.wait()


def test_a_plain_forked_task_opens_no_connection_to_redis(ready_worker, conn):
    ready_worker("--callback=relay_workers.quiet", "--concurrency=2")
    idle = connected(conn)
    before = received(conn)
    queue = Queue.named("r")
    sleeping = queue.enqueue('{"sleep": 1.0}')
    wait_for(lambda: sleeping.status.hget() == "started")
    time.sleep(0.3)
    assert connected(conn) == idle  # while it runs: not one connection more
    jobs = [sleeping] + [queue.enqueue("{}") for _ in range(10)]
    wait_for(lambda: set(statuses(jobs)) == {"complete"}, timeout=20)
    assert received(conn) == before  # eleven task processes, none connected
    assert {job.result.hget() for job in jobs} == {"quiet"}


def test_a_task_whose_own_code_uses_redis_connects_and_completes(ready_worker, conn):
    ready_worker("--callback=relay_workers.uses_redis")
    before = received(conn)
    jobs = [Queue.named("r").enqueue("{}") for _ in range(3)]
    wait_for(lambda: set(statuses(jobs)) == {"complete"}, timeout=20)
    written = conn.lrange("test:relay", 0, -1)  # the first task of `ready_worker` too
    assert len(written) == 4 and set(written) >= {job.task_id for job in jobs}
    assert received(conn) == before + 3  # each task process connected for its own code


def test_progress_checkpoints_and_a_large_checkpoint_are_written_by_the_worker(
        ready_worker, conn):
    ready_worker("--callback=relay_workers.reports", "--progress-interval=0")
    before = received(conn)
    size = 3 * 1024 * 1024  # far more than a socket buffer: read as it comes
    job = Queue.named("r").enqueue(f'{{"steps": 4, "size": {size}}}')
    wait_for(lambda: job.status.hget() == "complete", timeout=20)
    progress = job.progress()
    assert (progress.done, progress.total, progress.message) == (4, 4, "step 4")
    assert job.last_checkpoint() == {"blob": "x" * size}
    assert job.checkpoint_record().attempt == 1
    assert received(conn) == before


def test_a_failure_and_its_error_record_are_written_by_the_worker(ready_worker, conn):
    ready_worker("--callback=relay_workers.reports", "--requeue-times=0")
    before = received(conn)
    job = Queue.named("r").enqueue('{"steps": 1, "fail": "no luck"}')
    wait_for(lambda: job.status.hget() == "failed", timeout=20)
    assert job.error.hget() == "ValueError: no luck"
    # the Error record is written once the outcome is (its worker's next turn)
    errors = wait_for(lambda: Error.collection(job_pk=job.task_id).instances(), timeout=10)
    assert [(e.type.hget(), e.message.hget(), e.attempt.hget()) for e in errors] == [
        ("ValueError", "no luck", "1")]
    assert received(conn) == before


class FullForOneTask(OutcomeRecorder):
    """Refuses the outcome of one task as a full Redis would, `times` times."""

    def __init__(self, *args, task_id, times, **kwargs):
        super().__init__(*args, **kwargs)
        self.task_id, self.times, self.tries = task_id, times, []

    def try_once(self, job, outcome, *, retry):
        if job.task_id == self.task_id and len(self.tries) < self.times:
            self.tries.append(time.monotonic())
            raise RedisFull("Redis at here is full")
        return super().try_once(job, outcome, retry=retry)


def full_worker(task_id, times, retry_timeout, **options):
    worker = Worker("r", fork=True, update_title=False, timeout=0.2, **options)
    worker.outcomes = FullForOneTask(worker.id, task_id=task_id, times=times,
                                     retry_timeout=retry_timeout, log=worker.log)
    return worker


def test_an_outcome_redis_cannot_take_is_tried_again_while_other_tasks_go_on(database,
                                                                            caplog):
    caplog.set_level(logging.WARNING, logger="limpyd-blueque")
    queue = Queue.named("r")
    waiting = queue.enqueue("{}")
    others = [queue.enqueue("{}") for _ in range(4)]
    worker = full_worker(waiting.task_id, 3, 10, concurrency=2, max_loops=5,
                         callback=lambda job, queue: "done")
    worker.run()
    assert statuses([waiting, *others]) == ["complete"] * 5
    tries = worker.outcomes.tries
    assert len(tries) == 3 and tries[-1] - tries[0] >= 0.9  # one try per half second
    # the worker served the others meanwhile: each was complete before the waiting one
    assert all(float(job.updated.hget()) < float(waiting.updated.hget()) for job in others)
    assert sum("is full; retrying" in message for message in caplog.messages) == 3


def test_an_outcome_redis_cannot_take_in_time_puts_the_task_back_in_line(database):
    queue = Queue.named("r")
    job = queue.enqueue("{}")
    worker = full_worker(job.task_id, 1000, 1, max_loops=1,
                         callback=lambda job, queue: "done")
    worker.run()
    # its process could not record it (exit 75): not the task's fault
    assert (job.status.hget(), job.attempt.hget()) == ("pending", "1")


# -- the parts ------------------------------------------------------------------------------
def test_a_channel_carries_a_message_larger_than_its_buffers_as_it_comes():
    worker_end, task_end = Channel.pair()
    worker_end.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    big = {"text": "y" * 2_000_000}
    sender = threading.Thread(target=lambda: task_end.send(big) and task_end.send({"n": 2}))
    sender.start()
    got = []
    deadline = time.monotonic() + 10
    while len(got) < 2 and time.monotonic() < deadline:
        got.extend(worker_end.receive_ready())  # never waits
    sender.join()
    assert got == [big, {"n": 2}]
    task_end.close()
    assert worker_end.receive_ready() == [] and worker_end.ended
    assert worker_end.send({"late": True}) is False


def test_an_outcome_written_by_a_worker_that_died_is_recognized(database):
    queue = Queue.named("p")
    recorder = OutcomeRecorder("parts.host_1", retry_timeout=1)
    for outcome, also in [(OutcomeStep("complete", "r"), None),
                          (OutcomeStep("fail", "ValueError: x"), None),
                          (OutcomeStep("requeue", "ValueError: x"), None),
                          (OutcomeStep("requeue", "ValueError: x"), "taken again"),
                          (OutcomeStep("delay", delay=600), None)]:
        queue.enqueue("x")
        job, _ = Queue.reserve_from(["p"], "parts.host_1", pid=os.getpid())
        assert recorder.write(job, outcome) is True  # the worker wrote it
        if also == "taken again":  # and another worker took the task at once
            Queue.reserve_from(["p"], "parts.host_2", pid=1)
        assert recorder.step(job, outcome) is False  # the task process's own try
        assert recorder.recognized(job, outcome) is True, (outcome, also)
    queue.enqueue("x")
    job, _ = Queue.reserve_from(["p"], "parts.host_1", pid=os.getpid())
    assert recorder.write(job, OutcomeStep("fail", "TaskKilled: by someone")) is True
    assert recorder.recognized(job, OutcomeStep("complete", "r")) is False  # not its outcome


def test_a_task_filed_canceled_by_its_worker_is_recognized_as_canceled(database):
    queue = Queue.named("p")
    queue.enqueue("x")
    job, _ = Queue.reserve_from(["p"], "parts.host_1", pid=os.getpid())
    assert Job.lazy_connect(job.task_id).cancel() is True
    recorder = OutcomeRecorder("parts.host_1", retry_timeout=1)
    worker_copy = Job.from_reservation(job.task)
    assert recorder.complete(worker_copy, "r") is True
    assert worker_copy.settled == "canceled"
    assert recorder.recognized(job, OutcomeStep("complete", "r")) is True
    assert job.settled == "canceled"


def test_an_outcome_travels_as_plain_values():
    for outcome in (OutcomeStep("complete", "r"), OutcomeStep("requeue", "e", 3.5, -2),
                    OutcomeStep("delay", delay=0.0), OutcomeStep("cancel")):
        assert OutcomeStep.from_payload(outcome.to_payload()) == outcome
    assert [OutcomeStep(kind).status for kind in ("complete", "fail", "cancel", "requeue")] == [
        "complete", "failed", "canceled", "pending"]
    assert OutcomeStep("delay", delay=5).status == "scheduled"


def test_a_reservation_says_whether_a_task_must_be_cancelled_on_error(database):
    job = Queue.named("p").enqueue("x")
    job.cancel_on_error.hset("1")
    reserved, _ = Queue.reserve_from(["p"], "parts.host_1", pid=os.getpid())
    assert reserved.must_be_cancelled_on_error is True
    bare = Job.from_reservation(Reservation("t", "p", {}))  # read there: no round trip
    assert bare.must_be_cancelled_on_error is False


def test_an_error_record_its_worker_stored_before_dying_is_not_stored_again(database):
    queue = Queue.named("p")
    queue.enqueue("x")
    job, _ = Queue.reserve_from(["p"], "parts.host_1", pid=os.getpid())
    values = Error.error_values("p", job, ValueError("no"))
    assert stored_already(Error, values) is False
    OutcomeRecorder("parts.host_1", retry_timeout=1).store_error_values(Error, job, queue,
                                                                         values)
    assert stored_already(Error, values) is True
    later = Error.error_values("p", job, ValueError("no"))  # another failure of the task
    assert later["timestamp"] != values["timestamp"]
    assert stored_already(Error, later) is False
