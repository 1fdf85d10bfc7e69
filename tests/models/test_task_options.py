"""Task options on a real Redis, through the models: priorities, prepend, delay and eta,
identifiers, cancelling, job models, the redis-limpyd-jobs names, and bad input."""

from __future__ import annotations

import math
import multiprocessing
import time
from datetime import datetime, timedelta, timezone

import pytest
from jobs import OtherJob, RecordingJob

from limpyd_blueque import (
    MAX_PRIORITY,
    ConfigurationError,
    InvalidTransition,
    Job,
    Queue,
    TaskNotFound,
)
from limpyd_blueque.protocol.options import priority_of

LISTENER = "worker.example.com_4242"


@pytest.fixture
def queue(database):
    return Queue.named("opts")


def take_all(queues, listener=LISTENER):
    """The ids of every pending task of `queues`, in the order reserve gives them."""
    order = []
    while True:
        job, _ = Queue.reserve_from(queues, listener)
        if job is None:
            return order
        order.append(job.task_id)


def priority(job):
    return priority_of(job.priority.hget())


# -- priorities -------------------------------------------------------------------------------
def test_priority_0_stays_in_the_blueque_pending_list_and_others_in_the_prioritized_set(
        queue, conn):
    plain = queue.enqueue("a")
    high = queue.enqueue("b", priority=5)
    low = queue.enqueue("c", priority=-2)
    assert conn.lrange("blueque_pending_tasks_opts", 0, -1) == [plain.task_id]
    assert set(conn.zrange("blueque:prioritized:opts", 0, -1)) == {high.task_id, low.task_id}
    assert conn.hget(plain.key, "priority") is None  # a plain task is what blueque writes
    assert conn.hget(high.key, "priority") == "5"
    assert queue.counts()["pending"] == 3


def test_higher_priority_runs_sooner_fifo_within_a_priority_across_many_tasks(queue):
    expected = {}
    for n in range(60):
        level = [3, 0, -1, 7, 0, 3][n % 6]
        expected[queue.enqueue(str(n), priority=level).task_id] = (level, n)
    order = take_all(["opts"])
    assert order == sorted(expected, key=lambda task_id: (-expected[task_id][0],
                                                          expected[task_id][1]))


def test_the_highest_priority_of_all_the_queues_comes_first_then_queue_order(database):
    first, second = Queue.named("first"), Queue.named("second")
    a0 = first.enqueue("a0")
    b5 = second.enqueue("b5", priority=5)
    a5 = first.enqueue("a5", priority=5)
    b0 = second.enqueue("b0")
    bneg = second.enqueue("bneg", priority=-3)
    # priority first, whatever the queue; a tie goes to the queue given first
    assert take_all(["first", "second"]) == [a5.task_id, b5.task_id, a0.task_id, b0.task_id,
                                             bneg.task_id]


def test_prepend_puts_a_task_at_the_front_of_its_priority(queue):
    a = queue.enqueue("a")
    b = queue.enqueue("b", prepend=True)
    c = queue.enqueue("c", priority=2)
    d = queue.enqueue("d", priority=2, prepend=True)
    e = queue.enqueue("e", priority=2)
    assert take_all(["opts"]) == [d.task_id, c.task_id, e.task_id, b.task_id, a.task_id]


def test_enqueue_many_takes_common_and_per_task_options(queue, conn):
    jobs = queue.enqueue_many(["a", "b", "c"], priority=4,
                              options=[{}, {"priority": 0}, {"prepend": True}])
    assert [priority(job) for job in jobs] == [4, 0, 4]
    assert conn.lrange("blueque_pending_tasks_opts", 0, -1) == [jobs[1].task_id]
    assert take_all(["opts"]) == [jobs[2].task_id, jobs[0].task_id, jobs[1].task_id]


def test_one_round_trip_per_enqueue_with_options(queue, count_commands):
    with count_commands() as counter:
        queue.enqueue("x", priority=3, identifier="one", delay=10, ttr=30)
    assert counter.count == 1


