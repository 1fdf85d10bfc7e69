"""A real Redis Cluster on local ports for the tests: three masters and three replicas,
each `redis-server --cluster-enabled yes` in a temporary directory, joined with
`redis-cli --cluster create`; stopped at the end."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import redis
from helpers import wait_for
from redis.cluster import RedisCluster

from limpyd_blueque.connection.embedded import EmbeddedRedis, find_redis_server, free_cluster_port

MASTERS = 3


def find_redis_cli() -> str:
    """redis-cli beside the redis-server the tests use, else from the PATH."""
    beside = Path(find_redis_server()).with_name("redis-cli")
    return str(beside) if beside.exists() else shutil.which("redis-cli") or "redis-cli"


class LocalCluster:
    def __init__(self, directory: Path, masters: int = MASTERS, replicas: int = 1) -> None:
        self.nodes: list[EmbeddedRedis] = []
        for n in range(masters * (1 + replicas)):
            folder = directory / f"node-{n}"
            folder.mkdir(parents=True)
            node = EmbeddedRedis(directory=str(folder), options=[
                "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", "2000"])
            node.port = free_cluster_port()
            self.nodes.append(node.start())
        created = subprocess.run(
            [find_redis_cli(), "--cluster", "create",
             *(f"127.0.0.1:{node.port}" for node in self.nodes),
             "--cluster-replicas", str(replicas), "--cluster-yes"],
            capture_output=True, text=True, timeout=60)
        if created.returncode != 0:
            self.stop()
            raise RuntimeError(f"redis-cli --cluster create failed: {created.stdout[-2000:]}"
                               f"{created.stderr[-2000:]}")
        wait_for(self._ready, timeout=30, interval=0.1)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.nodes[0].port}/0"

    def _ready(self) -> bool:
        for node in self.nodes:
            try:
                if redis.Redis(port=node.port).cluster("info").get("cluster_state") != "ok":
                    return False
            except redis.RedisError:
                return False
        return True

    def client(self) -> RedisCluster:
        return RedisCluster(host="127.0.0.1", port=self.nodes[0].port, decode_responses=True)

    def masters(self) -> list[int]:
        """The ports of the master nodes."""
        return [node.port for node in self.nodes
                if redis.Redis(port=node.port).info("replication").get("role") == "master"]

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
