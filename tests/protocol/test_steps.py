"""Each protocol step on the models leaves exactly the Blueque state the protocol describes."""

import time

import pytest

from limpyd_blueque import InvalidTransition, Job, Queue, Status, TaskNotFound

LISTENER = "worker.example.com_4242"
OTHER = "other.example.com_7"


@pytest.fixture
def queue(database):
    return Queue.named("jobs")


def test_enqueue_writes_hash_pending_list_and_queue_score(queue, conn):
    before = time.time()
    job = queue.enqueue('{"n": 1}')
    task = conn.hgetall(f"blueque_task_{job.pk.get()}")
    assert task["status"] == "pending"
    assert task["queue"] == "jobs"
    assert task["parameters"] == '{"n": 1}'
    assert task["created"] == task["updated"]
    assert before <= float(task["created"]) <= time.time()
    assert conn.lrange("blueque_pending_tasks_jobs", 0, -1) == [job.pk.get()]
    assert conn.zscore("blueque_queues", "jobs") == 0


def test_enqueue_keeps_fifo_order(queue, conn):
    jobs = [queue.enqueue(str(i)) for i in range(3)]
    # pushed on the left, taken from the right
    assert conn.lrange("blueque_pending_tasks_jobs", 0, -1) == [j.pk.get() for j in reversed(jobs)]
    taken = [queue.reserve(LISTENER).pk.get() for _ in range(3)]
    assert taken == [j.pk.get() for j in jobs]


def test_non_string_parameters_are_stored_as_json(queue):
    job = queue.enqueue({"b": [1, 2], "a": None})
    assert job.parameters.hget() == '{"b":[1,2],"a":null}'


def test_enqueue_many_creates_every_task_in_order(queue, conn):
    jobs = queue.enqueue_many([{"n": i} for i in range(2500)], chunk=1000)
    assert conn.llen("blueque_pending_tasks_jobs") == 2500
    assert conn.lindex("blueque_pending_tasks_jobs", -1) == jobs[0].pk.get()
    assert jobs[1234].parameters.hget() == '{"n":1234}'


def test_schedule_stores_eta_in_hash_and_sorted_set(queue, conn):
    eta = time.time() + 3600
    job = queue.schedule("later", eta)
    task = conn.hgetall(job.key)
    assert task["status"] == "scheduled"
    assert float(task["eta"]) == pytest.approx(eta)
    assert conn.zscore("blueque_scheduled_tasks_jobs", job.pk.get()) == pytest.approx(eta)
    assert conn.llen("blueque_pending_tasks_jobs") == 0


def test_schedule_in_the_past_enqueues_at_once(queue, conn):
    job = queue.schedule("now", time.time() - 10)
    assert job.status.hget() == "pending"
    assert conn.zcard("blueque_scheduled_tasks_jobs") == 0


def test_enqueue_due_moves_only_due_tasks(queue, conn):
    due = queue.schedule("due", time.time() + 1)
    later = queue.schedule("later", time.time() + 3600)
    moved = queue.enqueue_due(now=time.time() + 2)
    assert moved == [due.pk.get()]
    assert due.status.hget() == "pending"
    assert later.status.hget() == "scheduled"
    assert conn.lrange("blueque_pending_tasks_jobs", 0, -1) == [due.pk.get()]
    assert conn.zrange("blueque_scheduled_tasks_jobs", 0, -1) == [later.pk.get()]
    assert queue.enqueue_due(now=time.time() + 2) == []


def test_reserve_moves_id_and_sets_status_in_one_step(queue, conn):
    job = queue.enqueue("x")
    reserved = queue.reserve(LISTENER)
    assert reserved.pk.get() == job.pk.get()
    task = conn.hgetall(job.key)
    assert (task["status"], task["node"], task["attempt"]) == ("reserved", LISTENER, "1")
    assert conn.lrange(f"blueque_reserved_tasks_jobs_{LISTENER}", 0, -1) == [job.pk.get()]
    assert conn.llen("blueque_pending_tasks_jobs") == 0
    assert float(task["updated"]) >= float(task["created"])


def test_reserve_on_empty_queue_returns_none_and_writes_nothing(queue, conn):
    assert queue.reserve(LISTENER) is None
    assert conn.keys("*") == []


def test_reserve_from_takes_queues_in_order(database, conn):
    low, high = Queue.named("low"), Queue.named("high")
    low_job = low.enqueue("l")
    high_job = high.enqueue("h")
    job, reservation = Queue.reserve_from(["high", "low"], LISTENER)
    assert (job.pk.get(), reservation.queue) == (high_job.pk.get(), "high")
    job, reservation = Queue.reserve_from(["high", "low"], LISTENER)
    assert (job.pk.get(), reservation.queue) == (low_job.pk.get(), "low")