# -- delay and eta ------------------------------------------------------------------------------
def test_delay_and_eta_schedule_a_task_that_joins_its_priority_when_due(queue, conn):
    now = time.time()
    delayed = queue.enqueue("d", delay=timedelta(seconds=30), priority=2)
    at = queue.enqueue("e", eta=datetime.fromtimestamp(now + 60, timezone.utc))
    assert delayed.status.hget() == "scheduled" and at.status.hget() == "scheduled"
    assert now + 29 < conn.zscore("blueque_scheduled_tasks_opts", delayed.task_id) < now + 31
    assert conn.zscore("blueque_scheduled_tasks_opts", at.task_id) == pytest.approx(now + 60)
    assert queue.count_delayed_jobs("opts") == 2
    assert queue.enqueue_due(now + 45) == [delayed.task_id]
    assert conn.zscore("blueque:prioritized:opts", delayed.task_id) is not None
    assert delayed.status.hget() == "pending"


def test_a_zero_delay_or_a_past_eta_is_pending_at_once(queue):
    assert queue.enqueue("a", delay=0).status.hget() == "pending"
    assert queue.enqueue("b", eta=time.time() - 5).status.hget() == "pending"


# -- identifiers --------------------------------------------------------------------------------
def test_an_identifier_waiting_returns_its_task_and_raises_its_priority(queue, conn):
    first = queue.enqueue("first", identifier="doc:1", priority=1)
    again = queue.enqueue("second", identifier="doc:1", priority=0)
    assert again.task_id == first.task_id
    assert first.parameters.hget() == "first" and priority(first) == 1
    raised = queue.enqueue("third", identifier="doc:1", priority=6)
    assert raised.task_id == first.task_id and priority(first) == 6
    assert conn.zcard("blueque:prioritized:opts") == 1
    assert conn.zscore("blueque:prioritized:opts", first.task_id) < -5 * 2**32
    assert len(conn.keys("blueque_task_*")) == 1


def test_an_identifier_raised_from_0_leaves_the_blueque_list(queue, conn):
    task = queue.enqueue("x", identifier="doc:2")
    other = queue.enqueue("y")
    assert queue.enqueue("x", identifier="doc:2", priority=1).task_id == task.task_id
    assert conn.lrange("blueque_pending_tasks_opts", 0, -1) == [other.task_id]
    assert take_all(["opts"]) == [task.task_id, other.task_id]


def test_an_identifier_is_free_again_once_its_task_runs_or_is_canceled(queue, conn):
    first = queue.enqueue("x", identifier="doc:3")
    take_all(["opts"])
    assert conn.hget("blueque:identifiers:opts", "doc:3") is None
    second = queue.enqueue("x", identifier="doc:3")
    assert second.task_id != first.task_id
    assert second.cancel()
    third = queue.enqueue("x", identifier="doc:3")
    assert third.task_id not in (first.task_id, second.task_id)


def test_a_scheduled_task_keeps_its_identifier_and_prepend_moves_a_waiting_one(queue):
    later = queue.enqueue("later", identifier="doc:4", delay=60)
    assert queue.enqueue("now", identifier="doc:4").task_id == later.task_id
    a = queue.enqueue("a", identifier="a")
    b = queue.enqueue("b")
    assert queue.enqueue("a again", identifier="a", prepend=True).task_id == a.task_id
    assert take_all(["opts"]) == [a.task_id, b.task_id]


def _enqueue_identifiers(redis_url, identifiers, results):
    from limpyd_blueque import BluequeDatabase, BluequeModel

    BluequeModel.use_database(BluequeDatabase(redis_url))
    queue = Queue.named("race")
    ids = []
    for _ in range(3):
        ids += [queue.enqueue("x", identifier=name).task_id for name in identifiers]
    results.put(ids)


def test_racing_producers_make_exactly_one_task_per_identifier(redis_url, database, conn):
    identifiers = [f"item:{n}" for n in range(200)]
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    producers = [context.Process(target=_enqueue_identifiers,
                                 args=(redis_url, identifiers, results)) for _ in range(4)]
    for producer in producers:
        producer.start()
    returned = [results.get(timeout=60) for _ in producers]
    for producer in producers:
        producer.join(30)
    assert len(conn.keys("blueque_task_*")) == len(identifiers)
    assert conn.llen("blueque_pending_tasks_race") == len(identifiers)
    by_identifier = {name: {ids[i] for ids in returned for i in range(n, len(ids), 200)}
                     for n, name in enumerate(identifiers)}
    assert all(len(ids) == 1 for ids in by_identifier.values())


