"""The worker on a real Redis and real processes: hooks, execution modes, failures, concurrency."""

from __future__ import annotations

import os
import time
from datetime import date, datetime, timedelta, timezone

import pytest
from jobs import RecordingJob, callback, events

from limpyd_blueque import ConfigurationError, Error, Job, Queue, Worker

pytestmark = pytest.mark.timeout(60)


def make_worker(**options):
    settings = dict(queues="w", job_model=RecordingJob, timeout=0.2, ttr=30)
    settings.update(options)
    return Worker(**settings)


def names(entries):
    return [e["event"] for e in entries]


@pytest.fixture
def queue(database):
    return Queue.named("w")


@pytest.mark.parametrize("fork", [True, False], ids=["forked", "in-process"])
def test_hooks_run_in_order_around_a_successful_task(queue, conn, fork):
    job = queue.enqueue({"n": 7})
    make_worker(fork=fork, max_loops=1).run()
    entries = events(conn, job.pk.get())
    assert names(entries) == ["on_started", "run", "ran", "on_success"]
    assert entries[-1]["result"] == {"done": 7}
    assert entries[1]["queue"] == "w" and entries[1]["attempt"] == "1"
    assert (entries[0]["pid"] != os.getpid()) is fork
    assert job.status.hget() == "complete"
    assert job.result.hget() == '{"done":7}'


@pytest.mark.parametrize("fork", [True, False], ids=["forked", "in-process"])
def test_hooks_run_in_order_around_a_failing_task(queue, conn, fork):
    job = queue.enqueue({"fail": "bad input", "code": 42})
    make_worker(fork=fork, max_loops=1).run()
    entries = events(conn, job.pk.get())
    assert names(entries) == ["on_started", "run", "on_error"]
    assert (entries[-1]["type"], entries[-1]["message"], entries[-1]["trace"]) == (
        "ValueError", "bad input", True)
    assert job.status.hget() == "failed"
    assert job.error.hget() == "ValueError: bad input"
    error = Error.collection_for_job(job).instances()[0]
    stored = (error.type.hget(), error.code.hget(), error.message.hget())
    assert stored == ("ValueError", "42", "bad input")
    assert "Traceback" in error.traceback.hget()


@pytest.mark.parametrize("fork", [True, False], ids=["forked", "in-process"])
def test_failed_task_is_requeued_then_failed_when_retries_run_out(queue, conn, fork):
    job = queue.enqueue({"fail": "flaky"})
    make_worker(fork=fork, max_loops=2, requeue_times=1, requeue_delay_delta=0,
                requeue_priority_delta=-2).run()
    assert names(events(conn, job.pk.get())) == [
        "on_started", "run", "on_error", "on_requeued", "on_started", "run", "on_error"]
    assert job.status.hget() == "failed"
    assert job.attempt.hget() == "2"
    assert float(job.priority.hget()) == -2
    assert len(Error.collection_for_job(job)) == 2


def test_requeue_with_delay_schedules_the_retry(queue, conn):
    job = queue.enqueue({"fail": "later"})
    make_worker(fork=False, max_loops=1, requeue_times=3, requeue_delay_delta=600).run()
    assert job.status.hget() == "scheduled"
    eta = conn.zscore("blueque_scheduled_tasks_w", job.pk.get())
    assert eta == pytest.approx(time.time() + 600, abs=5)
    assert job.error.hget() == "ValueError: later"


def test_cancel_on_error_prevents_requeue(queue, conn):
    job = queue.enqueue({"fail": "fatal"})
    job.cancel_on_error.hset("1")
    make_worker(fork=False, max_loops=1, requeue_times=5, requeue_delay_delta=0).run()
    assert job.status.hget() == "failed"


def test_task_killed_by_sigkill_is_failed_with_the_signal_and_the_worker_goes_on(queue, conn):
    killed = queue.enqueue({"kill": True})
    after = queue.enqueue({"n": 2})
    make_worker(fork=True, max_loops=2).run()
    assert killed.status.hget() == "failed"
    assert killed.error.hget() == "TaskKilled: the process running the task was killed by SIGKILL"
    error = Error.collection(job_pk=killed.pk.get()).instances()[0]
    assert (error.type.hget(), error.code.hget()) == ("TaskKilled", "SIGKILL")
    assert after.status.hget() == "complete"
    assert conn.scard("blueque_started_tasks_w") == 0


def test_callback_replaces_run(queue, conn):
    job = queue.enqueue("x")
    Worker("w", callback=callback, max_loops=1, timeout=0.2).run()
    assert names(events(conn, job.pk.get())) == ["callback"]
    assert job.result.hget() == "from-callback"


def test_default_run_fails_the_task_with_a_clear_error(queue):
    job = queue.enqueue("x")
    Worker("w", max_loops=1, timeout=0.2, fork=False).run()
    assert job.status.hget() == "failed"
    assert "Job.run is not implemented" in job.error.hget()


