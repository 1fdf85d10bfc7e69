"""The binding of the models to one Redis database: `use_redis`, and the error of this
library for a Redis error raised through it (`unconverted`)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from redis.exceptions import RedisError

from ..connection.clients import DEFAULT_URL, BluequeDatabase
from ..connection.errors import describe, library_error
from ..exceptions import LimpydBluequeError
from ..protocol.encryption import Keyring
from .base import BluequeModel


def use_redis(url: str | None = None, *, check: bool = True, cluster: bool = False,
              encryption_keys: Mapping[str, Any] | Keyring | None = None,
              **client_options: object) -> BluequeDatabase:
    """Bind every limpyd-blueque model to the Redis server at `url` and return the database.

    Without `url`, the URL is that of the environment variable `REDIS_URL`, as for the
    commands, else `redis://localhost:6379/0`. The URL may be `redis://`, `rediss://`
    (TLS: `?ssl_ca_certs=/path/to/ca.crt` names the CA that signed the server's
    certificate), `unix:///path/to/redis.sock`, `redis+sentinel://` or
    `redis+cluster://`; a user and password go in it (`redis://user:password@host...`).

    With `check`, the server is pinged so that a wrong URL fails here, with a
    `RedisUnavailable` that names it, rather than at the first task. `cluster` (or a
    `redis+cluster://` URL) binds them to a Redis Cluster, in the cluster key mode.
    `encryption_keys` (`{key id: key}`, the one that encrypts first; see
    docs/payloads.rst) seals the tasks these models write, and opens those they read.
    """
    keyring = (encryption_keys if isinstance(encryption_keys, Keyring) or encryption_keys is None
               else Keyring(encryption_keys))
    if url is None:
        url = os.environ.get("REDIS_URL") or DEFAULT_URL
    database = BluequeDatabase(url, cluster=cluster, **client_options)
    database.keyring = keyring
    if check:
        database.ping()
    BluequeModel.use_database(database)
    return database


def unconverted(error: RedisError) -> LimpydBluequeError:
    """The error of this library for a redis-py `error` that reached a command or a page
    unconverted, naming the server the models are bound to."""
    database = BluequeModel.database
    where = describe(database.connection) if isinstance(database, BluequeDatabase) else "?"
    return library_error(error, where)
