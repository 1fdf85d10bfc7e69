"""Fixtures: a real, private redis-server for the whole run, and a clean database per test."""

from __future__ import annotations

import os
import uuid

import pytest
import redis

from limpyd_blueque import BluequeDatabase, BluequeModel
from limpyd_blueque.connection.embedded import EmbeddedRedis


@pytest.fixture(scope="session")
def redis_url(worker_id):
    """`REDIS_URL` when the user sets it, else a redis-server started for this run. Each
    process of a parallel run (pytest-xdist's `-n`) has its own server; on the user's
    `REDIS_URL`, its own database: the URL's, plus the process's number."""
    url = os.environ.get("REDIS_URL")
    if url:
        yield with_database_offset(url, 0 if worker_id == "master" else int(worker_id[2:]))
        return
    with EmbeddedRedis() as server:
        yield server.url


@pytest.fixture(scope="session")
def worker_id(request):
    """pytest-xdist's name of this process (`gw0`, `gw1`...), `master` when run alone."""
    return getattr(request.config, "workerinput", {}).get("workerid", "master")


def with_database_offset(url, offset):
    """`url` with its database number (the path's, default 0) moved up by `offset`."""
    from urllib.parse import urlsplit, urlunsplit

    if not offset:
        return url
    parts = urlsplit(url)
    database = int(parts.path.strip("/") or 0) + offset
    return urlunsplit(parts._replace(path=f"/{database}"))


@pytest.fixture(scope="session")
def database(redis_url):
    database = BluequeDatabase(redis_url)
    BluequeModel.use_database(database)
    return database


@pytest.fixture(autouse=True)
def clean(request, redis_url):
    """Every test starts on an empty database."""
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    yield
    client.close()


@pytest.fixture
def conn(database):
    """The redis-py client the models use (strings, not bytes)."""
    return database.connection


class CommandCounter:
    """Records the commands clients send to the server while the block runs.

    It reads the server's MONITOR stream, so it sees exactly what crossed the wire;
    the commands a Lua script runs inside the server are left out, since they cost
    no round trip. `commands` lists the command names, `count` how many.
    """

    def __init__(self, url):
        self.observer = redis.Redis.from_url(url, decode_responses=True)
        self.monitor = redis.Redis.from_url(url, decode_responses=True).monitor()

    def _mark(self, label):
        marker = f"limpyd-blueque-marker-{label}-{uuid.uuid4().hex}"
        self.observer.echo(marker)
        return marker

    def _read_until(self, marker):
        seen = []
        while True:
            entry = self.monitor.next_command()
            if marker in entry["command"]:
                return seen
            if entry.get("client_type") != "lua":
                seen.append(entry["command"].split(" ", 1)[0].upper())

    def __enter__(self):
        self.monitor.__enter__()
        self._read_until(self._mark("start"))
        return self

    def __exit__(self, *exc):
        self.commands = self._read_until(self._mark("end"))
        self.count = len(self.commands)
        self.monitor.__exit__(*exc)


@pytest.fixture
def count_commands(redis_url):
    return lambda: CommandCounter(redis_url)


@pytest.fixture
def workers(redis_url, conn, tmp_path):
    """`blueque-worker` processes for one test, stopped (with their tasks) at its end."""
    from operating_jobs import WorkerProcesses

    processes = WorkerProcesses(redis_url, tmp_path)
    yield processes
    processes.stop_all(conn)
