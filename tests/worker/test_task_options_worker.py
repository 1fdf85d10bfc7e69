"""Task options through real workers: tasks that delay themselves, several job models in
one queue, and priorities across several worker processes."""

from __future__ import annotations

import random

import pytest
from helpers import start_worker, wait_for
from jobs import DelayingJob, OtherJob, RecordingJob, events

from limpyd_blueque import Error, Job, Queue, Worker

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def queue(database):
    return Queue.named("w")


def names(entries):
    return [entry["event"] for entry in entries]


@pytest.mark.parametrize("how", ["method", "raise"])
@pytest.mark.parametrize("fork", [True, False], ids=["forked", "in-process"])
def test_a_task_that_delays_itself_runs_again_later_without_using_a_retry(
        queue, conn, fork, how):
    job = queue.enqueue({"delays": 1, "wait": 0.3, "raise": how == "raise"},
                        model=DelayingJob)
    worker = Worker("w", job_model=RecordingJob, job_models=[DelayingJob], fork=fork,
                    max_loops=1, timeout=0.2, requeue_times=0, schedule_interval=0.1)
    worker.run()
    assert job.status.hget() == "scheduled"
    assert names(events(conn, job.task_id)) == ["on_started", "run", "on_delayed"]
    assert job.uncounted.hget() == "1"
    assert job.result.hget() is None and job.error.hget() is None
    assert not Error.collection(job_pk=job.task_id)
    Worker("w", job_model=RecordingJob, job_models=[DelayingJob], fork=fork, max_loops=1,
           timeout=2, schedule_interval=0.1).run()
    assert job.status.hget() == "complete"
    assert job.attempt.hget() == "2"
    assert job.result.hget() == '{"runs":2}'


def test_a_delayed_task_is_not_taken_back_as_a_failure_by_max_attempts(queue, conn):
    job = queue.enqueue({"delays": 3, "wait": 0.05}, model=DelayingJob, max_attempts=2)
    Worker("w", job_model=RecordingJob, job_models=[DelayingJob], fork=False, max_loops=4,
           timeout=1, schedule_interval=0.05).run()
    assert job.status.hget() == "complete"
    assert job.attempt.hget() == "4" and job.uncounted.hget() == "3"


def test_a_bad_delay_fails_the_task(queue, conn):
    job = queue.enqueue({"delays": 1, "wait": -3, "raise": True}, model=DelayingJob)
    Worker("w", job_model=RecordingJob, job_models=[DelayingJob], fork=False, max_loops=1,
           timeout=0.2).run()
    assert job.status.hget() == "failed"
    assert "delay must be at least 0" in job.error.hget()


def test_each_task_runs_as_its_own_model_and_an_unknown_model_fails(queue, conn):
    plain = queue.enqueue({"n": 1})
    other = queue.enqueue({}, model=OtherJob)
    stranger = queue.enqueue({})
    stranger.model.hset("os.system")  # as another producer, or another client, wrote it
    worker = Worker("w", job_model=RecordingJob, job_models=[OtherJob], fork=True,
                    max_loops=3, timeout=0.3, requeue_times=3)
    worker.run()
    assert plain.status.hget() == "complete" and plain.result.hget() == '{"done":1}'
    assert other.status.hget() == "complete" and other.result.hget() == "other"
    assert [e["model"] for e in events(conn, other.task_id) if e["event"] == "other"] == [
        "OtherJob"]
    assert stranger.status.hget() == "failed"  # never requeued, never imported
    assert "UnknownJobModel" in stranger.error.hget()
    assert "'os.system'" in stranger.error.hget()
    errors = Error.collection(job_pk=stranger.task_id).instances()
    assert [error.type.hget() for error in errors] == ["UnknownJobModel"]


def test_a_task_naming_the_default_model_runs_as_it(queue, conn):
    job = queue.enqueue({"n": 2}, model=RecordingJob)
    Worker("w", job_model=RecordingJob, fork=False, max_loops=1, timeout=0.2).run()
    assert job.status.hget() == "complete"
    assert Job.load(job.task_id).model.hget() == RecordingJob.get_model_repr()


def test_priorities_order_the_tasks_across_several_worker_processes(redis_url, queue, conn):
    levels = [level for level in range(8) for _ in range(5)]
    random.Random(7).shuffle(levels)
    jobs = [(queue.enqueue("0.05", priority=level), level) for level in levels]
    workers = [start_worker(redis_url, "--queues=w", "--callback=jobs.slow_callback",
                            "--concurrency=2", "--timeout=0.2", "--max-loops=40")
               for _ in range(2)]
    try:
        wait_for(lambda: queue.counts()["complete"] == len(jobs), timeout=60)
    finally:
        for worker in workers:
            worker.terminate()
            worker.wait(20)
    started = {job.task_id: float(job.started_at.hget()) for job, _ in jobs}
    late = [(a_level, b_level) for a, a_level in jobs for b, b_level in jobs
            if a_level > b_level and started[a.task_id] > started[b.task_id] + 0.1]
    assert not late, f"{len(late)} pairs ran out of priority order"
    print(f"\n{len(jobs)} tasks, 8 priorities, 2 workers x 2 slots: none out of order")
