"""The documented path of the embedded redis-server, which lives in
`limpyd_blueque.connection.embedded` (this module only re-exports it)."""

from .connection.embedded import (
    EmbeddedRedis,
    find_redis_server,
    free_cluster_port,
    free_port,
    redis_url_or_embedded,
)

__all__ = ["EmbeddedRedis", "find_redis_server", "free_cluster_port", "free_port",
           "redis_url_or_embedded"]
