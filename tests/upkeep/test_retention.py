"""Retention on a real Redis: finished tasks and stored errors are deleted once their time
runs out, in chunks, and a Redis with steady traffic stays at a flat memory."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone

import pytest

from limpyd_blueque import ConfigurationError, Error, Job, Queue, Worker
from limpyd_blueque.protocol.options import DEFAULT_FAILURE_TTL, DEFAULT_RESULT_TTL
from limpyd_blueque.upkeep.retention import (
    clean_errors,
    clean_finished,
    error_ttl_for,
    index_finished,
    resolve_ttl,
)

pytestmark = pytest.mark.timeout(120)

DAY = 86400.0


def keys():
    return Queue.keys()


def blueque_task(conn, queue, task_id, status="complete", updated=None, **fields):
    """A finished task written the way the reference package writes one: its hash, then
    its id pushed on the list of its status; no retention entry."""
    updated = time.time() if updated is None else updated
    conn.hset(keys().task(task_id), mapping={
        "status": status, "queue": queue, "parameters": "{}", "result": "1", "node": "h_1",
        "pid": "1", "created": repr(updated - 5), "updated": repr(updated), **fields})
    conn.lpush(keys().finished(queue, status), task_id)
    return task_id


def retained(conn, queue):
    """`{task id: deadline}` of a queue's retention set."""
    return dict(conn.zrange(keys().retention(queue), 0, -1, withscores=True))


def exists(conn, task_id):
    return bool(conn.exists(keys().task(task_id)))


# -- clean_finished -----------------------------------------------------------------------------
def test_only_finished_tasks_past_their_deadline_are_deleted(database, conn):
    now = time.time()
    for task_id, status in [("old-ok", "complete"), ("old-bad", "failed"),
                            ("young", "complete"), ("forever", "complete")]:
        blueque_task(conn, "q", task_id, status)
    conn.zadd(keys().retention("q"), {"old-ok": now - 10, "old-bad": now - 1,
                                      "young": now + 3600})
    assert clean_finished(Queue, ["q"], now) == 2
    assert not exists(conn, "old-ok") and not exists(conn, "old-bad")
    assert exists(conn, "young") and exists(conn, "forever")
    assert conn.lrange(keys().complete("q"), 0, -1) == ["forever", "young"]
    assert conn.llen(keys().failed("q")) == 0
    assert retained(conn, "q") == {"young": now + 3600}


def test_each_call_deletes_at_most_limit_tasks_per_queue_oldest_first(database, conn):
    now = time.time()
    for name in ("a", "b"):
        for n in range(25):
            blueque_task(conn, name, f"{name}{n}")
            conn.zadd(keys().retention(name), {f"{name}{n}": now - 100 + n})
    assert clean_finished(Queue, ["a", "b"], now, limit=10) == 20
    assert sorted(retained(conn, "a")) == sorted(f"a{n}" for n in range(10, 25))
    assert [exists(conn, f"b{n}") for n in (9, 10)] == [False, True]
    assert clean_finished(Queue, ["a", "b"], now, limit=10) == 20
    assert clean_finished(Queue, ["a", "b"], now, limit=10) == 10
    assert clean_finished(Queue, ["a", "b"], now, limit=10) == 0
    assert not conn.keys(keys().task("*"))


def test_an_entry_whose_task_is_not_finished_here_is_dropped_and_the_task_kept(database, conn):
    now = time.time()
    waiting = Queue.named("q").enqueue("x")
    blueque_task(conn, "other", "elsewhere")
    conn.zadd(keys().retention("q"), {waiting.task_id: now - 5, "elsewhere": now - 5,
                                      "gone": now - 5})
    assert clean_finished(Queue, ["q"], now) == 0
    assert retained(conn, "q") == {}
    assert waiting.status.hget() == "pending"
    assert exists(conn, "elsewhere")


