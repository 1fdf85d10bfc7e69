"""Redis Sentinel: a `redis+sentinel://` URL names the sentinels and the service they
watch, and gives a client whose connections go to the service's master of the moment
(redis-py's `Sentinel.master_for`): after a failover, each connection finds the new
master when it reconnects.

    redis+sentinel://[[user]:password@]host:port[,host:port...]/service[/db][?options]

`password` (and `user`) are the master's; the query takes `sentinel_password` (and
`sentinel_username`) for sentinels that ask for one, and `socket_timeout`,
`socket_connect_timeout` (seconds) for both. The library's own steps are unchanged: a
step whose connection breaks during a failover fails as with any lost connection, and
the worker goes on with the next beat (see docs/leases.rst, "Sentinel").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import redis
from redis import sentinel as redis_sentinel

from ..exceptions import ConfigurationError

#: redis-py's sentinel parts (untyped there)
Sentinel: Any = redis_sentinel.Sentinel
SentinelConnectionPool: Any = redis_sentinel.SentinelConnectionPool
SCHEME = "redis+sentinel"
#: the query options a sentinel URL takes: name -> converter
NUMBERS = ("socket_timeout", "socket_connect_timeout")


@dataclass(frozen=True)
class SentinelURL:
    """A parsed `redis+sentinel://` URL."""

    sentinels: list[tuple[str, int]]
    service: str
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinel_options: dict[str, Any] = field(default_factory=dict)
    socket_options: dict[str, float] = field(default_factory=dict)

    def describe(self) -> str:
        """The URL without any password."""
        hosts = ",".join(f"{host}:{port}" for host, port in self.sentinels)
        return f"{SCHEME}://{hosts}/{self.service}/{self.db}"


def is_sentinel_url(url: str) -> bool:
    return url.lower().startswith(f"{SCHEME}://")


def parse(url: str) -> SentinelURL:
    """`url` as a `SentinelURL`; `ConfigurationError` naming what is wrong (never the
    password)."""
    parts = urlsplit(url)
    where = parts.netloc.rsplit("@", 1)[-1]
    sentinels = [_address(entry) for entry in where.split(",") if entry]
    path = [unquote(part) for part in parts.path.split("/") if part]
    if not sentinels or not path or len(path) > 2:
        raise ConfigurationError(f"a sentinel URL is {SCHEME}://host:port[,host:port...]/"
                                 "service[/db]: the sentinels and the service name are needed")
    if len(path) == 2 and not path[1].isdigit():
        raise ConfigurationError(f"the database of a sentinel URL is a number, not {path[1]!r}")
    username = password = None
    if "@" in parts.netloc:
        credentials = parts.netloc.rsplit("@", 1)[0]
        user, _, secret = credentials.partition(":")
        username, password = unquote(user) or None, unquote(secret) or None
    query = {name: values[-1] for name, values in parse_qs(parts.query).items()}
    socket_options = {name: _seconds(name, query.pop(name)) for name in NUMBERS
                      if name in query}
    sentinel_options = {name[len("sentinel_"):]: query.pop(name)
                        for name in ("sentinel_password", "sentinel_username") if name in query}
    if query:
        raise ConfigurationError(f"unknown option(s) of a sentinel URL: {', '.join(sorted(query))}")
    return SentinelURL(sentinels, path[0], int(path[1]) if len(path) == 2 else 0, username,
                       password, sentinel_options, socket_options)


def _address(entry: str) -> tuple[str, int]:
    host, _, port = entry.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigurationError(f"a sentinel is host:port, not {entry!r}")
    return host.strip("[]"), int(port)


def _seconds(name: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < 3600:
        raise ConfigurationError(f"{name} of a sentinel URL is seconds (0 to 3600), not {text!r}")
    return value


def master_client(url: str, **options: Any) -> redis.Redis:
    """A client of the master of the service `url` names (`options` go to its
    connections, as `redis.Redis` takes them)."""
    parsed = parse(url)
    sentinel = Sentinel(parsed.sentinels,
                        sentinel_kwargs={**parsed.sentinel_options, **parsed.socket_options},
                        **parsed.socket_options)
    settings = {**parsed.socket_options, "db": parsed.db, **options}
    if parsed.password is not None:
        settings.update(username=parsed.username, password=parsed.password)
    client: redis.Redis = sentinel.master_for(parsed.service, redis_class=redis.Redis,
                                              **settings)
    client.connection_pool.sentinel_url = parsed  # type: ignore[attr-defined]
    return client


def is_sentinel_pool(pool: Any) -> bool:
    return isinstance(pool, SentinelConnectionPool)


def describe(pool: Any) -> str:
    """The sentinel URL a pool was made from, without its password."""
    parsed = getattr(pool, "sentinel_url", None)
    if isinstance(parsed, SentinelURL):
        return parsed.describe()
    return f"{SCHEME}://?/{pool.service_name}"


def twin(pool: Any) -> Any:
    """A new, empty pool to the same service's master, through the same sentinels."""
    kwargs = {name: value for name, value in pool.connection_kwargs.items()
              if name != "connection_pool"}
    new = SentinelConnectionPool(pool.service_name, pool.sentinel_manager,
                                 connection_class=pool.connection_class,
                                 is_master=pool.is_master,
                                 check_connection=pool.check_connection, **kwargs)
    new.sentinel_url = getattr(pool, "sentinel_url", None)
    return new
