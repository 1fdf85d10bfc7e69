"""asyncio producers: enqueue, read and cancel tasks from asyncio code (FastAPI, Starlette,
aiohttp...) without a thread pool, on `redis.asyncio`.

The steps are the synchronous API's own: the same Lua scripts, planned by the same
`scripts.Planner` on the same keys, with the same checks before anything is written
(`models.producing.prepare_tasks`). A task enqueued here is run by a normal worker, and
one enqueued by the synchronous API is read and canceled here::

    from limpyd_blueque import aio

    client = aio.connect("redis://localhost:6379/0")
    thumbnails = aio.Queue("thumbnails", client)
    task_id = await thumbnails.enqueue({"image": "cat.jpg"}, priority=5)
    (await thumbnails.get(task_id)).status      # 'pending'
    await thumbnails.cancel(task_id)            # True

Only producing lives here; workers, which run long tasks in processes of their own, are
synchronous.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import weakref
from collections.abc import Awaitable, Mapping, Sequence
from datetime import datetime
from typing import Any, ClassVar, TypeVar, cast

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .connection.clients import bulk_limit, check_url, maybe_too_large, refuse_too_large
from .connection.errors import CLUSTER_SCHEME, mask_secrets, name_server, unreachable
from .exceptions import (
    ConfigurationError,
    InvalidTransition,
    LimpydBluequeError,
    PartiallyEnqueued,
    TaskNotFound,
)
from .models import Job, dependencies
from .models.producing import prepare_tasks
from .models.task import TaskData
from .models.waiting import RETRY, check_timeout, outcome, settled, time_left
from .protocol import statistics
from .protocol.keys import DEFAULT_PREFIX, KeySpace, check_queue_name, keyspace
from .protocol.scripts import Plan, Planner, _load, _str, script_refusal
from .protocol.statuses import FINISHED, UNFINISHED
from .protocol.values import check_task_id, timestamp

T = TypeVar("T")
#: the scripts a producer runs
SCRIPTS = ("enqueue", "enqueue_options", "cancel", "watch", "depend", "release")
#: the statuses a cancel of a task of this queue never refuses
WAITING_OR_RUNNING = UNFINISHED


def is_cluster(client: Any) -> bool:
    """True for a Redis Cluster client (`redis.asyncio.cluster.RedisCluster`)."""
    return isinstance(client, AsyncRedisCluster)


def decodes(client: Any) -> bool:
    """True when `client` decodes its replies (as the producers here need)."""
    if is_cluster(client):
        return bool(client.get_encoder().decode_responses)
    return bool(client.connection_pool.connection_kwargs.get("decode_responses"))


def connect(url: str, **options: Any) -> aioredis.Redis:
    """An asyncio client of the Redis at `url`, as the producers here need it: replies
    decoded (bytes that are not UTF-8 reach Python escaped, never breaking a reply), no
    command retried behind the library's back, and a pool of at most `max_connections`
    (50) connections that many coroutines wait on (up to `timeout`, 20 s) rather than
    fail. `options` go to the connections (`redis.asyncio.BlockingConnectionPool`).
    Closing the client closes its pool. A URL whose database is not a whole number is
    refused, and so are TLS options that are wrong (see `connection.clients.check_url`)."""
    check_url(url)
    if url.lower().startswith(CLUSTER_SCHEME):  # the cluster key mode (see keys.rst)
        try:
            cluster: aioredis.Redis = AsyncRedisCluster.from_url(  # type: ignore[assignment]
                "redis:" + url[len(CLUSTER_SCHEME):], decode_responses=True,
                encoding_errors="surrogateescape", **options)
        except ValueError as error:
            raise ConfigurationError(f"invalid Redis Cluster URL {mask_secrets(url)!r}: "
                                     f"{mask_secrets(str(error))}") from error
        return cluster
    settings: dict[str, Any] = {"decode_responses": True, "encoding_errors": "surrogateescape",
                                "retry": Retry(NoBackoff(), 0), "max_connections": 50,
                                "timeout": 20, **options}
    try:
        pool = aioredis.BlockingConnectionPool.from_url(url, **settings)
    except ValueError as error:
        raise ConfigurationError(f"invalid Redis URL {mask_secrets(url)!r}: "
                                 f"{mask_secrets(str(error))}") from error
    client = aioredis.Redis(connection_pool=pool)
    client.auto_close_connection_pool = True
    return client


def where(client: aioredis.Redis) -> str:
    """The server a client talks to, with the scheme of its connections (`redis://`,
    `rediss://` for TLS, `unix://`), and no user or password."""
    if is_cluster(client):
        node = client.get_default_node()  # type: ignore[attr-defined]
        return f"{CLUSTER_SCHEME}//{node.host}:{node.port}"
    pool = client.connection_pool
    tls = isinstance(pool.connection_class, type) and issubclass(pool.connection_class,
                                                                 aioredis.SSLConnection)
    return name_server(pool.connection_kwargs, tls=tls)


class AsyncScripts:
    """The producer's scripts registered on one asyncio client, for one key space."""

    def __init__(self, client: aioredis.Redis, keys: KeySpace) -> None:
        if not decodes(client):
            raise ConfigurationError("the asyncio client must decode replies: make it with "
                                     "limpyd_blueque.aio.connect(url), or pass "
                                     "decode_responses=True")
        self.client = client
        self.plans = Planner(keys)
        self._scripts = {name: client.register_script(_load(name)) for name in SCRIPTS}

    async def execute(self, plan: Plan[T]) -> T:
        """Run a planned step and read its reply; errors as the synchronous API has them."""
        try:
            reply = await apart(self._scripts[plan.name](
                keys=plan.keys, args=[_str(arg) for arg in plan.args]))
        except ResponseError as error:
            raise script_refusal(plan.name, error, where(self.client)) from None
        except (RedisConnectionError, RedisTimeoutError, OSError) as error:
            raise unreachable(where(self.client), error) from error
        return plan.read(reply)