def test_keys_of_another_type_skip_their_queue_and_never_stop_the_cleaning(database, conn):
    now = time.time()
    conn.set(keys().retention("broken"), "not a zset")
    blueque_task(conn, "bad-list", "stuck")
    conn.delete(keys().complete("bad-list"))
    conn.set(keys().complete("bad-list"), "not a list")
    conn.zadd(keys().retention("bad-list"), {"stuck": now - 5})
    conn.set(keys().task("text"), "not a hash")
    blueque_task(conn, "q", "due")
    conn.zadd(keys().retention("q"), {"text": now - 5, "due": now - 5})
    assert clean_finished(Queue, ["broken", "bad-list", "q"], now) == 1
    assert conn.get(keys().retention("broken")) == "not a zset"
    assert exists(conn, "stuck") and retained(conn, "bad-list") == {"stuck": now - 5}
    assert conn.get(keys().task("text")) == "not a hash"
    assert retained(conn, "q") == {} and not exists(conn, "due")


@pytest.mark.parametrize("limit", [0, -1, 2.5, None])
def test_a_bad_chunk_size_is_refused_rather_than_reading_everything(database, limit):
    with pytest.raises(ConfigurationError, match="limit"):
        clean_finished(Queue, ["q"], time.time(), limit=limit)
    with pytest.raises(ConfigurationError, match="limit"):
        clean_errors(Error, time.time(), limit=limit)
    with pytest.raises(ConfigurationError, match="page"):
        index_finished(Queue, ["q"], time.time(), page=limit)


# -- index_finished ----------------------------------------------------------------------------
def test_tasks_finished_by_another_blueque_client_get_their_deadline(database, conn):
    now = time.time()
    old = now - 10 * DAY
    blueque_task(conn, "q", "done", updated=old)
    blueque_task(conn, "q", "broke", "failed", updated=old)
    blueque_task(conn, "q", "kept", updated=old, result_ttl="-1")
    blueque_task(conn, "q", "own", updated=old, result_ttl="60")
    blueque_task(conn, "q", "known", updated=old)
    conn.zadd(keys().retention("q"), {"known": 123.0})
    blueque_task(conn, "q", "no-time", updated=old)
    conn.hdel(keys().task("no-time"), "updated")
    added = index_finished(Queue, ["q"], now, result_ttl=7 * DAY, failure_ttl=30 * DAY)
    assert added == 4
    assert retained(conn, "q") == pytest.approx({
        "done": old + 7 * DAY, "broke": old + 30 * DAY, "own": old + 60, "known": 123.0,
        "no-time": now + 7 * DAY})
    assert clean_finished(Queue, ["q"], now) == 3  # done, own and known were due
    assert [exists(conn, t) for t in ("done", "own", "known", "broke", "kept", "no-time")] == [
        False, False, False, True, True, True]


def test_reindexing_follows_the_queue_settings_and_reads_long_lists_in_pages(database, conn):
    now = time.time()
    Queue.named("q").configure(ttr=10)  # the queue settings hash exists
    conn.hset(keys().queue_settings("q"), mapping={"result_ttl": "5", "failure_ttl": "-1"})
    for n in range(1203):
        blueque_task(conn, "q", f"t{n}", updated=now)
    blueque_task(conn, "q", "failed-one", "failed", updated=now)
    conn.lpush(keys().complete("q"), "missing")
    assert index_finished(Queue, ["q"], now, result_ttl=DAY, failure_ttl=DAY, page=500) == 1203
    scores = retained(conn, "q")
    assert len(scores) == 1203
    assert all(score == pytest.approx(now + 5) for score in scores.values())
    assert index_finished(Queue, ["q"], now, result_ttl=DAY, failure_ttl=DAY) == 0


def test_reindexing_skips_keys_of_another_type(database, conn):
    conn.set(keys().retention("a"), "x")
    blueque_task(conn, "a", "t1")
    conn.set(keys().failed("b"), "x")
    blueque_task(conn, "b", "t2")
    assert index_finished(Queue, ["a", "b"], time.time(), result_ttl=1, failure_ttl=1) == 1
    assert list(retained(conn, "b")) == ["t2"]


# -- ttls ----------------------------------------------------------------------------------------
def test_a_ttl_comes_from_the_task_then_the_queue_then_the_default():
    assert resolve_ttl("30", 60.0, 90.0) == 30
    assert resolve_ttl(None, 60.0, 90.0) == 60
    assert resolve_ttl("soon", "nan", "inf", -5, None, 90.0) == 90
    assert resolve_ttl("-1", 60.0) == -1
    assert resolve_ttl(None, None, "garbage") == -1


