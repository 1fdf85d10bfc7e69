"""What a payload's codec and encryption cost (issue #33): enqueue one call at a time, and
drain with an in-process worker whose task decodes its parameters (`job.payload()`), for
JSON, `bytes`, `msgpack` and encrypted JSON payloads of 100 B, 10 KB and 1 MB, in the same
run.

On a private Redis (`EmbeddedRedis`, no persistence), `--repetitions` runs (default 3),
interleaved (each kind and size once per repetition), the median of each figure kept.
Writes `bench/results/payloads.json`; docs_page.py puts it on the page.

    python3 bench/payloads.py            # about a minute
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from limpyd_blueque import Queue, Worker, use_redis  # noqa: E402
from limpyd_blueque.embedded import EmbeddedRedis  # noqa: E402

KINDS = ("json", "bytes", "msgpack", "encrypted json")
#: payload sizes (bytes), with the tasks timed at each (fewer for the large ones)
SIZES = {100: 2_000, 10_000: 1_000, 1_000_000: 40}
KEYS = {"bench": base64.b64encode(os.urandom(32)).decode()}


def payload(kind: str, size: int) -> object:
    """A payload of about `size` bytes once encoded."""
    if kind == "bytes":
        return os.urandom(size)
    if kind == "msgpack":
        return {"data": os.urandom(size - 10)}
    return {"data": "x" * (size - 12)}  # JSON: {"data":"..."}


def small_result(job: object, queue: object) -> object:
    """The task: decode its parameters, return a small result its codec encodes."""
    value = job.payload()  # type: ignore[attr-defined]
    return b"done" if isinstance(value, bytes) else "done"


def one(url: str, kind: str, size: int, count: int) -> dict:
    """Enqueue `count` tasks one call at a time, then drain them: tasks per second each."""
    use_redis(url, encryption_keys=KEYS if kind == "encrypted json" else None)
    Queue.client().flushall()
    codec = {"bytes": "bytes", "msgpack": "msgpack"}.get(kind)
    queue = Queue.named("payloads", codec=codec)
    value = payload(kind, size)
    began = time.perf_counter()
    for _ in range(count):
        queue.enqueue(value)
    enqueued = time.perf_counter() - began
    stored = len(Queue.client().hget(
        f"blueque_task_{Queue.client().lindex('blueque_pending_tasks_payloads', 0)}",
        "parameters").encode("utf-8", "surrogateescape"))
    began = time.perf_counter()
    Worker(queues=["payloads"], callback=small_result,
           fork=False, max_loops=count, timeout=0.05, logger_level=logging.ERROR).run()
    drained = time.perf_counter() - began
    done = Queue.named("payloads").counts()["complete"]
    assert done == count, f"{kind} {size}: {done} of {count} complete"
    return {"enqueue_per_s": count / enqueued, "drain_per_s": count / drained,
            "stored_bytes": stored}


def measure(repetitions: int, quick: bool) -> dict:
    sizes = {size: max(count // 10, 5) for size, count in SIZES.items()} if quick else SIZES
    runs: dict[str, list[dict]] = {}
    with EmbeddedRedis() as server:
        for _ in range(repetitions):
            for size, count in sizes.items():
                for kind in KINDS:
                    runs.setdefault(f"{kind}|{size}", []).append(
                        one(server.url, kind, size, count))
    summary = {}
    for key, found in runs.items():
        kind, size = key.split("|")
        summary.setdefault(kind, {})[size] = {
            name: statistics.median(run[name] for run in found) for name in found[0]}
    return {"sizes": {"repetitions": repetitions, "tasks": sizes}, "summary": summary}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="a tenth of the tasks, once")
    args = parser.parse_args()
    report = measure(1 if args.quick else args.repetitions, args.quick)
    out = HERE / "results" / "payloads.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    for kind, by_size in report["summary"].items():
        for size, figures in by_size.items():
            print(f"{kind:>15} {int(size):>9,} B: enqueue {figures['enqueue_per_s']:8.0f}/s, "
                  f"drain {figures['drain_per_s']:8.0f}/s, stored {figures['stored_bytes']:,} B")


if __name__ == "__main__":
    main()
