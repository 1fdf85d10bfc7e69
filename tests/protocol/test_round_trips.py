"""Each hot-path step costs one round trip to Redis, whatever the ORM does elsewhere."""

import pytest

from limpyd_blueque import Queue

LISTENER = "h_1"


@pytest.fixture
def queue(database):
    q = Queue.named("rt")
    q.scripts()  # scripts are loaded once per connection, before any step
    return q


def test_enqueue_is_one_round_trip(queue, count_commands):
    with count_commands() as counter:
        queue.enqueue({"n": 1})
    assert counter.commands == ["EVALSHA"]


def test_bulk_enqueue_is_one_round_trip_per_chunk(queue, count_commands):
    with count_commands() as counter:
        queue.enqueue_many(range(2500), chunk=1000)
    assert counter.commands == ["EVALSHA"] * 3


def test_schedule_and_enqueue_due_are_one_round_trip_each(queue, count_commands):
    import time

    with count_commands() as counter:
        queue.schedule("x", time.time() + 60)
        queue.enqueue_due(now=time.time() + 120)
    assert counter.commands == ["EVALSHA", "EVALSHA"]


def test_reserve_start_complete_are_one_round_trip_each(queue, count_commands):
    queue.enqueue("x")
    with count_commands() as counter:
        job = queue.reserve(LISTENER)
    assert counter.count == 1
    with count_commands() as counter:
        job.start(LISTENER, 12)
    assert counter.count == 1
    with count_commands() as counter:
        assert job.complete("done")
    assert counter.commands == ["EVALSHA"]


def test_a_task_of_a_limited_group_is_reserved_and_completed_in_one_round_trip_each(
        queue, count_commands):
    queue.set_limit("*", max_running=5, max_starts=100, per=60)
    queue.set_limit(None, max_running=50)
    queue.enqueue_many(["x", "y"], group="customer:42")
    with count_commands() as counter:
        job, _ = Queue.reserve_from(["rt"], LISTENER, pid=5)
    assert job is not None and counter.commands == ["EVALSHA"]
    with count_commands() as counter:
        assert job.complete("done", listener_id=LISTENER)
    assert counter.commands == ["EVALSHA"]


def test_reserve_and_start_together_then_fail_is_two_round_trips(queue, count_commands):
    queue.enqueue("x")
    with count_commands() as counter:
        job = queue.reserve(LISTENER, pid=5)
        job.fail("err")
    assert counter.commands == ["EVALSHA", "EVALSHA"]


def test_listener_steps_are_one_round_trip_each(queue, count_commands):
    with count_commands() as counter:
        queue.add_listener(LISTENER)
        queue.remove_listener(LISTENER)
    assert counter.commands == ["EVALSHA", "EVALSHA"]


@pytest.mark.parametrize("fork", [False, True], ids=["in-process", "forked"])
def test_worker_costs_two_round_trips_per_task_in_both_modes(
        queue, count_commands, fork):
    from jobs import noop

    from limpyd_blueque import Worker

    queue.enqueue_many(range(20))
    worker = Worker("rt", callback=noop, fork=fork, max_loops=20, timeout=0.2,
                    schedule_interval=3600, clean_interval=3600, heartbeat_interval=3600,
                    ttr=36000)
    # what a worker does once a second or two, whatever its tasks (its counters written,
    # the pauses and its orders read), is not done within this window
    worker.tally.interval = worker.controls.interval = 3600
    worker.run_started()
    worker.move_due_tasks()  # the periodic work is done once now, not again for an hour
    worker.clean()
    with count_commands() as counter:
        while not worker.must_stop():
            worker.run_once()
        while len(worker.tasks):
            worker.collect()
    worker.run_ended()
    evalsha = counter.commands.count("EVALSHA")
    assert evalsha == 20 * 2  # reserve and start together, then complete
    assert counter.count == evalsha  # nothing but the steps themselves
