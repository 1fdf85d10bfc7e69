"""The one translator of Redis errors into this library's (`translate`, `reaching`), and
the naming of a server in them (`describe`), its passwords masked (`mask_secrets`).

Every message that says a server cannot be reached is made by `unreachable`.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Mapping
from typing import Any

import redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import DataError, OutOfMemoryError, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..exceptions import (
    ConfigurationError,
    InvalidParameters,
    LimpydBluequeError,
    ParametersTooLarge,
    RedisFull,
    RedisUnavailable,
)
from . import sentinel, shims

#: the scheme of a Redis Cluster URL (the cluster key mode): redis+cluster://host:port
CLUSTER_SCHEME = "redis+cluster:"
#: what a password is shown as
MASK = "***"
# "scheme://user:password@": the password is everything after the first ':' of the user
# part, up to the last '@' of the word (a password holding '@' or '/' is masked whole)
_URL_PASSWORD = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@]*:)\S*@")
# a password given in the query string: "?password=..."
_QUERY_PASSWORD = re.compile(r"([?&;](?:sentinel_)?password=)[^&;#\s]*", re.IGNORECASE)


def mask_secrets(text: str) -> str:
    """`text` with the password of every Redis URL in it replaced by `***`.

    ``redis://:pw@host:6379/0`` -> ``redis://:***@host:6379/0``, ``redis://user:pw@...``
    -> ``redis://user:***@...``, ``?password=pw`` -> ``?password=***``.
    """
    return _QUERY_PASSWORD.sub(rf"\g<1>{MASK}", _URL_PASSWORD.sub(rf"\g<1>{MASK}@", text))


def describe(client: redis.Redis) -> str:
    """A URL-like name of the server a client talks to, with the scheme of its connections
    (`redis://`, `rediss://` for TLS, `unix://`), without any user or password."""
    if not hasattr(client, "connection_pool"):  # a cluster client: its first node
        node = client.get_default_node()  # type: ignore[attr-defined]
        return f"{CLUSTER_SCHEME}//{node.host}:{node.port}"
    if sentinel.is_sentinel_pool(client.connection_pool):
        return sentinel.describe(client.connection_pool)
    return name_server(shims.pool_settings(client.connection_pool),
                       tls=shims.pool_uses_tls(client.connection_pool))


def name_server(settings: Mapping[str, Any], tls: bool = False) -> str:
    """A URL-like name of the server a pool's connection `settings` (host, port, path,
    db...) go to: `unix://path?db=N`, `rediss://host:port/N` with `tls`, else
    `redis://host:port/N`. Neither user nor password is ever in it."""
    db = settings.get("db", 0)
    if settings.get("path"):
        return f"unix://{settings['path']}?db={db}"
    host, port = settings.get("host", "localhost"), settings.get("port", 6379)
    return f"{'rediss' if tls else 'redis'}://{host}:{port}/{db}"


def refusal(error: RedisError, where: str) -> LimpydBluequeError | None:
    """The error of our tree for a refusal of the Redis server at `where` that is not
    about the data of a task (full, no such database, a value too large), else None."""
    text = str(error)
    if isinstance(error, OutOfMemoryError) or "OOM command not allowed" in text:
        return RedisFull(f"Redis at {where} is full: it refuses writes while its used memory "
                         "is over maxmemory (free memory, or raise maxmemory)")
    if "DB index is out of range" in text or "invalid DB index" in text:
        return ConfigurationError(f"Redis at {where} has no such database: {text}")
    if "exceeds maximum allowed size" in text or "invalid bulk length" in text:
        return ParametersTooLarge(f"Redis at {where} refused a value too large: {text}")
    if isinstance(error, DataError):
        return InvalidParameters(f"Redis at {where} cannot take this value: {text}")
    return None


#: what to do about a failed TLS connection, by the name of the error that failed it
TLS_HINTS = (
    ("SSLCertVerificationError", "the server's TLS certificate is not signed by a CA this "
     "client trusts: give the CA that signed it with ?ssl_ca_certs=/path/to/ca.crt"),
)


def unreachable(where: str, error: BaseException) -> RedisUnavailable:
    """The error for a server at `where` that could not be reached (`error` says why, and
    for a TLS failure, what to do about it: `TLS_HINTS`)."""
    text = mask_secrets(str(error))
    # the causes too: redis-py 5.0's asyncio client keeps only an error number in its text
    said = " ".join(f"{type(cause).__name__}: {cause}" for cause in causes(error))
    hints = [hint for marker, hint in TLS_HINTS if marker in said]
    return RedisUnavailable(f"cannot reach Redis at {where}: {text}"
                            + "".join(f" ({hint})" for hint in hints))


def causes(error: BaseException) -> list[BaseException]:
    """`error` and the errors it was raised from or during, each once."""
    found: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in found:
        found.append(current)
        current = current.__cause__ or current.__context__
    return found


def translate(error: BaseException, where: str) -> LimpydBluequeError | None:
    """The error of this library a redis-py `error` of the server at `where` stands for:
    a failed connection is `RedisUnavailable`, a refusal not about a task's data is that of
    `refusal`; None for any other (a script's own refusals are read by its step)."""
    if isinstance(error, (RedisConnectionError, RedisTimeoutError)):
        return unreachable(where, error)
    if isinstance(error, RedisError):
        return refusal(error, where)
    return None


def library_error(error: RedisError, where: str) -> LimpydBluequeError:
    """`translate`, and for an error it does not know: a `LimpydBluequeError` naming the
    server and the error (what a command prints of an error that reached it unconverted)."""
    return translate(error, where) or LimpydBluequeError(
        f"Redis at {where} refused: {type(error).__name__}: {error}")


@contextlib.contextmanager
def reaching(client: redis.Redis) -> Iterator[None]:
    """Turn a failed connection into `RedisUnavailable`, naming the server; a full
    server into `RedisFull`, a database it does not have into `ConfigurationError`, a
    value too large into `ParametersTooLarge` (see `translate`). Other errors pass."""
    try:
        yield
    except LimpydBluequeError:
        raise
    except (RedisConnectionError, RedisTimeoutError, ResponseError, DataError) as error:
        ours = translate(error, describe(client))
        if ours is None:
            raise
        raise ours from error
