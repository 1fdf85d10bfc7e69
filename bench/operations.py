"""Figures for Tarantool's operations: how long `Queue.statistics()` takes with a thousand
and with a million tasks, and how fast a queue drains when its tasks are spread over many
micro-queue (utube) keys, against the same tasks without keys.

    python3 bench/operations.py [--tasks 4000] [--keys 200] [--big 1000000]

Runs on a private redis-server (`EmbeddedRedis`); prints a table and writes
bench/results/operations.json. No timing is asserted anywhere.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics as stats
import time
from pathlib import Path

from limpyd_blueque import BluequeDatabase, BluequeModel, Queue
from limpyd_blueque.connection.embedded import EmbeddedRedis

RESULTS = Path(__file__).parent / "results" / "operations.json"
LISTENERS = ("bench.example.com_1", "bench.example.com_2")


def bind(url: str) -> None:
    BluequeModel.use_database(BluequeDatabase(url))


def statistics_time(url: str, count: int, repeat: int = 50) -> float:
    """Median seconds of one `statistics()` call on a queue holding `count` tasks."""
    bind(url)
    queue = Queue.named(f"stats{count}")
    for start in range(0, count, 10_000):
        queue.enqueue_many(["x"] * min(10_000, count - start), chunk=1000)
    times = []
    for _ in range(repeat):
        began = time.perf_counter()
        queue.statistics()
        times.append(time.perf_counter() - began)
    return stats.median(times)


def drain(url: str, name: str, listener: str, done: multiprocessing.Queue) -> None:
    """Reserve, start and complete tasks of `name` until none is left (one worker slot)."""
    bind(url)
    count = 0
    while True:
        job, _ = Queue.reserve_from([name], listener, pid=1)
        if job is None:
            break
        job.complete("ok", attempt=job.task.attempt if job.task else None)
        count += 1
    done.put(count)


def drain_rate(url: str, tasks: int, keys: int) -> float:
    """Tasks per second two processes drain from a queue of `tasks` tasks spread over
    `keys` utube keys (0: no key)."""
    bind(url)
    name = f"drain{keys}"
    queue = Queue.named(name)
    options = [{"utube": f"k{n % keys}"} for n in range(tasks)] if keys else None
    queue.enqueue_many(["x"] * tasks, options=options)
    done: multiprocessing.Queue = multiprocessing.Queue()
    workers = [multiprocessing.Process(target=drain, args=(url, name, listener, done))
               for listener in LISTENERS]
    began = time.perf_counter()
    for worker in workers:
        worker.start()
    total = sum(done.get() for _ in workers)
    elapsed = time.perf_counter() - began
    for worker in workers:
        worker.join()
    assert total == tasks, (total, tasks)
    return tasks / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=4000)
    parser.add_argument("--keys", type=int, default=200)
    parser.add_argument("--big", type=int, default=1_000_000)
    parser.add_argument("--repetitions", type=int, default=3)
    args = parser.parse_args()
    with EmbeddedRedis(persistence=False) as server:
        figures = {
            "statistics_seconds": {str(n): statistics_time(server.url, n)
                                   for n in (1000, args.big)},
            "drain_per_second": {"plain": [], "utube": []},
        }
        for _ in range(args.repetitions):  # interleaved, plain then utube
            figures["drain_per_second"]["plain"].append(drain_rate(server.url, args.tasks, 0))
            figures["drain_per_second"]["utube"].append(
                drain_rate(server.url, args.tasks, args.keys))
    plain = stats.median(figures["drain_per_second"]["plain"])
    utube = stats.median(figures["drain_per_second"]["utube"])
    figures["utube_over_plain"] = utube / plain
    figures["setup"] = {"tasks": args.tasks, "keys": args.keys, "workers": len(LISTENERS),
                        "repetitions": args.repetitions}
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(figures, indent=2) + "\n")
    for count, seconds in figures["statistics_seconds"].items():
        print(f"statistics() with {int(count):>9,} tasks: {seconds * 1e6:8.0f} µs")
    print(f"drain, {args.tasks} tasks, 2 processes: plain {plain:,.0f}/s, over "
          f"{args.keys} utube keys {utube:,.0f}/s ({utube / plain:.2f}x)")


if __name__ == "__main__":
    main()
