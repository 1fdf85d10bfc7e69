"""asyncio producers (issue 15): `limpyd_blueque.aio` on `redis.asyncio`, tested with
pytest-asyncio on the same real Redis as the synchronous API: what one enqueues the other
reads, cancels and runs."""

from __future__ import annotations

import asyncio
import time

import pytest
import pytest_asyncio

from limpyd_blueque import Job, Queue, Worker, aio
from limpyd_blueque.exceptions import (
    ConfigurationError,
    InvalidName,
    InvalidParameters,
    RedisUnavailable,
    TaskExists,
    TaskNotFound,
)

pytestmark = pytest.mark.asyncio


async def close(client):
    await (getattr(client, "aclose", None) or client.close)()  # aclose: redis-py 5.0.1+


@pytest_asyncio.fixture
async def client(redis_url, conn):
    client = aio.connect(redis_url)
    yield client
    await close(client)


async def test_a_task_enqueued_by_asyncio_is_run_by_a_normal_worker(client, conn):
    queue = aio.Queue("thumbnails", client)
    task_id = await queue.enqueue({"image": "cat.jpg"})
    assert Job.load(task_id).status.hget() == "pending"
    ran = []
    Worker("thumbnails", callback=lambda job, q: ran.append(job.task_id) or "done",
           fork=False, max_loops=1, timeout=0.2).run()
    assert ran == [task_id]
    data = await queue.get(task_id)
    assert (data.status, data.queue, data.parameters) == ("complete", "thumbnails",
                                                          '{"image":"cat.jpg"}')


async def test_the_same_keys_and_fields_as_the_synchronous_api(client, conn):
    options = {"priority": 3, "identifier": "report-7", "ttr": 60, "max_attempts": 2}
    await aio.Queue("a", client).enqueue({"n": 1}, task_id="from-aio", **options)
    Queue.named("b").enqueue({"n": 1}, task_id="from-sync", **options)
    mine, theirs = conn.hgetall("blueque_task_from-aio"), conn.hgetall("blueque_task_from-sync")
    for changing in ("created", "updated", "queue"):
        mine.pop(changing), theirs.pop(changing)
    assert mine == theirs
    assert conn.zrange("blueque:prioritized:a", 0, -1) == ["from-aio"]
    assert conn.hgetall("blueque:identifiers:a") == {"report-7": "from-aio"}
    assert set(conn.zrange("blueque_queues", 0, -1)) == {"a", "b"}


async def test_tasks_of_a_group_from_aio_wait_in_their_groups_line(client, conn):
    queue = aio.Queue("grp", client)
    one = await queue.enqueue({"n": 1}, group="customer:1")
    two, three = await queue.enqueue_many([{"n": 2}, {"n": 3}],
                                          options=[{"group": "customer:2"}, {}])
    assert conn.zrange("blueque:group:grp:customer:1", 0, -1) == [one]
    assert conn.zrange("blueque:group:grp:customer:2", 0, -1) == [two]
    assert conn.lrange("blueque_pending_tasks_grp", 0, -1) == [three]
    with pytest.raises(ConfigurationError, match="group must be"):
        await queue.enqueue({}, group="no spaces")


async def test_enqueue_many_schedule_and_identifiers(client, conn):
    queue = aio.Queue("m", client)
    ids = await queue.enqueue_many([{"n": n} for n in range(5)], chunk=2)
    assert Queue.named("m").counts()["pending"] == 5
    assert conn.lrange("blueque_pending_tasks_m", 0, -1) == ids[::-1]
    later = await queue.schedule({"n": 9}, time.time() + 3600)
    assert (await queue.get(later)).status == "scheduled"
    first = await queue.enqueue({"n": 10}, identifier="one")
    assert await queue.enqueue({"n": 11}, identifier="one") == first


async def test_get_reads_a_task_of_this_queue_only(client, conn):
    job = Queue.named("x").enqueue({"a": 1})
    assert (await aio.Queue("x", client).get(job.task_id)).parameters == '{"a":1}'
    assert await aio.Queue("y", client).get(job.task_id) is None
    assert await aio.Queue("x", client).get("no-such-task") is None


async def test_cancel_as_job_cancel_does(client, conn):
    queue = aio.Queue("c", client)
    waiting = await queue.enqueue({})
    assert await queue.cancel(waiting) is True
    assert Job.load(waiting).status.hget() == "canceled"
    assert await queue.cancel(waiting) is False  # finished already
    running = await queue.enqueue({})
    reservation, _ = Queue.scripts().reserve(["c"], "host_1", time.time())
    assert reservation.task_id == running
    assert await queue.cancel(running) is True
    assert conn.hget(f"blueque_task_{running}", "cancel_requested")
    assert conn.smembers("blueque:canceling:c") == {running}
    with pytest.raises(TaskNotFound):
        await queue.cancel("no-such-task")
    other = Queue.named("other").enqueue({})
    with pytest.raises(TaskNotFound):
        await queue.cancel(other.task_id)
    assert other.status.hget() == "pending"


async def test_statistics_are_the_synchronous_ones(client, conn):
    queue = aio.Queue("s", client)
    await queue.enqueue_many([{} for _ in range(3)])
    await queue.cancel(await queue.enqueue({}))
    assert await queue.statistics() == Queue.named("s").statistics()
    assert (await queue.statistics())["tasks"]["pending"] == 3


async def test_many_producers_at_once(client, conn):
    queue = aio.Queue("gather", client)
    ids = await asyncio.gather(*(queue.enqueue({"n": n}) for n in range(200)))  # > 50 at once
    assert len(set(ids)) == 200
    assert Queue.named("gather").counts()["pending"] == 200


async def test_one_round_trip_per_enqueue(client, conn, count_commands):
    queue = aio.Queue("rt", client)
    await queue.enqueue({})  # the script is loaded once
    with count_commands() as counted:
        await queue.enqueue({"n": 1}, priority=2)
    assert counted.commands == ["EVALSHA"]


async def test_mistakes_are_refused_before_anything_is_written(client, conn):
    queue = aio.Queue("bad", client)
    with pytest.raises(InvalidParameters):
        await queue.enqueue(b"bytes")
    with pytest.raises(InvalidParameters):
        await queue.enqueue_many([{"ok": 1}, {"bad": {1, 2}}])
    with pytest.raises(ConfigurationError, match="priority"):
        await queue.enqueue({}, priority="high")
    with pytest.raises(InvalidName):
        aio.Queue("bad name", client)
    assert conn.keys("*") == []
    await queue.enqueue({}, task_id="twice")
    with pytest.raises(TaskExists):
        await queue.enqueue({}, task_id="twice")


async def test_a_redis_out_of_reach_is_named(conn):
    from limpyd_blueque.connection.embedded import EmbeddedRedis

    with EmbeddedRedis() as server:
        url = server.url
    client = aio.connect(url)
    with pytest.raises(RedisUnavailable, match=r"cannot reach Redis at redis://127\.0\.0\.1"):
        await aio.Queue("q", client).enqueue({})
    await close(client)


async def test_a_client_that_does_not_decode_is_refused(redis_url):
    import redis.asyncio

    raw = redis.asyncio.Redis.from_url(redis_url)
    with pytest.raises(ConfigurationError, match="decode"):
        aio.Queue("q", raw)
    await close(raw)
    with pytest.raises(ConfigurationError, match="invalid Redis URL"):
        aio.connect("http://nowhere")