def test_error_ttl_of_a_job_reads_its_field_then_its_queue_setting(database, conn):
    job = Queue.named("q").enqueue("x")
    assert error_ttl_for(job, {}, 99.0) == 99
    assert error_ttl_for(job, {"error_ttl": 50.0}, 99.0) == 50
    conn.hset(job.key, "error_ttl", "7")
    assert error_ttl_for(Job.lazy_connect(job.task_id), {"error_ttl": 50.0}, 99.0) == 7
    conn.hset(job.key, "error_ttl", "-1")
    assert error_ttl_for(Job.lazy_connect(job.task_id), {"error_ttl": 50.0}, 99.0) == -1
    conn.delete(job.key)
    conn.set(job.key, "not a hash")
    assert error_ttl_for(Job.lazy_connect(job.task_id), {}, 99.0) == 99


# -- errors ----------------------------------------------------------------------------------------
def error_records(count, when=None):
    """Error records of `count` tasks, a second apart from `when` (default: now)."""
    when = when or datetime.now(timezone.utc)
    return [Error.error_values("q", Job.lazy_connect(f"task-{n}"), ValueError(f"e{n}"),
                               when=when + timedelta(seconds=n), trace="Traceback: ...")
            for n in range(count)], when.timestamp()


def store_errors(ttls):
    records, start = error_records(len(ttls))
    return Error.add_errors(records, ttls=ttls), start


def test_an_error_stored_with_a_ttl_gets_its_deadline_in_the_same_transaction(
        database, conn, count_commands):
    records, start = error_records(5)
    with count_commands() as counter:
        pks = Error.add_errors(records, ttls=[60, -1, None, 0, 2.5])
    assert counter.commands[:2] == ["INCRBY", "MULTI"] and counter.commands[-1] == "EXEC"
    assert dict(conn.zrange(Error.expiry_key(), 0, -1, withscores=True)) == pytest.approx({
        pks[0]: start + 60, pks[3]: start + 3, pks[4]: start + 4 + 2.5})
    job = Job.lazy_connect("t")
    error = Error.add_error("q", job, KeyError("k"), ttl=10)
    deadline = conn.zscore(Error.expiry_key(), error.pk.get())
    assert deadline == pytest.approx(float(error.timestamp.hget()) + 10)


@pytest.mark.parametrize("ttl", [-2, float("nan"), float("inf"), "10", True])
def test_a_bad_error_ttl_is_refused_before_anything_is_written(database, conn, ttl):
    with pytest.raises(ConfigurationError, match="error ttl"):
        store_errors([5, ttl])
    with pytest.raises(ConfigurationError, match="one per record"):
        Error.add_errors([{"type": "X"}], ttls=[1, 2])
    assert conn.keys("*") == []


def holds(conn, key, pk):
    """Whether a set or sorted set of the Error model holds `pk` (a text-range index
    holds `<value>:<pk>`)."""
    kind = conn.type(key)
    if kind == "set":
        return conn.sismember(key, pk)
    return kind == "zset" and any(m == pk or m.endswith(f":{pk}")
                                  for m in conn.zrange(key, 0, -1))


def index_members(conn, pk):
    """The index keys of the Error model (and its collection) still holding `pk`."""
    return [key for key in conn.keys(Error.keys().orm("error", "*")) if holds(conn, key, pk)]


def test_errors_past_their_ttl_are_deleted_with_every_index_entry(database, conn):
    pks, start = store_errors([0, 0, 0, 3600, -1])
    before = set(conn.keys("*"))
    assert len(Error.collection(type="ValueError")) == 5
    assert clean_errors(Error, start + 10, limit=2) == 2
    assert clean_errors(Error, start + 10, limit=2) == 1
    assert clean_errors(Error, start + 10) == 0
    assert sorted(e.pk.get() for e in Error.collection(type="ValueError").instances()) == \
        sorted(pks[3:])
    assert not Error.collection(job_pk="task-0") and len(Error.collection(queue_name="q")) == 2
    for pk in pks[:3]:
        assert index_members(conn, pk) == []
        assert not conn.exists(f"blueque:error:{pk}:hash")
    assert all(index_members(conn, pk) for pk in pks[3:])
    assert list(conn.zrange(Error.expiry_key(), 0, -1)) == [pks[3]]
    # only what the three errors alone held is gone: empty index sets vanish with them
    gone = before - set(conn.keys("*"))
    assert {f"blueque:error:{pk}:hash" for pk in pks[:3]} <= gone
    assert all(":error:" in key for key in gone)