def test_reserve_drops_ids_without_a_task_hash(queue, conn):
    conn.lpush("blueque_pending_tasks_jobs", "ghost")
    job = queue.enqueue("real")
    conn.lpush("blueque_pending_tasks_jobs", "ghost2")  # newest, taken last
    passed = []
    reserved, _ = Queue.reserve_from(["jobs"], LISTENER, report=passed.append)
    assert passed[0].dropped == ["ghost"]
    assert reserved.pk.get() == job.pk.get()
    assert conn.lrange(f"blueque_reserved_tasks_jobs_{LISTENER}", 0, -1) == [job.pk.get()]


def test_reserve_with_pid_starts_the_task_in_the_same_step(queue, conn):
    job = queue.enqueue("x")
    queue.reserve(LISTENER, pid=99)
    assert job.status.hget() == "started"
    assert job.pid.hget() == "99"
    assert conn.smembers("blueque_started_tasks_jobs") == {f"{LISTENER} 99 {job.pk.get()}"}


def test_start_records_pid_in_started_set(queue, conn):
    job = queue.enqueue("x")
    queue.reserve(LISTENER).start(LISTENER, 1234)
    assert conn.hget(job.key, "status") == "started"
    assert conn.hget(job.key, "pid") == "1234"
    assert conn.smembers("blueque_started_tasks_jobs") == {f"{LISTENER} 1234 {job.pk.get()}"}


def test_start_by_another_listener_is_refused(queue, conn):
    job = queue.enqueue("x")
    queue.reserve(LISTENER)
    with pytest.raises(InvalidTransition, match="must be reserved by"):
        Job.load(job.pk.get()).start(OTHER, 1)
    assert job.status.hget() == "reserved"
    assert conn.scard("blueque_started_tasks_jobs") == 0


def test_complete_moves_task_to_complete_list(queue, conn):
    job = queue.enqueue("x")
    running = queue.reserve(LISTENER)
    running.start(LISTENER, 55)
    assert running.complete({"ok": True}) is True
    task = conn.hgetall(job.key)
    assert (task["status"], task["result"]) == ("complete", '{"ok":true}')
    assert conn.lrange("blueque_complete_tasks_jobs", 0, -1) == [job.pk.get()]
    assert conn.llen(f"blueque_reserved_tasks_jobs_{LISTENER}") == 0
    assert conn.scard("blueque_started_tasks_jobs") == 0
    assert conn.zcard("blueque:leases:jobs") == 0


def test_fail_moves_task_to_failed_list(queue, conn):
    job = queue.enqueue("x")
    queue.reserve(LISTENER, pid=3).fail("boom")
    task = conn.hgetall(job.key)
    assert (task["status"], task["error"]) == ("failed", "boom")
    assert conn.lrange("blueque_failed_tasks_jobs", 0, -1) == [job.pk.get()]
    assert conn.scard("blueque_started_tasks_jobs") == 0


def test_a_reserved_task_can_be_completed_without_start(queue, conn):
    job = queue.enqueue("x")
    assert queue.reserve(LISTENER).complete("done")
    assert conn.llen(f"blueque_reserved_tasks_jobs_{LISTENER}") == 0
    assert job.status.hget() == "complete"


def test_completion_happens_exactly_once(queue, conn):
    job = queue.enqueue("x")
    running = queue.reserve(LISTENER, pid=1)
    assert running.complete("first") is True
    assert running.complete("second") is False
    assert running.fail("late") is False
    assert job.result.hget() == "first"
    assert conn.llen("blueque_complete_tasks_jobs") == 1


def test_a_stale_attempt_cannot_finish_the_task(queue, conn):
    job = queue.enqueue("x")
    queue.reserve(LISTENER, pid=1)
    # the holder of attempt 1 is told it lost the task once attempt 2 holds it
    conn.hset(job.key, "attempt", "2")
    assert Job.load(job.pk.get()).complete("stale", attempt=1) is False
    assert job.status.hget() == "started"
    assert Job.load(job.pk.get()).complete("fresh", attempt=2) is True


def test_another_listener_cannot_finish_the_task(queue):
    job = queue.enqueue("x")
    queue.reserve(LISTENER, pid=1)
    assert Job.load(job.pk.get()).complete("x", listener_id=OTHER) is False
    assert job.status.hget() == "started"


