"""What groups cost (issue #30): the reserve step with 10,000 groups waiting against 10,
and an in-process drain of tasks that all have a group, under a default limit they never
reach, against one of tasks without.

On a private Redis (`EmbeddedRedis`, no persistence), in this process: each measure is
repeated (`--repetitions`, default 3), the two sides of each comparison interleaved, and
the medians kept. The reserve is timed as the benchmark's step measure times it
(`Queue.reserve_from` with a tally, as a worker reserves), each task completed after its
reserve, untimed. Writes `bench/results/groups.json`; docs_page.py puts it on the page.

    python3 bench/groups.py             # ~2 minutes
    python3 bench/groups.py --quick     # smaller, one repetition
"""

from __future__ import annotations

import argparse
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
from limpyd_blueque.protocol.statistics import Tally  # noqa: E402

LISTENER = "bench.groups_1"
#: tasks waiting when the reserve is timed, spread over the groups
WAITING = 20_000
#: reserves timed per measure
RESERVES = 1_000
#: groups of the grouped drain
DRAIN_GROUPS = 100


def reserve_cost(client, groups: int, waiting: int, reserves: int) -> float:
    """Median microseconds of one reserve with `groups` groups waiting."""
    client.flushall()
    queue = Queue.named("g")
    per_group = max(waiting // groups, 1)
    for start in range(0, groups, 1000):
        names = [f"customer:{n}" for n in range(start, min(start + 1000, groups))]
        for _ in range(per_group):
            queue.enqueue_many([{}] * len(names), options=[{"group": name} for name in names])
    tally = Tally(interval=float("inf"))
    times = []
    for _ in range(reserves):
        began = time.perf_counter()
        job, _ = Queue.reserve_from(["g"], LISTENER, pid=os.getpid(), tally=tally)
        times.append(time.perf_counter() - began)
        job.complete("0", listener_id=LISTENER, tally=tally)
    return statistics.median(times) * 1e6


def drain_rate(client, tasks: int, grouped: bool) -> float:
    """Tasks per second of an in-process worker draining `tasks` no-op tasks, from the
    first task's start to the last's."""
    client.flushall()
    queue = Queue.named("d")
    options = ([{"group": f"customer:{n % DRAIN_GROUPS}"} for n in range(tasks)]
               if grouped else None)
    queue.enqueue_many([{}] * tasks, options=options)
    if grouped:  # every group under a limit it never reaches: the limit is read and kept
        queue.set_limit("*", max_running=tasks)
    marks: list[float] = []  # when each task ran: the worker's start is not timed

    def task(job, queue):
        marks.append(time.perf_counter())
        return 0

    Worker(queues=["d"], callback=task, fork=False, max_loops=tasks,
           logger_level=logging.ERROR).run()
    assert queue.counts()["complete"] == tasks
    return (tasks - 1) / (marks[-1] - marks[0])


def measure(quick: bool, repetitions: int) -> dict:
    waiting, reserves, tasks = (2_000, 200, 500) if quick else (WAITING, RESERVES, 3_000)
    reserve = {10: [], 10_000: []}
    drain = {"without groups": [], "with groups": []}
    with EmbeddedRedis() as server:
        use_redis(server.url)
        client = Queue.client()
        for repetition in range(repetitions):
            order = [10, 10_000] if repetition % 2 == 0 else [10_000, 10]
            for groups in order:
                reserve[groups].append(reserve_cost(client, groups, waiting, reserves))
            sides = [False, True] if repetition % 2 == 0 else [True, False]
            for grouped in sides:
                drain["with groups" if grouped else "without groups"].append(
                    drain_rate(client, tasks, grouped))
            print(f"repetition {repetition + 1}: reserve {reserve}, drain {drain}", flush=True)
    reserve_10, reserve_10k = (statistics.median(reserve[10]),
                               statistics.median(reserve[10_000]))
    drain_plain, drain_grouped = (statistics.median(drain["without groups"]),
                                  statistics.median(drain["with groups"]))
    return {"sizes": {"waiting": waiting, "reserves": reserves, "drain_tasks": tasks,
                      "drain_groups": DRAIN_GROUPS, "repetitions": repetitions},
            "reserve_us": {"10": reserve[10], "10000": reserve[10_000]},
            "drain_per_s": drain,
            "summary": {"reserve_10_us": reserve_10, "reserve_10000_us": reserve_10k,
                        "reserve_ratio": reserve_10k / reserve_10,
                        "drain_without_groups": drain_plain, "drain_with_groups": drain_grouped,
                        "drain_ratio": drain_grouped / drain_plain}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--output", type=Path, default=HERE / "results" / "groups.json")
    args = parser.parse_args()
    report = measure(args.quick, 1 if args.quick else args.repetitions)
    args.output.write_text(json.dumps(report, indent=1) + "\n")
    summary = report["summary"]
    print(f"reserve: {summary['reserve_10_us']:.0f} µs with 10 groups waiting, "
          f"{summary['reserve_10000_us']:.0f} µs with 10,000 ({summary['reserve_ratio']:.2f} x); "
          f"in-process drain {summary['drain_with_groups']:,.0f} tasks/s with groups against "
          f"{summary['drain_without_groups']:,.0f} without ({summary['drain_ratio']:.2f} x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
