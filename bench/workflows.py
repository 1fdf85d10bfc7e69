"""What workflows cost (issue #31): submitting a 10,000-node fan-out with its fan-in, and
finishing a node against the tasks that wait for it and the size of its workflow.

On a private Redis (`EmbeddedRedis`, no persistence), in this process, each measure
repeated (`--repetitions`, default 3) and the medians kept:

* the submission: `Workflow.add` of 10,000 nodes and their fan-in, then `submit()`, timed
  from the first `add` to the end of `submit`;
* a finish: a worker's reserve and complete of a node (`Queue.reserve_from`, then
  `complete`, which tells the tasks waiting for it), timed per node, with the commands
  the server ran for it (`INFO commandstats`, the scripts' own included): for a plain
  task; for a node with 1 waiting task in a workflow of 200 nodes and of 10,000; and for
  a node with 10 and 100 waiting tasks.

Writes `bench/results/workflows.json`; docs_page.py puts it on the page.

    python3 bench/workflows.py            # ~1 minute
    python3 bench/workflows.py --quick    # one repetition
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from limpyd_blueque import Queue, Workflow, use_redis  # noqa: E402
from limpyd_blueque.embedded import EmbeddedRedis  # noqa: E402

LISTENER = "bench.workflows_1"
FAN_OUT = 10_000
#: nodes finished per measure (fewer when each has 100 waiting tasks)
FINISHED = 100
#: (label, waiting tasks per finished node, workflow size; 0: no workflow, no `after`)
CASES = (("plain task", 0, 0), ("1 waiting, workflow of 200", 1, 200),
         ("1 waiting, workflow of 10,000", 1, 10_000), ("10 waiting", 10, 0),
         ("100 waiting", 100, 0))


def commands(client) -> int:
    """Commands the server ran so far, the `INFO` calls left out."""
    stats = client.info("commandstats")
    return sum(entry["calls"] for name, entry in stats.items() if name != "cmdstat_info")


def submission(client) -> float:
    """Seconds to add and submit a fan-out of `FAN_OUT` nodes and its fan-in."""
    client.flushall()
    began = time.perf_counter()
    wf = Workflow("fan")
    parts = [wf.add("fan-out", n) for n in range(FAN_OUT)]
    wf.add("fan-in", "sum", after=parts)
    wf.submit()
    took = time.perf_counter() - began
    assert client.llen("blueque_pending_tasks_fan-out") == FAN_OUT
    return took


def finish_cost(client, waiting: int, size: int, finished: int) -> tuple[float, float]:
    """(microseconds, commands) of one reserve and complete of a node of queue `wa` with
    `waiting` tasks waiting for it (in queue `wb`), its workflow padded to `size` nodes
    with nodes that wait for a node never finished."""
    client.flushall()
    if waiting == 0:
        Queue.named("wa").enqueue_many([{}] * finished)
    else:
        wf = Workflow()
        parents = [wf.add("wa", {}) for _ in range(finished)]
        for parent in parents:
            for _ in range(waiting):
                wf.add("wb", {}, after=[parent])
        if size:
            blocker = wf.add("wpad", {})
            for _ in range(size - finished * (waiting + 1) - 1):
                wf.add("wpad", {}, after=[blocker])
        wf.submit()
    times, before = [], commands(client)
    for _ in range(finished):
        began = time.perf_counter()
        job, _ = Queue.reserve_from(["wa"], LISTENER)
        job.complete("0", listener_id=LISTENER)
        times.append(time.perf_counter() - began)
    spent = commands(client) - before
    if waiting:
        assert client.llen("blueque_pending_tasks_wb") == finished * waiting
    return statistics.median(times) * 1e6, spent / finished


def measure(repetitions: int) -> dict:
    submit: list[float] = []
    finish: dict[str, dict[str, list[float]]] = {label: {"us": [], "commands": []}
                                                 for label, _, _ in CASES}
    with EmbeddedRedis() as server:
        use_redis(server.url)
        client = Queue.client()
        for repetition in range(repetitions):
            submit.append(submission(client))
            cases = CASES if repetition % 2 == 0 else tuple(reversed(CASES))
            for label, waiting, size in cases:
                count = FINISHED if waiting < 100 else FINISHED // 5
                micro, spent = finish_cost(client, waiting, size, count)
                finish[label]["us"].append(micro)
                finish[label]["commands"].append(spent)
            print(f"repetition {repetition + 1}: submit {submit[-1]:.2f} s", flush=True)
    return {"sizes": {"fan_out": FAN_OUT, "finished": FINISHED, "repetitions": repetitions},
            "submit_s": submit,
            "finish": finish,
            "summary": {"submit_s": statistics.median(submit),
                        "finish": {label: {"us": statistics.median(found["us"]),
                                           "commands": statistics.median(found["commands"])}
                                   for label, found in finish.items()}}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--output", type=Path, default=HERE / "results" / "workflows.json")
    args = parser.parse_args()
    report = measure(1 if args.quick else args.repetitions)
    args.output.write_text(json.dumps(report, indent=1) + "\n")
    summary = report["summary"]
    print(f"submit {FAN_OUT:,} nodes and their fan-in: {summary['submit_s']:.2f} s")
    for label, found in summary["finish"].items():
        print(f"finish, {label}: {found['us']:.0f} µs, {found['commands']:.1f} commands")
    return 0


if __name__ == "__main__":
    sys.exit(main())
