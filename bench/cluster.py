"""Drain throughput of the cluster key mode with 1, 2 and 3 shards, one worker per shard.

For each shard count N, a Redis Cluster of N masters (no replicas) is made on local ports
(slots split evenly with CLUSTER ADDSLOTS, nodes joined with CLUSTER MEET: redis-cli's
`--cluster create` wants three masters at least). N queues are chosen so that each lives
on its own master; `--tasks` no-op tasks are enqueued on each; then N `blueque-worker`
processes (in-process tasks, `--no-fork`), one per queue, drain them. The figure is the
total tasks per second from the workers' start to the last task complete.

    python3 bench/cluster.py                 # one plain Redis, then 1, 2 and 3 shards
    python3 bench/cluster.py --tasks 500     # quicker

Output: a table, and `bench/results/cluster.json`. On this project's 2-core machine the
workers, the task processes and the Redis nodes share two cores, so the curve shows what
sharding costs more than what it gains: see bench/history.rst.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis
from redis.crc import key_slot

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from limpyd_blueque import Queue, use_redis  # noqa: E402
from limpyd_blueque.connection.embedded import EmbeddedRedis, free_cluster_port  # noqa: E402

SLOTS = 16384


def noop(job, queue):
    """The task of this benchmark: nothing (the queue's own cost is measured)."""
    return "ok"


def start_cluster(shards: int, directory: Path) -> list[EmbeddedRedis]:
    """`shards` masters sharing the slots evenly, joined, ready."""
    nodes = []
    for n in range(shards):
        folder = directory / f"node-{n}"
        folder.mkdir(parents=True)
        node = EmbeddedRedis(directory=str(folder), options=[
            "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"])
        node.port = free_cluster_port()
        nodes.append(node.start())
    clients = [redis.Redis(port=node.port) for node in nodes]
    for n, client in enumerate(clients):
        first, last = n * SLOTS // shards, (n + 1) * SLOTS // shards
        client.execute_command("CLUSTER", "ADDSLOTS", *range(first, last))
    for client in clients[1:]:
        client.execute_command("CLUSTER", "MEET", "127.0.0.1", nodes[0].port)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        infos = [client.execute_command("CLUSTER", "INFO") for client in clients]
        text = [info.decode() if isinstance(info, bytes) else str(info) for info in infos]
        if all("cluster_state:ok" in info and f"cluster_known_nodes:{shards}" in info
               for info in text):
            return nodes
        time.sleep(0.1)
    raise RuntimeError(f"a cluster of {shards} nodes did not form")


def queue_on(shard: int, shards: int) -> str:
    """A queue name whose slot is on master `shard` of `shards`."""
    first, last = shard * SLOTS // shards, (shard + 1) * SLOTS // shards
    n = 0
    while not first <= key_slot(f"{{bench-{n}}}".encode()) < last:
        n += 1
    return f"bench-{n}"


def drain(shards: int, tasks: int) -> dict[str, float]:
    """The drain on `shards` masters (0: one plain Redis, in the default key mode)."""
    directory = Path(tempfile.mkdtemp(prefix="limpyd-blueque-cluster-"))
    nodes = start_cluster(shards, directory) if shards else [EmbeddedRedis().start()]
    workers = []
    try:
        url = (f"redis+cluster://127.0.0.1:{nodes[0].port}/0" if shards
               else nodes[0].url)
        use_redis(url)
        queues = [queue_on(n, shards) for n in range(shards)] if shards else ["bench-0"]
        for name in queues:
            queue = Queue.named(name)
            for start in range(0, tasks, 1000):
                queue.enqueue_many([""] * min(1000, tasks - start))
        started = time.perf_counter()
        workers = [subprocess.Popen(
            [sys.executable, "-m", "limpyd_blueque.cli", f"--redis-url={url}",
             f"--pythonpath={ROOT / 'bench'}", f"--queues={name}", "--callback=cluster.noop",
             "--no-fork", "--no-title", "--logger-level=ERROR", "--timeout=0.1",
             "--max-loops=100000000"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for name in queues]
        while any(Queue.named(name).counts()["complete"] < tasks for name in queues):
            time.sleep(0.05)
        seconds = time.perf_counter() - started
        total = tasks * len(queues)
        return {"shards": shards, "tasks": total, "seconds": round(seconds, 2),
                "tasks_per_second": round(total / seconds, 1)}
    finally:
        for worker in workers:
            worker.kill()
            worker.wait()
        for node in nodes:
            node.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=2000, help="tasks per shard")
    parser.add_argument("--shards", default="0,1,2,3",
                        help="shard counts to run (0: one plain Redis, the default key mode)")
    options = parser.parse_args()
    rows = [drain(int(shards), options.tasks) for shards in options.shards.split(",")]
    print("| shards | workers | tasks | seconds | tasks/s |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['shards'] or 'no cluster'} | {max(row['shards'], 1)} | {row['tasks']} | "
              f"{row['seconds']} | "
              f"{row['tasks_per_second']} |")
    result = {"meta": {"cpus": os.cpu_count(), "python": platform.python_version(),
                       "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())},
              "rows": rows}
    (ROOT / "bench" / "results" / "cluster.json").write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
