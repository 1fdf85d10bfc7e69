"""Redis clients and databases: the database the models are bound to (`BluequeDatabase`,
from a URL), private clients, and checks of a server's settings and limits."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import redis
from limpyd.contrib.database import PipelineDatabase
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..exceptions import (
    ConfigurationError,
    ParametersTooLarge,
)
from . import sentinel, shims
from .errors import CLUSTER_SCHEME, describe, mask_secrets, reaching, unreachable

DEFAULT_URL = "redis://localhost:6379/0"
#: the smallest `proto-max-bulk-len` a Redis server can have: a value of no more bytes is
#: never too large for it, and the server is not asked its own limit
SMALLEST_BULK_LIMIT = 1024 * 1024
#: redis-server's default `proto-max-bulk-len`, for a server that refuses CONFIG
DEFAULT_BULK_LIMIT = 512 * 1024 * 1024


def check_value_sizes(client: redis.Redis, texts: Iterable[str],
                      what: str = "task parameters") -> None:
    """Raise `ParametersTooLarge` if one of `texts` is longer, in bytes, than the server
    takes in one value (its `proto-max-bulk-len`). The server is asked its limit only
    when a text may be over the smallest one it can have."""
    big = maybe_too_large(texts)
    if not big:
        return
    try:
        with reaching(client):
            reply = client.config_get("proto-max-bulk-len")
    except ResponseError:
        reply = {}  # a server that refuses CONFIG (a managed service) keeps the default
    refuse_too_large(big, bulk_limit(reply), describe(client), what)


def maybe_too_large(texts: Iterable[str]) -> list[str]:
    """The texts that may be over the smallest `proto-max-bulk-len` a server can have."""
    return [text for text in texts if len(text) * 4 > SMALLEST_BULK_LIMIT]


def bulk_limit(reply: object) -> int:
    """The server's `proto-max-bulk-len` from its `CONFIG GET` reply (else the default)."""
    value = reply.get("proto-max-bulk-len") if isinstance(reply, dict) else None
    try:
        return int(str(value))
    except ValueError:
        return DEFAULT_BULK_LIMIT


def refuse_too_large(texts: Iterable[str], limit: int, where: str, what: str) -> None:
    """`ParametersTooLarge` if one of `texts` is over `limit` bytes."""
    for text in texts:
        size = len(text.encode("utf-8", "surrogatepass"))
        if size > limit:
            raise ParametersTooLarge(
                f"{what} of {size} bytes are over the {limit} bytes Redis at "
                f"{where} takes in one value (its proto-max-bulk-len)")


def lean_connection_options() -> dict[str, Any]:
    """Client options that make opening a connection cost no extra round trip.

    Every forked task process opens its own connection: RESP2 needs no HELLO, and no
    CLIENT SETINFO is sent (`driver_info=None` on redis-py 8, `lib_name=None` and
    `lib_version=None` before).

    Commands are not retried by redis-py either: a protocol step whose reply was lost
    must not run twice behind the library's back (the worker retries outcomes itself,
    knowing how to tell its own earlier success).

    A TLS connection sends one PING when it connects (see `shims.settled_connect`).
    """
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    options: dict[str, Any] = {"protocol": 2, "retry": Retry(NoBackoff(), 0),
                               # ids that are not UTF-8 go back to Redis as they came
                               "command_packer": shims.SurrogateSafePacker(),
                               "redis_connect_func": shims.settled_connect}
    options.update(shims.no_client_setinfo())
    return options


def check_database(url: str) -> str:
    """`url` if the database it names, by its path or its `db` option, is a whole number of
    0 or more (or it names none); else `ConfigurationError` naming the URL, its password
    masked. redis-py would silently take database 0 for a path it cannot read (`/abc`,
    `/1.5`) and database 12 for `/1/2`. The path of a `unix://` URL is its socket's; a
    sentinel URL is checked by `sentinel.parse`."""
    try:
        parts = urlsplit(url)
        texts = parse_qs(parts.query).get("db", [])
    except ValueError:
        return url  # not a URL at all: redis-py says why when it connects
    if f"{parts.scheme.lower()}:" in ("redis:", "rediss:", CLUSTER_SCHEME):
        path = unquote(parts.path).strip("/")
        texts = [path, *texts] if path else texts
    for text in texts:
        if not (text.isascii() and text.isdigit()):
            raise ConfigurationError(f"invalid Redis URL {mask_secrets(url)!r}: its database "
                                     f"{text!r} is not a whole number of 0 or more")
    return url


#: the TLS options of a `rediss://` URL that name a file (or, `ssl_ca_path`, a folder)
TLS_FILES = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_ca_path")
#: the values `ssl_cert_reqs` takes
CERT_REQUIREMENTS = ("none", "optional", "required")


def check_url(url: str) -> str:
    """`url` if its database is right (`check_database`) and so are its TLS options
    (`check_tls_options`); else `ConfigurationError` naming the problem, its password
    masked."""
    return check_tls_options(check_database(url))


