"""The connection to Redis: clients and databases from URLs (plain, TLS, unix socket,
Sentinel, Cluster), the embedded server of the example and the tests, the translation of
Redis errors into this library's, and the shims over private APIs of redis-py and
redis-limpyd.

The lowest layer: it knows nothing of tasks.
"""