# -- cancelling -----------------------------------------------------------------------------------
@pytest.mark.parametrize("options", [{}, {"priority": 3}, {"delay": 60}],
                         ids=["pending", "prioritized", "scheduled"])
def test_cancel_takes_a_waiting_task_out_of_every_structure(queue, conn, options):
    job = queue.enqueue("x", identifier="c", **options)
    assert job.cancel() is True
    assert job.status.hget() == "canceled"
    assert conn.llen("blueque_pending_tasks_opts") == 0
    assert conn.zcard("blueque:prioritized:opts") == 0
    assert conn.zcard("blueque_scheduled_tasks_opts") == 0
    assert conn.hlen("blueque:identifiers:opts") == 0
    assert conn.lrange("blueque:canceled:opts", 0, -1) == [job.task_id]
    assert [j.task_id for j in Job.collection(queue="opts", status="canceled").instances()] == [
        job.task_id]
    assert job.cancel() is False  # finished now
    assert take_all(["opts"]) == []


def test_cancel_on_a_finished_task_is_false_and_on_a_running_one_a_request(queue):
    done = queue.enqueue("x")
    job, _ = Queue.reserve_from(["opts"], LISTENER)
    assert job.cancel() is True  # asked: its holder stops it
    assert job.status.hget() == "reserved" and job.cancel_requested()
    assert job.complete("ok") is True  # the cancel came first: filed as canceled
    assert job.status.hget() == "canceled" and job.settled == "canceled"
    assert done.cancel() is False
    with pytest.raises(TaskNotFound):
        Job.lazy_connect("nothing-here").cancel()


def test_a_canceled_or_failed_task_can_be_requeued_and_deleted(queue, conn):
    job = queue.enqueue("x", priority=2)
    job.cancel()
    assert job.requeue(priority=4) is True
    assert job.status.hget() == "pending" and priority(job) == 4
    assert conn.llen("blueque:canceled:opts") == 0
    taken, _ = Queue.reserve_from(["opts"], LISTENER)
    taken.fail("boom")
    assert job.requeue(delayed_for=30) is True
    assert job.status.hget() == "scheduled"
    assert conn.llen("blueque_failed_tasks_opts") == 0
    assert job.uncounted.hget() == "1"  # its failed attempt no longer counts
    with pytest.raises(InvalidTransition, match="held, failed, canceled, expired or buried"):
        job.requeue()
    job.cancel()
    job.delete()
    assert not conn.exists(job.key) and conn.llen("blueque:canceled:opts") == 0


# -- job models and redis-limpyd-jobs names --------------------------------------------------------
def test_a_task_records_its_job_model(queue):
    job = queue.enqueue("x", model=OtherJob)
    assert isinstance(job, OtherJob)
    assert job.model.hget() == "jobs.OtherJob" == OtherJob.get_model_repr()
    named = queue.enqueue("y", model="jobs.OtherJob")  # by name: an imported Job subclass
    assert named.model.hget() == "jobs.OtherJob"


def test_add_job_has_redis_limpyd_jobs_meaning(database, conn):
    class Exports(Job):
        queue_name = "exports"

    first = Exports.add_job("customer:1", priority=1, parameters={"n": 1}, ttr=120)
    assert isinstance(first, Exports)
    assert first.model.hget() == Exports.get_model_repr()
    assert first.ttr.hget() == "120" and first.parameters.hget() == '{"n":1}'
    assert Exports.add_job("customer:1", priority=3).task_id == first.task_id
    assert priority(first) == 3
    later = Exports.add_job("customer:2", delayed_for=60)
    assert later.status.hget() == "scheduled"
    assert Queue.count_waiting_jobs("exports") == 1
    assert Queue.count_waiting_jobs(["exports", "none"]) == 1
    assert Queue.count_delayed_jobs(["exports"]) == 1
    with pytest.raises(ConfigurationError, match="queue_name"):
        Job.add_job("x")