def test_error_cleaning_survives_keys_of_another_type(database, conn):
    pks, start = store_errors([0, 0])
    conn.delete(f"blueque:error:{pks[0]}:hash")
    conn.set(f"blueque:error:{pks[0]}:hash", "odd")
    assert clean_errors(Error, start + 10) == 1
    assert conn.get(f"blueque:error:{pks[0]}:hash") == "odd"
    assert conn.zcard(Error.expiry_key()) == 0
    conn.delete(Error.expiry_key())
    conn.set(Error.expiry_key(), "not a zset")
    assert clean_errors(Error, start + 10) == 0


# -- with the worker and the protocol steps -------------------------------------------------------
class Steady(Job):
    """Completes, or fails when its parameters say "fail"; records nothing (flat memory)."""

    def run(self, queue):
        if (self.known.get("parameters") or self.parameters.hget()) == "fail":
            raise ValueError("failed on purpose")
        return "ok"


def run_worker(queue_name, **options):
    settings = dict(queues=queue_name, job_model=Steady, fork=False, timeout=0.1,
                    logger_level="WARNING")
    settings.update(options)
    Worker(**settings).run()


def test_result_ttl_comes_from_the_task_then_the_queue_then_the_worker(database, conn):
    queue = Queue.named("q")
    by_worker = queue.enqueue("ok")
    by_task = queue.enqueue("ok", result_ttl=30)
    forever = queue.enqueue("ok", result_ttl=-1)
    run_worker("q", max_loops=3, result_ttl=600)
    queue.configure(result_ttl=120)
    by_queue = queue.enqueue("ok")
    overridden = queue.enqueue("ok", result_ttl=0)
    run_worker("q", max_loops=2, result_ttl=600)
    scores = retained(conn, "q")
    updated = {job.task_id: float(job.updated.hget())
               for job in (by_worker, by_task, forever, by_queue, overridden)}
    assert scores == pytest.approx({
        by_worker.task_id: updated[by_worker.task_id] + 600,
        by_task.task_id: updated[by_task.task_id] + 30,
        by_queue.task_id: updated[by_queue.task_id] + 120,
        overridden.task_id: updated[overridden.task_id]}, abs=0.01)
    assert clean_finished(Queue, ["q"], time.time() + 60) == 2  # overridden and by_task
    assert not exists(conn, by_task.task_id) and exists(conn, forever.task_id)
    assert retained(conn, "q").keys() == {by_worker.task_id, by_queue.task_id}


def test_failure_ttl_applies_to_failed_canceled_and_expired_tasks(database, conn):
    queue = Queue.named("q")
    queue.configure(failure_ttl=50)
    failed = queue.enqueue("fail")
    kept = queue.enqueue("fail", failure_ttl=-1)
    run_worker("q", max_loops=2, result_ttl=1, failure_ttl=900)
    canceled = queue.enqueue("x", failure_ttl=70)
    assert canceled.cancel()
    expired = queue.enqueue("x", ttl=0.05)
    time.sleep(0.1)
    assert queue.expire_due() == [expired.task_id]
    scores = retained(conn, "q")
    assert scores == pytest.approx({
        failed.task_id: float(failed.updated.hget()) + 50,
        canceled.task_id: float(canceled.updated.hget()) + 70,
        expired.task_id: float(expired.updated.hget()) + 50}, abs=0.01)
    assert kept.status.hget() == "failed"
    assert clean_finished(Queue, ["q"], time.time() + 3600) == 3
    assert kept.status.hget() == "failed" and retained(conn, "q") == {}


def test_requeueing_a_failed_task_takes_back_its_retention_entry(database, conn):
    queue = Queue.named("q")
    failed = queue.enqueue("fail")
    run_worker("q", max_loops=1, failure_ttl=3600)
    assert failed.task_id in retained(conn, "q")
    failed.requeue()
    assert retained(conn, "q") == {}
    assert clean_finished(Queue, ["q"], time.time() + 10) == 0
    assert failed.status.hget() == "pending"