#: what redis-py raises from a subscription that broke, or that a cancel left half made
#: (its connection unset: RuntimeError, or AttributeError within redis-py)
BROKEN = (RedisError, RuntimeError, AttributeError)


async def apart(call: Awaitable[T]) -> T:
    """Await a redis-py call run as a task of its own: a cancel of the caller is raised
    at once, never lost (redis-py's asyncio client was seen to swallow a cancel that came
    during a script call), and the call itself ends on its own (a step is whole or not
    made at all)."""
    running = asyncio.ensure_future(call)
    running.add_done_callback(_retrieved)
    await asyncio.wait({running})
    return running.result()


def _retrieved(task: asyncio.Future[Any]) -> None:
    """Read the outcome of a call its caller left (canceled): never 'never retrieved'."""
    if not task.cancelled():
        task.exception()


async def wait_set(event: asyncio.Event, timeout: float | None) -> None:
    """Wait until `event` is set or `timeout` seconds passed. Unlike `asyncio.wait_for`
    before Python 3.12, a cancel that comes as the event is set is never lost."""
    waiting = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait({waiting}, timeout=timeout)
    finally:
        waiting.cancel()


class Outcomes:
    """The outcome channels of the tasks some coroutines wait for (`Queue.wait`), on one
    subscription per client (`of`). Only its reading task, running while any waiter
    listens, touches the subscription: it subscribes the channels listened to, reads the
    messages (waking the waiters of each message's channel) and unsubscribes the channels
    no waiter listens to any more. A waiter only adds and removes its event, so a waiter
    canceled at any point leaves nothing half made. When the subscription breaks, every
    waiter reads its task, and the channels are subscribed again on a new one."""

    _by_client: ClassVar[weakref.WeakKeyDictionary[Any, Outcomes]] = weakref.WeakKeyDictionary()
    #: seconds the reading task waits for a message before it looks at the channels again
    #: (a new waiter's channel is subscribed within it)
    TURN = 0.05
    #: seconds a waiter waits for its channel to be subscribed (past it, it reads its task
    #: as when a message is lost)
    SUBSCRIBING = 1.0

    def __init__(self, client: aioredis.Redis) -> None:
        self.client = client
        self.waiters: dict[str, set[asyncio.Event]] = {}
        self.subscribed: set[str] = set()
        self.pubsub: Any = None
        self.reader: asyncio.Future[None] | None = None
        self.changed = asyncio.Event()  # set (and replaced) when channels were subscribed

    @classmethod
    def of(cls, client: aioredis.Redis) -> Outcomes:
        """The one `Outcomes` of `client`."""
        found = cls._by_client.get(client)
        if found is None:
            found = cls._by_client[client] = cls(client)
        return found

    async def listen(self, channel: str) -> asyncio.Event:
        """An event set at each message on `channel` (and when messages may have been
        lost), until `forget`; returns once the channel is subscribed (or after
        `SUBSCRIBING` seconds)."""
        told = asyncio.Event()
        self.waiters.setdefault(channel, set()).add(told)
        if self.reader is None or self.reader.done():
            self.reader = asyncio.ensure_future(self._read())
        try:
            deadline = asyncio.get_running_loop().time() + self.SUBSCRIBING
            while channel not in self.subscribed:
                left = deadline - asyncio.get_running_loop().time()
                if left <= 0:
                    break
                await wait_set(self.changed, left)
        except BaseException:  # canceled: its event goes, nothing else was touched
            await self.forget(channel, told)
            raise
        return told

    async def forget(self, channel: str, told: asyncio.Event) -> None:
        """`told` no longer listens to `channel` (the reading task unsubscribes it when no
        waiter is left)."""
        waiters = self.waiters.get(channel)
        if waiters is None:
            return
        waiters.discard(told)
        if not waiters:
            del self.waiters[channel]

    def _tell_all(self) -> None:
        for waiters in self.waiters.values():
            for told in waiters:
                told.set()

    def _subscribed_now(self) -> None:
        changed, self.changed = self.changed, asyncio.Event()
        changed.set()

    async def _follow_channels(self) -> None:
        """Subscribe the channels listened to, unsubscribe the others."""
        if self.pubsub is None:
            self.pubsub = self.client.pubsub(ignore_subscribe_messages=True)
            self.subscribed = set()
        wanted = set(self.waiters)
        new, gone = wanted - self.subscribed, self.subscribed - wanted
        if new:
            await self.pubsub.subscribe(*new)
            self.subscribed |= new
            self._subscribed_now()
        if gone:
            await self.pubsub.unsubscribe(*gone)
            self.subscribed -= gone

    async def _close(self) -> None:
        pubsub, self.pubsub, self.subscribed = self.pubsub, None, set()
        if pubsub is not None:
            with contextlib.suppress(*BROKEN):
                await (getattr(pubsub, "aclose", None) or pubsub.reset)()

    async def _read(self) -> None:
        """Follow the channels and read the messages while any waiter listens, then close
        the subscription."""
        try:
            while self.waiters:
                try:
                    await self._follow_channels()
                    message = await self.pubsub.get_message(timeout=self.TURN)
                except BROKEN:  # broken, or never made: every waiter reads; anew
                    self._tell_all()
                    await self._close()
                    self._subscribed_now()
                    await asyncio.sleep(0.5)
                    continue
                if message and message.get("type") == "message":
                    for told in self.waiters.get(message["channel"], ()):
                        told.set()
        finally:
            self.reader = None
            await self._close()
            if self.waiters and self.reader is None:  # one came while it closed
                self.reader = asyncio.ensure_future(self._read())