def test_a_result_that_cannot_be_stored_fails_the_task(queue):
    job = queue.enqueue({"unstorable": True})
    make_worker(fork=False, max_loops=1).run()
    assert job.status.hget() == "failed"
    assert job.error.hget().startswith("InvalidParameters: task result")


def test_concurrency_runs_that_many_tasks_at_once_and_never_takes_more(queue, conn):
    jobs = [queue.enqueue({"sleep": 0.6, "n": i}) for i in range(6)]
    started = time.monotonic()
    make_worker(fork=True, concurrency=3, max_loops=6).run()
    elapsed = time.monotonic() - started
    runs = [e for e in events(conn) if e["event"] == "run"]
    assert len(runs) == 6
    # each task saw at most 3 leased tasks in its queue: the worker never held more
    assert max(e["running"] for e in runs) == 3
    assert len({e["pid"] for e in runs}) == 6
    assert all(job.status.hget() == "complete" for job in jobs)
    assert elapsed < 3.6 - 0.5  # two waves of three, not six tasks one after the other


def test_worker_registers_as_listener_while_running_and_unregisters(queue, conn):
    queue.enqueue({"sleep": 0.3})
    worker = make_worker(fork=True, max_loops=1, listener_id="test.host_99")
    seen = []
    original = worker.launch

    def launch(job, q):
        seen.append(set(conn.smembers("blueque_listeners_w")))
        original(job, q)

    worker.launch = launch
    worker.run()
    assert seen == [{"test.host_99"}]
    assert conn.smembers("blueque_listeners_w") == set()
    assert Queue.listener_counts() == {"w": 0}


def test_max_duration_ends_an_idle_worker(queue):
    worker = make_worker(max_loops=None, max_duration=0.5)
    started = time.monotonic()
    worker.run()
    assert 0.5 <= time.monotonic() - started < 3
    assert worker.status == "terminated"


def test_worker_moves_due_scheduled_tasks_and_runs_them(queue, conn):
    job = queue.schedule({"n": 1}, time.time() + 0.3)
    make_worker(fork=False, max_loops=1, schedule_interval=0.1).run()
    assert job.status.hget() == "complete"


def test_a_pending_id_without_task_is_dropped_and_the_worker_goes_on(queue, conn):
    conn.lpush("blueque_pending_tasks_w", "ghost")
    job = queue.enqueue({"n": 1})
    make_worker(fork=False, max_loops=1).run()
    assert job.status.hget() == "complete"
    assert conn.llen("blueque_pending_tasks_w") == 0
    assert conn.llen("blueque_reserved_tasks_w_" + "x") == 0


@pytest.mark.parametrize("options, message", [
    ({"queues": ""}, "no queues"),
    ({"queues": "a*"}, "invalid queue name"),
    ({"concurrency": 0}, "concurrency must be at least 1"),
    ({"concurrency": 2, "fork": False}, "needs fork=True"),
    ({"terminate_timeout": 5, "fork": False}, "terminate_timeout needs fork=True"),
    ({"timeout": "5"}, "timeout must be a number"),
    ({"max_loops": 1.5}, "max_loops must be a whole number"),
    ({"on_terminate": "later"}, "on_terminate must be one of"),
    ({"job_model": dict}, "job_model must be a subclass of Job"),
    ({"callback": "not callable"}, "callback must be callable"),
    ({"logger_level": "LOUD"}, "unknown logger level"),
    ({"colour": "blue"}, "unknown worker option"),
])
def test_bad_settings_are_refused_with_a_clear_error(options, message):
    settings = {"queues": "q", **options}
    with pytest.raises(ConfigurationError, match=message):
        Worker(**settings)


def test_settings_are_class_attributes_a_subclass_can_change():
    class Slow(Worker):
        queues = "a,b"
        concurrency = 4
        requeue_times = 2

    worker = Slow()
    assert (worker.queues, worker.concurrency, worker.requeue_times) == (["a", "b"], 4, 2)
    assert Slow(concurrency=2).concurrency == 2


# -- stored errors ------------------------------------------------------------------------
class CodedError(Exception):
    code = 5