def test_duration_is_the_time_the_last_attempt_ran(queue):
    job = queue.enqueue("x")
    assert job.duration is None
    taken, _ = Queue.reserve_from(["opts"], LISTENER, pid=123)
    time.sleep(0.05)
    taken.complete("ok")
    assert timedelta(seconds=0.04) < job.duration < timedelta(seconds=5)


# -- bad input -------------------------------------------------------------------------------------
@pytest.mark.parametrize("options, message", [
    ({"priority": 1.5}, "priority must be a whole number"),
    ({"priority": "2"}, "priority must be a whole number"),
    ({"priority": True}, "priority must be a whole number"),
    ({"priority": MAX_PRIORITY + 1}, "priority must be at most"),
    ({"delay": -1}, "delay must be at least 0"),
    ({"delay": math.nan}, "delay must be a finite number"),
    ({"delay": "soon"}, "delay must be a number"),
    ({"eta": "tomorrow"}, "eta must be a number"),
    ({"eta": math.inf}, "eta must be a finite number"),
    ({"delay": 1, "eta": time.time() + 5}, "a delay or an eta, not both"),
    ({"model": int}, "model must be a Job subclass"),
    ({"model": "not a name!"}, "unknown job model"),
    ({"model": "app.jobs.Missing"}, "unknown job model 'app.jobs.Missing'"),
    ({"identifier": ""}, "identifier must be a str"),
    ({"identifier": 5}, "identifier must be a str"),
    ({"prepend": "yes"}, "prepend must be True or False"),
    ({"colour": "red"}, "unknown task option or field 'colour'"),
    ({"status": "complete"}, "written by the queue"),
    ({"ttr": -5}, "task ttr must be above 0"),
])
def test_bad_options_are_refused_before_anything_is_written(queue, conn, options, message):
    with pytest.raises(ConfigurationError, match=message):
        queue.enqueue("x", **options)
    with pytest.raises(ConfigurationError, match=message):
        queue.enqueue_many(["a", "b"], options=[{}, options])
    assert conn.dbsize() == 0


def test_per_task_options_must_be_one_mapping_per_task(queue, conn):
    with pytest.raises(ConfigurationError, match="one per task"):
        queue.enqueue_many(["a", "b"], options=[{}])
    with pytest.raises(ConfigurationError, match=r"options\[1\] must be a mapping"):
        queue.enqueue_many(["a", "b"], options=[{}, 3])
    assert conn.dbsize() == 0


def test_recording_job_model_instances_come_back_from_enqueue_many(queue):
    jobs = queue.enqueue_many(["a", "b"], options=[{"model": RecordingJob}, {}])
    assert isinstance(jobs[0], RecordingJob) and type(jobs[1]) is Job


def test_deep_clean_relines_a_lost_prioritized_task_and_drops_stale_identifiers(queue, conn):
    from limpyd_blueque.upkeep.cleaning import deep_clean

    lost = queue.enqueue("x", priority=4)
    conn.zrem("blueque:prioritized:opts", lost.task_id)  # as if a client lost it
    stale = queue.enqueue("y", identifier="gone")
    # run and finished by a Blueque client, which knows nothing of identifiers
    conn.rpoplpush("blueque_pending_tasks_opts", "blueque_complete_tasks_opts")
    conn.hset(stale.key, "status", "complete")
    waiting = queue.enqueue("z", identifier="kept")
    report = deep_clean(Queue)
    assert conn.zscore("blueque:prioritized:opts", lost.task_id) is not None
    assert conn.hgetall("blueque:identifiers:opts") == {"kept": waiting.task_id}
    assert ("blueque:identifiers:opts", "gone") in report.dropped


def test_priority_and_identifier_change_only_through_the_steps(queue, conn):
    from limpyd_blueque import ProtocolError

    job = queue.enqueue("x", priority=2, identifier="i")
    with pytest.raises(ProtocolError, match="only through the protocol steps"):
        job.priority.hset(9)
    with pytest.raises(ProtocolError, match="only through the protocol steps"):
        job.hmset(identifier="j")
    assert priority(job) == 2 and job.identifier.hget() == "i"