def test_the_worker_deletes_finished_tasks_and_errors_as_it_cleans(database, conn):
    queue = Queue.named("q")
    jobs = queue.enqueue_many(["ok", "fail"] * 3)
    run_worker("q", max_loops=None, max_duration=2.0, result_ttl=0, failure_ttl=0,
               error_ttl=0, clean_interval=0.2)
    assert not any(exists(conn, job.task_id) for job in jobs)
    assert conn.llen(keys().complete("q")) == conn.llen(keys().failed("q")) == 0
    assert not Error.collection(queue_name="q")
    assert conn.zcard(Error.expiry_key()) == 0 and retained(conn, "q") == {}


# -- a Redis left running -------------------------------------------------------------------------
ROUNDS, ROUND_SECONDS, PER_ROUND, WARM_UP = 18, 1.0, 60, 4


def produce(queue, samples, conn, stop):
    """Enqueue PER_ROUND tasks (half failing) each round; after each round, sample memory."""
    for _ in range(ROUNDS):
        if stop.is_set():
            return
        started = time.monotonic()
        queue.enqueue_many(["ok", "fail"] * (PER_ROUND // 2))
        time.sleep(max(ROUND_SECONDS - (time.monotonic() - started), 0))
        samples.append((conn.info("memory")["used_memory"], conn.dbsize()))


def test_memory_stays_flat_under_steady_traffic_with_short_ttls(database, conn):
    queue, samples, stop = Queue.named("steady"), [], threading.Event()
    producer = threading.Thread(target=produce, args=(queue, samples, conn, stop))
    producer.start()
    try:
        run_worker("steady", max_loops=None, max_duration=ROUNDS * ROUND_SECONDS + 1,
                   result_ttl=1, failure_ttl=1, error_ttl=1, clean_interval=0.5, ttr=30)
    finally:
        stop.set()
        producer.join()
    print("\nround  used_memory  dbsize")
    for n, (memory, size) in enumerate(samples):
        print(f"{n:5d}  {memory:11d}  {size:6d}")
    assert len(samples) >= ROUNDS - 1
    steady = samples[WARM_UP:]
    warm_memory, warm_size = steady[0]
    # every round adds 60 tasks and their 30 errors: unbounded, DBSIZE would grow by ~100
    # keys a round; kept, it stays within the few seconds of traffic the ttls allow
    assert max(size for _, size in steady) <= warm_size + 2 * PER_ROUND, samples
    assert steady[-1][1] <= warm_size + PER_ROUND, samples
    assert steady[-1][0] <= 1.5 * warm_memory, samples
    assert queue.pending.llen() < PER_ROUND, "the worker fell behind the producer"


def test_blueque_reindex_gives_tasks_finished_by_other_clients_their_retention(conn):
    from limpyd_blueque.upkeep.cleaning import reindex

    conn.zadd(keys().queues, {"old": 0})
    blueque_task(conn, "old", "done-by-blueque", updated=1000.0)
    blueque_task(conn, "old", "failed-by-blueque", status="failed", updated=2000.0)
    report = reindex(Queue)
    assert report.retained == 2
    assert retained(conn, "old") == pytest.approx({
        "done-by-blueque": 1000.0 + DEFAULT_RESULT_TTL,
        "failed-by-blueque": 2000.0 + DEFAULT_FAILURE_TTL})
    assert "finished tasks given their retention: 2" in report.lines()
    assert reindex(Queue).retained == 0  # once is enough


def test_an_index_key_of_another_type_never_stops_a_task_from_finishing(conn):
    queue = Queue.named("odd")
    minute = int(time.time() // 60)
    for key in (keys().retention("odd"), keys().stalled("odd"),
                keys().throughput("odd", minute), keys().throughput("odd", minute + 1)):
        conn.set(key, "not an index")
    queue.enqueue("x")
    job, _ = Queue.reserve_from(["odd"], "box_1")
    assert job.complete("done") is True
    assert job.status.hget() == "complete"
    assert conn.get(keys().retention("odd")) == "not an index"  # passed over, left alone