@pytest.fixture
def errors(database):
    job = Job.lazy_connect("task-1")
    other = Job.lazy_connect("task-2")
    day = datetime(2026, 11, 20, 12, 0, tzinfo=timezone.utc)
    made = []
    for offset, (task, error) in enumerate([
        (job, ValueError("a")), (job, KeyError("b")), (other, ValueError("c")),
        (other, CodedError("d")), (job, ValueError("e")),
    ]):
        made.append(Error.add_error("q" if task is job else "r", task, error,
                                    when=day + timedelta(days=offset // 2, minutes=offset)))
    return made


def test_errors_filter_by_date_and_type(errors):
    found = Error.collection(date="2026-11-20", type="ValueError").instances()
    assert [e.message.hget() for e in found] == ["a"]
    assert len(Error.collection(type="ValueError")) == 3
    assert len(Error.collection(queue_name="r")) == 2
    assert [e.message.hget() for e in Error.collection(code="5").instances()] == ["d"]


def test_errors_filter_by_date_range(errors):
    in_range = Error.collection(date__gte="2026-11-21", date__lte="2026-11-22")
    assert sorted(e.message.hget() for e in in_range.instances()) == ["c", "d", "e"]
    assert len(Error.collection(date__lt="2026-11-21")) == 2


def test_errors_of_a_job_newest_first(errors):
    found = Error.collection_for_job("task-1").instances()
    assert [e.message.hget() for e in found] == ["e", "'b'", "a"]
    assert found[0].datetime == datetime(2026, 11, 22, 12, 4, tzinfo=timezone.utc)
    assert found[0].date.hget() == date(2026, 11, 22).isoformat()


def test_an_error_stored_in_two_round_trips_is_what_limpyd_itself_would_store(
        database, conn, count_commands):
    job = Job.lazy_connect("task-9")
    values = Error.error_values("q", job, CodedError("boom"),
                                when=datetime(2026, 11, 22, 8, 0, tzinfo=timezone.utc),
                                trace="Traceback: ...")
    by_limpyd = Error(**values)
    before = set(conn.keys("*"))
    with count_commands() as counter:
        fast = Error.add_errors([values])[0]
    # one INCRBY, then one MULTI ... EXEC block sent at once: two round trips
    assert counter.commands[:2] == ["INCRBY", "MULTI"] and counter.commands[-1] == "EXEC"
    assert set(counter.commands[2:-1]) <= {"HSET", "SADD", "ZADD"}
    assert conn.hgetall(f"blueque:error:{fast}:hash") == conn.hgetall(by_limpyd.key)
    # the keys written are those limpyd wrote, for another pk
    written = {key for key in conn.keys("*")} - before
    assert written == {f"blueque:error:{fast}:hash"}
    for key in conn.keys("blueque:error:*"):
        if conn.type(key) == "set" and key != "blueque:error:collection":
            assert conn.sismember(key, by_limpyd.pk.get()) == conn.sismember(key, fast), key
    members = conn.zrange("blueque:error:date:text-range", 0, -1)
    theirs = next(m for m in members if m.endswith(f":{by_limpyd.pk.get()}"))
    assert theirs[:-len(by_limpyd.pk.get())] + fast in members
    found = Error.collection(date="2026-11-22", type="CodedError").instances()
    assert {e.pk.get() for e in found} == {by_limpyd.pk.get(), fast}


def test_unknown_error_fields_are_refused_before_anything_is_written(database, conn):
    with pytest.raises(ConfigurationError, match="unknown Error field"):
        Error.add_errors([{"date": "2026-11-22", "colour": "red"}])
    assert conn.keys("*") == []


def test_a_task_whose_spare_process_died_goes_back_in_line(queue, conn):
    import signal as signals

    worker = make_worker(fork=True, max_loops=5)
    worker.run_started()
    try:
        spare = worker.runner.spare()
        os.kill(spare.pid, signals.SIGKILL)
        time.sleep(0.2)  # dead, and not yet collected by the worker
        job = queue.enqueue({"n": 1})
        taken, queue_of = worker.wait_for_job()
        worker.launch(taken, queue_of)  # the hand-over finds the spare gone
        assert job.status.hget() == "pending"
        assert conn.lrange("blueque_pending_tasks_w", 0, -1) == [job.pk.get()]
        assert conn.scard("blueque_started_tasks_w") == 0
        assert len(worker.tasks) == 0
    finally:
        worker.run_ended()


def test_the_next_spare_is_forked_at_once_for_a_backlog_and_after_the_task_when_idle(queue):
    """A worker that found its task waiting forks the next spare while it runs; one that
    waited for its task forks the next at its next try, not while that task starts."""
    worker = make_worker(fork=True, max_loops=5, callback=lambda job, queue: time.sleep(0.3))
    worker.run_started()
    try:
        queue.enqueue({"n": 1})
        queue.enqueue({"n": 2})
        taken, queue_of = worker.wait_for_job()  # found at the first try: a backlog
        worker.launch(taken, queue_of)
        first = worker.runner._spare
        assert first is not None and first.pid != worker.tasks.snapshot()[0].pid
        while len(worker.tasks):
            worker.wait(0.05)
            worker.collect()
        taken, queue_of = worker.wait_for_job()
        worker.launch(taken, queue_of)  # the one forked ahead runs it
        assert worker.tasks.snapshot()[0].pid == first.pid
        while len(worker.tasks):
            worker.wait(0.05)
            worker.collect()
        assert worker.wait_for_job() == (None, None)  # nothing waits: the worker waited
        queue.enqueue({"n": 3})
        taken, queue_of = worker.wait_for_job()
        worker.launch(taken, queue_of)
        assert worker.runner._spare is None  # not forked while the task's process starts
        pid, _ = worker.runner.next_process()  # the next try forks it
        assert worker.runner._spare is not None and pid == worker.runner._spare.pid
    finally:
        worker.run_ended()


def test_a_heartbeat_slower_than_the_lease_is_refused():
    with pytest.raises(ConfigurationError, match=r"heartbeat_interval .* at most half of ttr"):
        Worker("q", ttr=10, heartbeat_interval=6)
