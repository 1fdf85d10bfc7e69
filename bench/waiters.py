"""How soon a waiting producer learns its task's end (issue #31): 1,000 asyncio waiters
(`aio.Queue.wait`) on one client, each on its own task, woken as an in-process worker
finishes the tasks as fast as it goes; the delay of each from its task's end (the task's
`updated`, written by the finish step) to its waiter's return.

On a private Redis (`EmbeddedRedis`, no persistence), `--repetitions` runs (default 3),
the median of each figure kept. Writes `bench/results/waiters.json`; docs_page.py puts it
on the page.

    python3 bench/waiters.py            # ~20 seconds
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from limpyd_blueque import Queue, Worker, aio, use_redis  # noqa: E402
from limpyd_blueque.embedded import EmbeddedRedis  # noqa: E402

WAITERS = 1_000


async def waiting(url: str, client, ids: list[str], ready: threading.Event) -> list[float]:
    """The delays (seconds) of a waiter on each task of `ids`, from each task's end to its
    waiter's return; `ready` set once every waiter marked its task."""
    producer = aio.connect(url)
    queue = aio.Queue("waited", producer)
    woken: dict[str, float] = {}

    async def wait(task_id: str) -> None:
        await queue.wait(task_id, timeout=60)
        woken[task_id] = time.time()

    waiters = [asyncio.ensure_future(wait(task_id)) for task_id in ids]
    while not all(client.hget(f"blueque_task_{task_id}", "waited") for task_id in ids):
        await asyncio.sleep(0.05)  # every waiter subscribed and marked its task
    ready.set()
    await asyncio.wait_for(asyncio.gather(*waiters), timeout=60)
    await (getattr(producer, "aclose", None) or producer.close)()
    return sorted(woken[task_id] - float(client.hget(f"blueque_task_{task_id}", "updated"))
                  for task_id in ids)


def one_run(url: str, client) -> list[float]:
    """The waiters in a thread of their own, the worker in this one (it handles signals):
    the delays of `waiting`."""
    client.flushall()
    ids = [job.task_id for job in Queue.named("waited").enqueue_many(["x"] * WAITERS)]
    ready, delays = threading.Event(), []
    thread = threading.Thread(
        target=lambda: delays.extend(asyncio.run(waiting(url, client, ids, ready))),
        daemon=True)
    thread.start()
    assert ready.wait(60), "the waiters never all marked their tasks"
    Worker(queues=["waited"], callback=lambda job, queue: 0, fork=False, max_loops=WAITERS,
           logger_level=logging.ERROR, timeout=0.1).run()
    thread.join(60)
    assert len(delays) == WAITERS
    return delays


def measure(repetitions: int) -> dict:
    runs = []
    with EmbeddedRedis() as server:
        use_redis(server.url)
        client = Queue.client()
        for repetition in range(repetitions):
            delays = one_run(server.url, client)
            runs.append({"p50_ms": statistics.median(delays) * 1000,
                         "p99_ms": delays[int(len(delays) * 0.99) - 1] * 1000,
                         "max_ms": delays[-1] * 1000})
            print(f"repetition {repetition + 1}: {runs[-1]}", flush=True)
    return {"sizes": {"waiters": WAITERS, "repetitions": repetitions}, "runs": runs,
            "summary": {name: statistics.median(run[name] for run in runs)
                        for name in ("p50_ms", "p99_ms", "max_ms")}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--output", type=Path, default=HERE / "results" / "waiters.json")
    args = parser.parse_args()
    report = measure(1 if args.quick else args.repetitions)
    args.output.write_text(json.dumps(report, indent=1) + "\n")
    summary = report["summary"]
    print(f"{WAITERS:,} waiters woken {summary['p50_ms']:.1f} ms (median), "
          f"{summary['p99_ms']:.1f} ms (p99) after their task's end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