class Queue:
    """A queue, for asyncio producers: `enqueue`, `enqueue_many`, `schedule`, `get`,
    `cancel`, `wait` and `statistics`, each as the synchronous `Queue` (or `Job`) does
    it."""

    def __init__(self, name: str, client: aioredis.Redis, *, prefix: str = DEFAULT_PREFIX,
                 job_model: type[Job] = Job) -> None:
        self.name = check_queue_name(name)
        self.client = client
        self.keys = keyspace(prefix, is_cluster(client))
        self.job_model = job_model
        self.scripts = AsyncScripts(client, self.keys)

    def __repr__(self) -> str:
        return f"aio.Queue({self.name!r})"

    async def enqueue(self, parameters: Any = "", *, task_id: str | None = None,
                      **options: Any) -> str:
        """A new task (see the synchronous `Queue.enqueue` for the options); its id, or the
        id of the waiting task its `identifier` maps to. One round trip."""
        ids = None if task_id is None else [task_id]
        return (await self.enqueue_many([parameters], task_ids=ids, **options))[0]

    async def enqueue_many(self, parameters: Sequence[Any], *,
                           task_ids: Sequence[str] | None = None, chunk: int = 1000,
                           options: Sequence[Mapping[str, Any]] | None = None,
                           **common: Any) -> list[str]:
        """Many tasks, one script call per `chunk` (see `Queue.enqueue_many`): all checked
        before the first write; `PartiallyEnqueued` when a chunk fails after others were
        written. The id of each task, in order."""
        ready = prepare_tasks(self.job_model, self.keys, self.name, parameters,
                              task_ids=task_ids, chunk=chunk, options=options, common=common)
        await self._check_sizes(ready.texts)
        waiting = [(self.name, task_id, checked.after) for task_id, _, checked in ready.tasks
                   if checked.after]
        parents = await self._parent_queues([parent for _, _, after in waiting
                                             for parent in after]) if waiting else {}
        if self.keys.cluster:  # the cluster-wide index of queues, apart (an index only)
            await self._call(self.client.zadd(self.keys.queues, {self.name: 0}, nx=True))
        done: list[str] = []
        for start, end in ready.chunks:
            plan = self.scripts.plans.enqueue(self.name, ready.tasks[start:end], time.time())
            try:
                written = await self.scripts.execute(plan)
            except (LimpydBluequeError, RedisError) as error:
                if not done:
                    raise
                raise PartiallyEnqueued(done, len(ready.tasks), error) from error
            done += [written_id for written_id, _ in written]
        if waiting:
            await self._register(waiting, parents)
        return done

    async def _parent_queues(self, ids: Sequence[str]) -> dict[str, str]:
        """The queue of each task of `ids`; `ConfigurationError` for one that is no task
        (see `dependencies.parent_queues`)."""
        wanted = list(dict.fromkeys(ids))
        async with self.client.pipeline(transaction=False) as pipe:
            for task_id in wanted:
                pipe.hget(self.keys.task(task_id), "queue")
            replies = await self._call(pipe.execute(raise_on_error=False))
        return dependencies.queues_read(wanted, replies)

    async def _register(self, waiting: Sequence[dependencies.Waiting],
                        parents: Mapping[str, str]) -> None:
        """Make the parents of `waiting` tasks tell them when they finish, and count those
        finished already (see `dependencies.register`). A task ended at once by a parent
        that failed has no follower yet: nothing more to tell."""
        steps, pairs = dependencies.depend_plans(self.scripts.plans, waiting, parents)
        replies = [await self.scripts.execute(step) for step in steps]
        due = dependencies.finished_parents(pairs, replies)
        releases, _ = dependencies.release_plans(self.scripts.plans, due, time.time(),
                                                 self.job_model.retention)
        for step in releases:
            await self.scripts.execute(step)

    async def schedule(self, parameters: Any, eta: float | datetime, *,
                       task_id: str | None = None, **options: Any) -> str:
        """A task that turns pending at `eta` (see `Queue.schedule`); its id."""
        return await self.enqueue(parameters, task_id=task_id, eta=timestamp("eta", eta),
                                  **options)

    async def get(self, task_id: str) -> TaskData | None:
        """Every field of a task of this queue, read at once and typed (as `Job.data`);
        None when there is no such task in this queue."""
        key = self.keys.task(check_task_id(task_id))
        values = await self._call(self.client.hgetall(key))
        if not values or values.get("queue") != self.name:
            return None
        return TaskData.from_hash(task_id, cast("dict[str, str]", values))

    async def cancel(self, task_id: str) -> bool:
        """Cancel a task of this queue as `Job.cancel` does: a waiting one at once, a
        running one asked to stop (its worker stops it within a beat). True when canceled
        or asked; False when it had finished already. `TaskNotFound` when there is no
        such task in this queue, `InvalidTransition` for a buried one. The tasks waiting
        for it are told by a worker of its queue (within half a second), not here."""
        plan = self.scripts.plans.cancel(self.name, check_task_id(task_id), time.time(),
                                         self.job_model.retention)
        outcome = await self.scripts.execute(plan)
        if outcome.done or outcome.status == "requested":
            return True
        if outcome.missing or outcome.status in WAITING_OR_RUNNING:  # another queue's
            raise TaskNotFound(task_id)
        if outcome.status in FINISHED:
            return False
        raise InvalidTransition(task_id, outcome.status, "canceled",
                                "only a waiting or running task can be canceled")

    async def wait(self, task_id: str, timeout: float | None = None) -> str:
        """Wait until a task finishes, as `Job.wait` does: its result once complete;
        `TaskFailed` (with its error; `stored_error` is None here: the `Error` records
        are the synchronous models'), `TaskCanceled`, `TimeoutError` after `timeout`
        seconds, `TaskNotFound`. Woken by the message its finish publishes (one
        subscription per client, whatever the number of waiters), reading the task
        every two seconds or so in case one is lost, and trying again while Redis
        cannot be reached."""
        task_id = check_task_id(task_id)
        deadline = check_timeout(timeout)
        channel = self.keys.outcome_channel(task_id)
        outcomes = Outcomes.of(self.client)
        told = await outcomes.listen(channel)
        try:
            while True:
                told.clear()
                try:
                    watched = settled(task_id, await self.scripts.execute(
                        self.scripts.plans.watch(task_id)))
                except RedisError:  # Redis away (a restart, a failover): try again
                    await asyncio.sleep(time_left(deadline, task_id, timeout, RETRY))
                    continue
                if watched is not None:
                    return cast(str, outcome(task_id, watched))  # (the stored text)
                left = time_left(deadline, task_id, timeout)
                await wait_set(told, left)
        finally:
            await outcomes.forget(channel, told)

    async def statistics(self) -> dict[str, dict[str, int]]:
        """This queue's statistics, in one round trip (see `Queue.statistics`)."""
        async with self.client.pipeline(transaction=False) as pipe:
            labels = statistics.queue_reads(pipe, self.keys, [self.name])
            values = await self._call(pipe.execute(raise_on_error=False))
        return statistics.figures([self.name], labels, values)[self.name]

    async def _check_sizes(self, texts: list[str]) -> None:
        big = maybe_too_large(texts)
        if not big:
            return
        try:
            reply = await self._call(self.client.config_get("proto-max-bulk-len"))
        except ResponseError:
            reply = {}  # a server that refuses CONFIG keeps the default
        refuse_too_large(big, bulk_limit(reply), where(self.client), "task parameters")

    async def _call(self, pending: Any) -> Any:
        """Await a command (`apart`); a server out of reach is `RedisUnavailable`, naming
        it."""
        try:
            return await apart(pending)
        except (RedisConnectionError, RedisTimeoutError, OSError) as error:
            raise unreachable(where(self.client), error) from error
