"""The binding of the models to one Redis database: `use_redis`, and the error of this
library for a Redis error raised through it (`unconverted`)."""

from __future__ import annotations

from redis.exceptions import RedisError

from ..connection.clients import DEFAULT_URL, BluequeDatabase
from ..connection.errors import describe, library_error
from ..exceptions import LimpydBluequeError
from .base import BluequeModel


def use_redis(url: str = DEFAULT_URL, *, check: bool = True, cluster: bool = False,
              **client_options: object) -> BluequeDatabase:
    """Bind every limpyd-blueque model to the Redis server at `url` and return the database.

    With `check`, the server is pinged so that a wrong URL fails here, with a
    `RedisUnavailable` that names it, rather than at the first task. `cluster` (or a
    `redis+cluster://` URL) binds them to a Redis Cluster, in the cluster key mode.
    """
    database = BluequeDatabase(url, cluster=cluster, **client_options)
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
