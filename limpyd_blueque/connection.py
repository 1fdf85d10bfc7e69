"""Binding the models to a Redis server, and naming that server in errors."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import redis
from limpyd.contrib.database import PipelineDatabase
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from . import compat
from .exceptions import ConfigurationError, RedisUnavailable

DEFAULT_URL = "redis://localhost:6379/0"


def describe(client: redis.Redis) -> str:
    """A URL-like name of the server a client talks to, without any password."""
    kwargs = compat.pool_settings(client.connection_pool)
    if kwargs.get("path"):
        return f"unix://{kwargs['path']}?db={kwargs.get('db', 0)}"
    host, port = kwargs.get("host", "localhost"), kwargs.get("port", 6379)
    return f"redis://{host}:{port}/{kwargs.get('db', 0)}"


@contextlib.contextmanager
def reaching(client: redis.Redis) -> Iterator[None]:
    """Turn a failed connection into `RedisUnavailable`, naming the server."""
    try:
        yield
    except (RedisConnectionError, RedisTimeoutError) as error:
        if isinstance(error, RedisUnavailable):
            raise
        raise RedisUnavailable(f"cannot reach Redis at {describe(client)}: {error}") from error


def lean_connection_options() -> dict[str, Any]:
    """Client options that make opening a connection cost no extra round trip.

    Every forked task process opens its own connection: RESP2 needs no HELLO, and no
    CLIENT SETINFO is sent (`driver_info=None` on redis-py 8, `lib_name=None` and
    `lib_version=None` before).

    Commands are not retried by redis-py either: a protocol step whose reply was lost
    must not run twice behind the library's back (the worker retries outcomes itself,
    knowing how to tell its own earlier success).
    """
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    options: dict[str, Any] = {"protocol": 2, "retry": Retry(NoBackoff(), 0),
                               # ids that are not UTF-8 go back to Redis as they came
                               "command_packer": compat.SurrogateSafePacker()}
    options.update(compat.no_client_setinfo())
    return options


class BluequeDatabase(PipelineDatabase):
    """A limpyd database made from a Redis URL, holding its own connection.

    Unlike limpyd's default database, it shares no class-level connection cache, so
    two databases on two URLs never mix.
    """

    def __init__(self, url: str = DEFAULT_URL, **client_options: object) -> None:
        self.url = url
        self._client_options = client_options
        super().__init__()

    def connect(self, **settings: object) -> redis.Redis:
        options = {"encoding_errors": "surrogateescape", **lean_connection_options(),
                   **self._client_options}
        try:
            # surrogateescape: bytes that are not UTF-8 reach Python instead of breaking
            # the whole reply, so one bad task cannot stop a worker (see Worker.launch)
            return redis.Redis.from_url(self.url, decode_responses=True, **options)
        except ValueError as error:
            raise ConfigurationError(f"invalid Redis URL {self.url!r}: {error}") from error

    def ping(self) -> None:
        """Check that the server answers; raise `RedisUnavailable` if not."""
        with reaching(self.connection):
            self.connection.ping()


class UnboundDatabase(PipelineDatabase):
    """The database of the models until the application binds a real one."""

    def connect(self, **settings: object) -> redis.Redis:
        raise ConfigurationError(
            "no Redis server bound to the limpyd-blueque models: call "
            "limpyd_blueque.use_redis(url) (or BluequeModel.use_database(database)) first"
        )


def safety_warnings(client: redis.Redis) -> list[str]:
    """What in the server's configuration can lose tasks silently (empty when nothing).

    An eviction policy that may drop keys without a TTL, or no persistence at all. A
    server that refuses CONFIG (some managed services) gives no warning.
    """
    try:
        policy = client.config_get("maxmemory-policy").get("maxmemory-policy") or ""
        appendonly = client.config_get("appendonly").get("appendonly") or "no"
        save = client.config_get("save").get("save") or ""
    except redis.ResponseError:
        return []
    warnings = []
    if policy.startswith("allkeys-"):
        warnings.append(f"maxmemory-policy is {policy}: Redis may evict task keys when memory "
                        "is full; use noeviction")
    if appendonly != "yes" and not save.strip():
        warnings.append("persistence is off (no AOF, no RDB snapshots): a Redis restart "
                        "loses every task; turn on appendonly")
    return warnings


def use_redis(url: str = DEFAULT_URL, *, check: bool = True,
              **client_options: object) -> BluequeDatabase:
    """Bind every limpyd-blueque model to the Redis server at `url` and return the database.

    With `check`, the server is pinged so that a wrong URL fails here, with a
    `RedisUnavailable` that names it, rather than at the first task.
    """
    from .models import BluequeModel

    database = BluequeDatabase(url, **client_options)
    if check:
        database.ping()
    BluequeModel.use_database(database)
    return database


def open_connection(client: redis.Redis) -> None:
    """Connect one connection of `client`'s pool now, sending no command."""
    pool = client.connection_pool
    try:
        connection = compat.checkout_connection(pool)
    except (redis.ConnectionError, redis.TimeoutError):
        return  # the first command will report it
    pool.release(connection)


def private_client(client: redis.Redis) -> redis.Redis:
    """A client to the same server as `client`, with a connection pool of its own."""
    return redis.Redis(connection_pool=compat.twin_pool(client.connection_pool))