def test_delete_finished_task_removes_hash_and_list_entry(queue, conn):
    done = queue.enqueue("a")
    queue.reserve(LISTENER, pid=1).complete("ok")
    failed = queue.enqueue("b")
    queue.reserve(LISTENER, pid=1).fail("ko")
    done.delete()
    Job.load(failed.pk.get()).delete()
    assert not conn.exists(done.key) and not conn.exists(failed.key)
    assert conn.llen("blueque_complete_tasks_jobs") == 0
    assert conn.llen("blueque_failed_tasks_jobs") == 0


def test_deleting_an_unfinished_task_as_blueque_does_is_refused_and_changes_nothing(
        queue, conn):
    job = queue.enqueue("x")
    before = conn.hgetall(job.key)
    with pytest.raises(InvalidTransition, match="only a complete, failed, canceled or expired"):
        job.delete(finished_only=True)
    assert conn.hgetall(job.key) == before
    assert conn.llen("blueque_pending_tasks_jobs") == 1


def test_deleting_a_running_task_is_refused_and_a_waiting_one_leaves_every_structure(
        queue, conn):
    held = queue.enqueue("x")
    Queue.reserve_from(["jobs"], LISTENER)
    before = conn.hgetall(held.key)
    with pytest.raises(InvalidTransition, match="a running task cannot be deleted"):
        held.delete()
    assert conn.hgetall(held.key) == before
    waiting = queue.enqueue("y", priority=3, identifier="w", ttl=60)
    waiting.delete()
    assert not conn.exists(waiting.key)
    assert conn.zcard("blueque:prioritized:jobs") == 0
    assert conn.hlen("blueque:identifiers:jobs") == 0
    assert conn.zcard("blueque:expiry:jobs") == 0


def test_delete_task_checks_the_queue(database):
    job = Queue.named("a").enqueue("x")
    Queue.named("a").reserve(LISTENER).complete("")
    with pytest.raises(InvalidTransition, match="it is in queue 'a'"):
        Queue.named("b").delete_task(Job.load(job.pk.get()))
    assert job.status.hget() == "complete"


def test_listeners_are_counted_once_in_queues(queue, conn):
    assert queue.add_listener(LISTENER) is True
    assert queue.add_listener(LISTENER) is False
    assert queue.add_listener(OTHER) is True
    assert conn.smembers("blueque_listeners_jobs") == {LISTENER, OTHER}
    assert Queue.listener_counts() == {"jobs": 2}
    assert queue.remove_listener(LISTENER) is True
    assert queue.remove_listener(LISTENER) is False
    assert Queue.listener_counts() == {"jobs": 1}


def test_every_step_sets_updated(queue, conn):
    job = queue.enqueue("x")
    seen = [float(conn.hget(job.key, "updated"))]
    for step in (lambda: queue.reserve(LISTENER), lambda: Job.load(job.pk.get()).start(LISTENER, 1),
                 lambda: Job.load(job.pk.get()).complete("r")):
        time.sleep(0.002)
        step()
        seen.append(float(conn.hget(job.key, "updated")))
    assert seen == sorted(seen) and len(set(seen)) == 4


def test_unknown_task_raises_task_not_found(database):
    with pytest.raises(TaskNotFound, match="no task with id 'nope'"):
        Job.load("nope")
    with pytest.raises(TaskNotFound):
        Job.lazy_connect("nope").data()


def test_status_is_only_changed_by_protocol_steps(queue):
    from limpyd_blueque import ProtocolError

    job = queue.enqueue("x")
    with pytest.raises(ProtocolError, match="protocol steps"):
        job.status.hset("complete")
    with pytest.raises(ProtocolError):
        job.hmset(status="failed")
    assert job.status.hget() == Status.PENDING


def test_a_task_written_by_another_client_loads_as_a_job(database, conn):
    conn.hset("blueque_task_foreign", mapping={"status": "pending", "queue": "jobs",
                                               "parameters": "p", "created": 1.5, "updated": 2.5})
    job = Job.load("foreign")
    data = job.data()
    assert (data.status, data.queue, data.parameters, data.created, data.pid) == (
        "pending", "jobs", "p", 1.5, None)


@pytest.mark.parametrize("outcome", ["complete", "fail"])
def test_a_task_whose_cancel_wins_the_race_keeps_no_result_nor_error(database, conn, outcome):
    queue = Queue.named("race")
    job = queue.enqueue("x")
    taken, _ = Queue.reserve_from(["race"], LISTENER, pid=4242)
    assert taken.task_id == job.task_id
    assert job.cancel() is True  # asked while it runs: the holder is told
    step = getattr(taken, outcome)
    step('"its value"', listener_id=LISTENER, attempt=1)
    fields = conn.hgetall(f"blueque_task_{job.task_id}")
    assert fields["status"] == "canceled"
    assert "result" not in fields and "error" not in fields
    assert job.task_id in conn.lrange("blueque:canceled:race", 0, -1)