def check_tls_options(url: str) -> str:
    """`url` if its TLS options are right: only a `rediss://` URL takes them, the files
    they name exist, and `ssl_cert_reqs` is one of `CERT_REQUIREMENTS`; else
    `ConfigurationError` naming the problem. Unchecked, a missing CA file fails each
    connection with "No such file or directory", and an option on a `redis://` URL with
    a TypeError of redis-py."""
    try:
        parts = urlsplit(url)
        query = parse_qs(parts.query)
    except ValueError:
        return url  # not a URL at all: redis-py says why when it connects
    scheme = parts.scheme.lower()
    tls = [name for name in query if name.lower().startswith("ssl")]
    if not tls or scheme not in ("redis", "rediss", "unix"):
        return url
    shown = mask_secrets(url)
    if scheme != "rediss":
        raise ConfigurationError(f"invalid Redis URL {shown!r}: {', '.join(sorted(tls))} "
                                 "is a TLS option, for a rediss:// URL")
    for name in TLS_FILES:
        for value in query.get(name, []):
            path = Path(value)
            if not (path.is_dir() if name == "ssl_ca_path" else path.is_file()):
                raise ConfigurationError(f"invalid Redis URL {shown!r}: its {name} "
                                         f"{value!r} is not an existing "
                                         f"{'folder' if name == 'ssl_ca_path' else 'file'}")
    for value in query.get("ssl_cert_reqs", []):
        if value.lower() not in CERT_REQUIREMENTS:
            raise ConfigurationError(f"invalid Redis URL {shown!r}: its ssl_cert_reqs is "
                                     f"{value!r}, not one of {', '.join(CERT_REQUIREMENTS)}")
    return url


class BluequeDatabase(PipelineDatabase):
    """A limpyd database made from a Redis URL, holding its own connection.

    Unlike limpyd's default database, it shares no class-level connection cache, so
    two databases on two URLs never mix.
    """

    #: the encryption keys of the tasks written and read through it (a
    #: `protocol.encryption.Keyring`, given by `use_redis`; None: tasks are written clear)
    keyring: Any = None

    def __init__(self, url: str = DEFAULT_URL, *, cluster: bool = False,
                 **client_options: object) -> None:
        check_url(url)  # before any connection: a wrong one may hold other data
        #: the cluster key mode (see `keys.KeySpace.tag`): `cluster=True`, or a
        #: `redis+cluster://` URL
        self.cluster = cluster or url.lower().startswith(CLUSTER_SCHEME)
        self.url = ("redis:" + url[len(CLUSTER_SCHEME):]
                    if url.lower().startswith(CLUSTER_SCHEME) else url)
        self._client_options = client_options
        super().__init__()

    def connect(self, **settings: object) -> redis.Redis:
        if self.cluster:
            return self._cluster_client()
        options = {"encoding_errors": "surrogateescape", **lean_connection_options(),
                   **self._client_options}
        try:
            # surrogateescape: bytes that are not UTF-8 reach Python instead of breaking
            # the whole reply, so one bad task cannot stop a worker (see Worker.launch)
            if sentinel.is_sentinel_url(self.url):
                return sentinel.master_client(self.url, decode_responses=True, **options)
            return redis.Redis.from_url(self.url, decode_responses=True, **options)
        except ValueError as error:
            raise ConfigurationError(f"invalid Redis URL {mask_secrets(self.url)!r}: "
                                     f"{mask_secrets(str(error))}") from error

    def _cluster_client(self) -> redis.Redis:
        """A Redis Cluster client (redis-py's `RedisCluster`), which routes each command
        to the node of its keys' slot."""
        from redis.cluster import RedisCluster

        try:
            client: redis.Redis = RedisCluster.from_url(  # type: ignore[assignment]
                self.url, decode_responses=True, encoding_errors="surrogateescape",
                **self._client_options)
        except (ValueError, RedisError) as error:
            if isinstance(error, (RedisConnectionError, RedisTimeoutError)):
                raise unreachable(mask_secrets(self.url), error) from error
            raise ConfigurationError(f"invalid Redis Cluster URL {mask_secrets(self.url)!r}: "
                                     f"{mask_secrets(str(error))}") from error
        return client

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


def open_connection(client: redis.Redis) -> None:
    """Connect one connection of `client`'s pool now, sending no command (a cluster
    client connects to the node of each command's slot when it first needs it)."""
    if not hasattr(client, "connection_pool"):
        return
    pool = client.connection_pool
    try:
        connection = shims.checkout_connection(pool)
    except (redis.ConnectionError, redis.TimeoutError):
        return  # the first command will report it
    pool.release(connection)


def private_client(client: redis.Redis) -> redis.Redis:
    """A client to the same server as `client`, with a connection pool of its own."""
    if not hasattr(client, "connection_pool"):  # a cluster client
        twin: redis.Redis = shims.twin_cluster_client(client)
        return twin
    return redis.Redis(connection_pool=shims.twin_pool(client.connection_pool))
