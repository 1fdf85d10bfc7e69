"""A Redis Sentinel group on local ports for the tests: one master, one replica and three
sentinels watching them (quorum 2), each a real redis-server process in a temporary
directory, stopped at the end."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import redis
from helpers import wait_for

from limpyd_blueque.connection.embedded import EmbeddedRedis, find_redis_server, free_port

SERVICE = "mymaster"
#: how long a master must be silent before a sentinel calls it down, in milliseconds
DOWN_AFTER = 1000


class SentinelGroup:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        (directory / "master").mkdir(parents=True)
        self.master = EmbeddedRedis(directory=str(directory / "master")).start()
        (directory / "replica").mkdir()
        self.replica = EmbeddedRedis(directory=str(directory / "replica"), options=[
            "--replicaof", "127.0.0.1", str(self.master.port)]).start()
        wait_for(lambda: self._linked(self.replica.port), timeout=20, interval=0.05)
        self.sentinel_ports = [free_port() for _ in range(3)]
        self.sentinels = [self._sentinel(port) for port in self.sentinel_ports]
        wait_for(self._watching, timeout=30, interval=0.1)

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports)
        return f"redis+sentinel://{hosts}/{SERVICE}/0"

    def _linked(self, port: int) -> bool:
        info = redis.Redis(port=port).info("replication")
        return info.get("master_link_status") == "up"

    def _sentinel(self, port: int) -> subprocess.Popen[bytes]:
        folder = self.directory / f"sentinel-{port}"
        folder.mkdir()
        config = folder / "sentinel.conf"
        config.write_text(
            f"port {port}\nbind 127.0.0.1\ndaemonize no\ndir {folder}\n"
            "logfile sentinel.log\n"
            f"sentinel monitor {SERVICE} 127.0.0.1 {self.master.port} 2\n"
            f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER}\n"
            f"sentinel failover-timeout {SERVICE} 5000\n"
            f"sentinel parallel-syncs {SERVICE} 1\n")
        return subprocess.Popen([find_redis_server(), str(config), "--sentinel"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)

    def _watching(self) -> bool:
        """Every sentinel knows the master, its replica and the two other sentinels."""
        for port in self.sentinel_ports:
            try:
                client = redis.Redis(port=port, decode_responses=True)
                master = client.sentinel_master(SERVICE)
                if master.get("num-slaves", 0) < 1 or master.get("num-other-sentinels", 0) < 2:
                    return False
            except redis.RedisError:
                return False
        return True

    def master_port(self) -> int | None:
        """The port of the master the sentinels name now (None: none answers)."""
        for port in self.sentinel_ports:
            try:
                address = redis.Redis(port=port).sentinel_get_master_addr_by_name(SERVICE)
                if address:
                    return int(address[1])
            except redis.RedisError:
                continue
        return None

    def kill_master(self) -> float:
        """SIGKILL the master, as a crashed host would; when it died (monotonic)."""
        self.master.kill()
        return time.monotonic()

    def stop(self) -> None:
        for process in self.sentinels:
            process.kill()
            process.wait()
        self.replica.stop()
        self.master.stop()
