"""Write docs/benchmarks.rst from the last run (bench/results/latest.json and latest.md).

The page is generated, so that its tables, its targets and the run cannot disagree:
`python3 bench/run.py && python3 bench/docs_page.py`.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from pathlib import Path
from typing import Callable

HERE = Path(__file__).parent
RESULTS = HERE / "results"
PAGE = HERE.parent / "docs" / "benchmarks.rst"

LB_IN, LB_FORK = "limpyd_blueque/worker-inprocess", "limpyd_blueque/worker-fork"
LB_FORK2 = "limpyd_blueque/worker-fork2"


NOT_MEASURED = "not measured in this run"


def rst_table(markdown: str) -> str:
    """A markdown pipe table as an RST simple table."""
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in markdown.strip().splitlines() if line.strip() and not line.startswith("|---")]
    return rst_rows(rows[0], rows[1:])


def markdown_table(markdown: str, header: str) -> str | None:
    """The pipe table of `latest.md` whose header line starts with `header` (None when
    the run did not write it)."""
    lines = markdown.splitlines()
    first = next((i for i, line in enumerate(lines) if line.startswith(header)), None)
    if first is None:
        return None
    end = first
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    return "\n".join(lines[first:end])


def page_table(markdown: str, header: str) -> str:
    """`markdown_table` as RST, or a sentence saying the run did not measure it."""
    found = markdown_table(markdown, header)
    return rst_table(found) if found else NOT_MEASURED[0].upper() + NOT_MEASURED[1:] + "."


def fmt(value: float, digits: int = 0) -> str:
    return f"{value:,.{digits}f}"


def rst_rows(headers: list[str], body: list[list[str]]) -> str:
    """An RST simple table."""
    widths = [max(len(row[i]) for row in [headers, *body]) for i in range(len(headers))]
    border = " ".join("=" * width for width in widths)
    lines = [border, " ".join(c.ljust(w) for c, w in zip(headers, widths)).rstrip(), border]
    lines += [" ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in body]
    return "\n".join(lines + [border])


def many_tasks(many: dict) -> str:
    """The section of bench/concurrency.py: one worker running N sleeping tasks at once,
    limpyd-blueque and its peers, per level."""
    mib = 2**20
    series = [("limpyd-blueque", many["levels"])] + list((many.get("peers") or {}).items())
    body = []
    for name, levels in series:
        for level in levels:
            if "error" in level:
                body.append([name, str(level["n"]), "failed: " + level["error"][:60]]
                            + [""] * 6)
                continue
            run, work = level["running"], level["running"]["worker"]
            body.append([
                name, str(level["n"]), f"{run['start']['all_running_s']:.2f}",
                f"{run['tasks']['pss_median'] / mib:.1f} / {run['tasks']['uss_median'] / mib:.1f}",
                f"{level['pss_ratio']:.2f}",
                f"{work['rss'] / mib:.0f} / {work['fds']} / {work['threads']}",
                f"{run['redis']['per_s']:.0f}", f"{run['redis']['per_s_per_1000_tasks']:,.0f}",
                f"{level['pickup']['p50_ms']:.2f} / {level['pickup']['p99_ms']:.2f}"])
    table = rst_rows(["queue", "N", "start all (s)", "task PSS / USS (MiB)",
                      "PSS / bare fork", "worker RSS MiB / fds / threads",
                      "Redis cmds/s", "per 1,000 tasks", "pickup p50 / p99 (ms)"], body)
    meta = many["meta"]
    top = max((lv for lv in many["levels"] if "error" not in lv), key=lambda lv: lv["n"])
    busiest = list(top["running"]["redis"]["per_command_per_s"].items())[:8]
    hows = "; ".join(f"{name}: {levels[0].get('how', '')}"
                     for name, levels in (many.get("peers") or {}).items() if levels)
    return f"""One worker runs N tasks that sleep, each in a process of its own
(``blueque-worker --fork --concurrency N``, every other setting at its default: leases of
{meta['worker_settings']['ttr']} s renewed every third of that, a beat every
{meta['worker_settings']['liveness_interval']:g} s). Measured by ``bench/concurrency.py``,
called by ``bench/run.py``: the time from one ``enqueue_many`` of N tasks to N task bodies
running; PSS and private memory (USS) of each task process from
``/proc/<pid>/smaps_rollup``, against a bare fork of a process that imported the same
modules and only waits; the worker's own memory, descriptors and threads; every command
Redis ran over a {meta['window']:g}-second window while the N tasks run (those a script
runs included; nothing else talks to Redis); and pickup latency of a no-op task while the
N run. Peers in the same run, same sleeping task: {hows or 'none measured'}.

{table}

Where the commands go at N={top['n']} (per second, every command a script runs included):
{", ".join(f"``{name}`` {rate:.1f}" for name, rate in busiest)}. A beat costs the same for one
running task as for hundreds: leases still at the deadline their worker wrote are found by
one read per queue and deadline (a task reserved since the last renewal is read alone,
once) and extended by one write per queue, cancels come from one set per queue, and
progress is read only for tasks with a stall timeout."""


# -- the targets of issue #28 -------------------------------------------------------------
#: a target: its name, what the run measured (or NOT_MEASURED), and whether it is met
#: (None: not measured)
Target = tuple[str, str, "bool | None"]
FLOOR, HUEY = "floor/inprocess", "huey/thread1"
BLUEQUE_LISTEN, BLUEQUE_FORK = "blueque/listen", "blueque/fork"
LB_ROWS = (LB_IN, LB_FORK, LB_FORK2)
#: the rows whose worker side the Redis work targets read: row, name on the page, key of
#: its values (`targets`)
WORKER_SIDE = ((LB_IN, "in-process", "in"), (LB_FORK, "fork per task", "fork"))
#: the level of bench/concurrency.py the "many running" targets read
RUNNING = 500
SCALING_SMALL, SCALING_LARGE = 1_000, 1_000_000


class Figures:
    """The figures of one run that the targets read: None for any this run did not
    measure (results of an older harness lack the newer figures)."""

    def __init__(self, data: dict, many: dict | None) -> None:
        """`data`: results/latest.json; `many`: results/concurrency.json (None: absent)."""
        self.data = data
        self.many = many

    def median(self, row: str, figure: str) -> float | None:
        """The median over repetitions of a row's figure."""
        stats = self.data["summary"].get(row, {}).get(figure)
        return stats["median"] if stats else None

    def pooled(self, rows: tuple[str, ...], figure: str) -> float | None:
        """The median of a figure over the repetitions of several rows (a figure that
        does not depend on the worker's mode, measured once per row)."""
        per_rep = self.data.get("per_repetition", {})
        values = [value for row in rows for value in per_rep.get(row, {}).get(figure, {}).values()
                  if value is not None]
        return statistics.median(values) if values else None

    def ratio(self, rows: tuple[str, ...] | str, other: str, figure: str) -> float | None:
        """`figure` of `rows` over that of `other` in the same repetition; the median of
        those ratios over repetitions (and rows, when several)."""
        per_rep = self.data.get("per_repetition", {})
        theirs = per_rep.get(other, {}).get(figure, {})
        ratios = [value / theirs[rep]
                  for row in ((rows,) if isinstance(rows, str) else rows)
                  for rep, value in per_rep.get(row, {}).get(figure, {}).items()
                  if value is not None and theirs.get(rep)]
        return statistics.median(ratios) if ratios else None

    def level(self, n: int) -> dict | None:
        """The level of bench/concurrency.py with `n` tasks running (None: not run)."""
        levels = (self.many or {}).get("levels", [])
        return next((level for level in levels if level["n"] == n and "error" not in level),
                    None)

    def scaling(self) -> dict | None:
        """limpyd-blueque's scaling entries by size (None: no scaling test in this run)."""
        result = self.data.get("scaling", {}).get("limpyd_blueque", {})
        if not result.get("ok"):
            return None
        return {entry["pending"]: entry for entry in result["raw"]["scaling"]}


def target(name: str, needed: list, measured: Callable[[], str],
           met: Callable[[], bool]) -> Target:
    """A target's row: NOT_MEASURED when any of the `needed` values is missing."""
    if any(value is None for value in needed):
        return name, NOT_MEASURED, None
    return name, measured(), met()


def redis_work_targets(f: Figures, v: dict) -> list[Target]:
    """1. Redis work per plain task, worker side: commands (each limpyd-blueque worker
    row of `WORKER_SIDE`), and server time against the floor's (`usec_worker`: the usec of
    INFO commandstats, scripts counted once). Server time compares the in-process worker,
    as the floor's is: a server the worker leaves idle longer between commands (a worker
    that forks per task) runs each command slower."""
    for row, _, key in WORKER_SIDE:
        v[f"cmds_{key}"] = f.median(row, "cmds_worker")
    v.update(cmds_floor=f.median(FLOOR, "cmds_worker"), usec_floor=f.median(FLOOR, "usec_worker"),
             usec_in=f.median(LB_IN, "usec_worker"), usec_fork=f.median(LB_FORK, "usec_worker"),
             usec_ratio=f.ratio(LB_IN, FLOOR, "usec_worker"))

    def commands() -> str:
        """The measured cell of the commands target."""
        return "; ".join(f"{label} {v[f'cmds_{key}']:.1f}" for _, label, key in WORKER_SIDE) + (
            f" (floor {v['cmds_floor']:.1f})" if v["cmds_floor"] is not None else "")

    def server_time() -> str:
        """The measured cell of the server time target."""
        return (f"in-process {v['usec_in']:.1f} µs: {v['usec_ratio']:.2f} x the floor's "
                f"{v['usec_floor']:.1f} µs" + (f" (fork per task: {v['usec_fork']:.1f} µs)"
                                              if v["usec_fork"] is not None else ""))

    return [
        target(COMMANDS_TARGET, [v[f"cmds_{key}"] for _, _, key in WORKER_SIDE], commands,
               lambda: all(v[f"cmds_{key}"] <= 20 for _, _, key in WORKER_SIDE)),
        target(SERVER_TIME_TARGET, [v["usec_in"], v["usec_floor"], v["usec_ratio"]],
               server_time, lambda: v["usec_ratio"] <= 1.5),
    ]


def speed_targets(f: Figures, v: dict) -> list[Target]:
    """2. In-process drain against the floor and Huey; pickup latency in-process, forked,
    and with 500 tasks running."""
    v.update(drain_in=f.median(LB_IN, "drain_per_s"),
             drain_floor_ratio=f.ratio(LB_IN, FLOOR, "drain_per_s"),
             drain_huey_ratio=f.ratio(LB_IN, HUEY, "drain_per_s"),
             p50_in=f.median(LB_IN, "latency_p50_ms"), p99_in=f.median(LB_IN, "latency_p99_ms"),
             p50_fork=f.median(LB_FORK, "latency_p50_ms"),
             p99_fork=f.median(LB_FORK, "latency_p99_ms"))
    level = f.level(RUNNING)
    v.update(pickup_p50_running=level["pickup"]["p50_ms"] if level else None,
             pickup_p99_running=level["pickup"]["p99_ms"] if level else None)
    return [
        target(DRAIN_TARGET, [v["drain_in"], v["drain_floor_ratio"], v["drain_huey_ratio"]],
               lambda: f"{fmt(v['drain_in'])}/s: {v['drain_floor_ratio']:.2f} x the floor, "
                       f"{v['drain_huey_ratio']:.2f} x Huey",
               lambda: v["drain_floor_ratio"] >= 0.9 and v["drain_huey_ratio"] >= 1.1),
        target(PICKUP_TARGET, [v["p50_in"], v["p99_in"]],
               lambda: f"p50 {v['p50_in']:.2f} ms, p99 {v['p99_in']:.2f} ms",
               lambda: v["p50_in"] <= 1.5 and v["p99_in"] < 5),
        target(PICKUP_FORK_TARGET, [v["p50_fork"], v["p99_fork"]],
               lambda: f"p50 {v['p50_fork']:.2f} ms, p99 {v['p99_fork']:.2f} ms",
               lambda: v["p50_fork"] <= 2.5 and v["p99_fork"] < 5),
        target(PICKUP_RUNNING_TARGET, [v["pickup_p99_running"]],
               lambda: f"p99 {v['pickup_p99_running']:.2f} ms (p50 "
                       f"{v['pickup_p50_running']:.2f} ms)",
               lambda: v["pickup_p99_running"] < 10),
    ]


def fork_targets(f: Figures, v: dict) -> list[Target]:
    """3. Fork per task: CPU per forked task against a bare fork of the same image, the
    forked drain against blueque's ForkingRunner, task process PSS at 500 running."""
    v.update({key: f.median(LB_FORK, key) for key in (
        "cpu_worker_ms", "cpu_task_process_ms", "cpu_forked_task_ms", "cpu_bare_parent_ms",
        "cpu_bare_child_ms", "cpu_bare_fork_ms", "cpu_vs_bare_fork")})
    v.update(drain_fork=f.median(LB_FORK, "drain_per_s"),
             drain_blueque_fork=f.median(BLUEQUE_FORK, "drain_per_s"),
             drain_fork_ratio=f.ratio(LB_FORK, BLUEQUE_FORK, "drain_per_s"))
    level = f.level(RUNNING)
    v.update(pss_ratio=level["pss_ratio"] if level else None,
             pss_task=level["running"]["tasks"]["pss_median"] / 2**20 if level else None,
             pss_bare=level["bare_fork"]["pss_median"] / 2**20 if level else None)
    return [
        target(CPU_TARGET, [v["cpu_forked_task_ms"], v["cpu_bare_fork_ms"]],
               lambda: f"{v['cpu_forked_task_ms']:.2f} ms (worker {v['cpu_worker_ms']:.2f} + "
                       f"task process {v['cpu_task_process_ms']:.2f}) against "
                       f"{v['cpu_bare_fork_ms']:.2f} ms: {v['cpu_vs_bare_fork']:.2f} x",
               lambda: v["cpu_vs_bare_fork"] <= 1.5),
        target(FORK_TARGET, [v["drain_fork"], v["drain_fork_ratio"]],
               lambda: f"{fmt(v['drain_fork'])}/s: {v['drain_fork_ratio']:.2f} x "
                       f"({fmt(v['drain_blueque_fork'])}/s)",
               lambda: v["drain_fork_ratio"] >= 1.8),
        target(PSS_TARGET, [v["pss_ratio"]],
               lambda: f"{v['pss_ratio']:.2f} x ({v['pss_task']:.1f} against "
                       f"{v['pss_bare']:.1f} MiB)",
               lambda: v["pss_ratio"] <= 2.0),
    ]


def producer_targets(f: Figures, v: dict) -> list[Target]:
    """4. Producers: one call at a time against the floor, bulk enqueue (every
    limpyd-blueque row enqueues the same way: their figures and ratios are pooled)."""
    v.update(enqueue=f.pooled(LB_ROWS, "enqueue_per_s"),
             enqueue_floor=f.median(FLOOR, "enqueue_per_s"),
             enqueue_floor_ratio=f.ratio(LB_ROWS, FLOOR, "enqueue_per_s"),
             enqueue_rows=", ".join(fmt(value) for value in (
                 f.median(row, "enqueue_per_s") for row in LB_ROWS) if value is not None),
             bulk=f.pooled(LB_ROWS, "enqueue_bulk_per_s"))
    return [
        target(ENQUEUE_TARGET, [v["enqueue"], v["enqueue_floor_ratio"]],
               lambda: f"{fmt(v['enqueue'])}/s: {v['enqueue_floor_ratio']:.2f} x "
                       f"({fmt(v['enqueue_floor'])}/s)",
               lambda: v["enqueue_floor_ratio"] >= 0.95),
        target(BULK_TARGET, [v["bulk"]], lambda: f"{fmt(v['bulk'])}/s",
               lambda: v["bulk"] > 30_000),
    ]


#: what one task's entry in its queue's retention sorted set costs (`MEMORY USAGE` of the
#: set over 2,000 finished tasks, redis-server 6.2: a skiplist past 128 members)
RETENTION_ENTRY_BYTES = 119


def memory_targets(f: Figures, v: dict) -> list[Target]:
    """5. Redis memory per finished task kept against blueque's (`used_memory`; the
    limpyd-blueque rows pooled, against blueque's listen loop), and the cost of each step at
    1,000,000 pending against 1,000 (the scaling test)."""
    v.update(mem_finished=f.pooled(LB_ROWS, "mem_finished_bytes"),
             mem_finished_blueque=f.median(BLUEQUE_LISTEN, "mem_finished_bytes"),
             mem_finished_ratio=f.ratio(LB_ROWS, BLUEQUE_LISTEN, "mem_finished_bytes"))
    if v["mem_finished"] and v["mem_finished_blueque"]:
        forever = v["mem_finished"] - RETENTION_ENTRY_BYTES
        v.update(mem_finished_forever=forever,
                 mem_finished_forever_ratio=forever / v["mem_finished_blueque"])
    sizes = f.scaling() or {}
    small, large = sizes.get(SCALING_SMALL), sizes.get(SCALING_LARGE)
    growth = ({op: large[f"{op}_us"] / small[f"{op}_us"] - 1
               for op in ("enqueue", "reserve", "complete")} if small and large else None)
    v["growth_text"] = (", ".join(f"{op} {value:+.0%}" for op, value in growth.items())
                        if growth else None)
    return [
        target(MEMORY_TARGET, [v["mem_finished"], v["mem_finished_ratio"]],
               lambda: f"{fmt(v['mem_finished'])} B: {v['mem_finished_ratio']:.2f} x "
                       f"({fmt(v['mem_finished_blueque'])} B)",
               lambda: v["mem_finished_ratio"] <= 1.2),
        target(SCALING_TARGET, [growth],
               lambda: v["growth_text"],
               lambda: all(value <= 0.10 for value in growth.values())),
    ]


def targets(data: dict, many: dict | None) -> tuple[list[Target], dict]:
    """Every target of issue #28, in its order, and the values measured (for the
    analyses of misses, `MISSES`)."""
    figures, values = Figures(data, many), {}
    rows = [row for group in (redis_work_targets, speed_targets, fork_targets, producer_targets,
                              memory_targets) for row in group(figures, values)]
    return rows, values


COMMANDS_TARGET = "worker side: at most 20 Redis commands per plain task (scripts' included)"
SERVER_TIME_TARGET = "worker side: Redis server time per plain task at most 1.5 x the floor's"
DRAIN_TARGET = "drain in-process at least 0.9 x the floor and 1.1 x Huey"
PICKUP_TARGET = "pickup latency in-process: p50 <= 1.5 ms, p99 < 5 ms"
PICKUP_FORK_TARGET = "pickup latency forking: p50 <= 2.5 ms, p99 < 5 ms"
PICKUP_RUNNING_TARGET = f"pickup p99 under 10 ms while {RUNNING} tasks run"
CPU_TARGET = "CPU per forked task at most 1.5 x a bare fork of the same image"
FORK_TARGET = "drain forking at least 1.8 x blueque's ForkingRunner"
PSS_TARGET = f"task process PSS at most 2.0 x a bare fork, {RUNNING} running"
ENQUEUE_TARGET = "enqueue one call at a time at least 0.95 x the floor's"
BULK_TARGET = "bulk enqueue above 30,000 tasks/s"
MEMORY_TARGET = "Redis memory per finished task kept at most 1.2 x blueque's"
SCALING_TARGET = "enqueue, reserve, complete at 1,000,000 pending within 10 % of 1,000"

#: the analysis of a missed target, by target name: RST text formatted with the values
#: `targets` returns (e.g. "{drain_fork_ratio:.2f}"). A missed target without one gets a
#: sentence saying that no analysis is written yet (and `main` warns). Write one only
#: from what a run of the code it describes measured.
MISSES: dict[str, str] = {
    ENQUEUE_TARGET: (
        "**Enqueue one call at a time.** {enqueue:,.0f}/s: {enqueue_floor_ratio:.2f} x the "
        "floor's {enqueue_floor:,.0f}/s, pooled over the three limpyd-blueque rows (the same "
        "producer code: ``Queue.enqueue``, one ``EVALSHA``). Row by row, the medians are "
        "{enqueue_rows}/s in this run, the same code's spread as large as the gap (the run "
        "of 493aa1f measured 0.99 x). In Redis the step is the floor's (one script, the same "
        "writes) plus an ``EXISTS`` (the id is new), an ``HGET`` (the queue's ttl) and an "
        "``HINCRBY`` (its counter); what is left is the producer's Python (checking the "
        "parameters and options, building the job)."),
    COMMANDS_TARGET: (
        "**Worker side: at most 20 Redis commands per plain task.** Measured "
        "{cmds_in:.1f} (in-process) against the floor's {cmds_floor:.1f}. Where they go (the "
        "per-step table above): the reserve step runs ``TIME`` (the lease set and the started "
        "set are checked by their own writes; a reserve that only reserves, as a forking "
        "worker's, checks the started set by a ``TYPE``, and the queues that gave no task are "
        "checked by ``TYPE`` so that a broken queue is reported each time: the stateful hostile "
        "test requires it), ``ZRANGE`` of the prioritized set "
        "(priorities), ``RPOPLPUSH``, one ``HGETALL`` of the task, one ``HMGET`` of the "
        "queue's terms and retentions, ``ZADD`` of the lease, ``SADD``, ``HSET``; the "
        "complete step one ``HMGET``, ``LREM``, ``SREM``, ``LPUSH``, ``ZREM`` of the lease, "
        "``HSET`` and ``ZADD`` of the retention entry. The worker counts both steps in its "
        "memory and writes the counters once a second (``statistics.Tally``)."),
    SERVER_TIME_TARGET: (
        "**Worker side: Redis server time at most 1.5 x the floor's.** Measured "
        "{usec_in:.0f} µs against the floor's {usec_floor:.0f} µs per task "
        "({usec_ratio:.1f} x). A profile of the scripts on this machine (``INFO "
        "commandstats`` around variants of each script, before the counters left the steps): "
        "a command inside a script costs 0.3 to 1 µs; an empty reserve (no task waiting) "
        "already cost about 28 µs, of which about 7 µs is the script's fixed cost (its 14 "
        "keys and 13 arguments made Lua strings, the shared functions it defines at each "
        "call), and the rest Lua work that allocates: one table per queue with its fourteen "
        "keys, the reply's nested tables, the task's hash read into a table and checked field "
        "by field, strings built for members and deadlines. Since then the eight counters, "
        "the line's ``LLEN`` and the retention's ``HGET`` left the steps (29 commands to 19), "
        "which took about a sixth of the time off; the fixed cost and the allocations remain. "
        "Redis 6.2 runs a script's whole text at every call; Redis 7's functions would define "
        "the shared code once. Counted in instructions (the section above, deterministic "
        "where microseconds are not), both steps cost 5.7 x the floor's: the commands "
        "themselves are 3.4 x the floor's (leases, retention, the task read whole, fencing), "
        "and each part around them is several times the floor's (the replies read back into "
        "Lua, the reserve's reply with the task's hash, the closures of the shared "
        "functions, the Lua work that checks every field, the collector that follows). "
        "1.5 x the floor (about 160,000 instructions for both steps) is less than the commands "
        "and their calls alone cost here (162,000): the target cannot be met by trimming; it "
        "would take steps that keep no lease, no retention index and no checks, which the "
        "other issues require. What stands between, in that order: fewer keys and arguments "
        "per call, a reply that carries only the fields a worker reads, and shared functions "
        "defined when first called (as the groups' are)."),
    DRAIN_TARGET: (
        "**Drain in-process.** {drain_in:,.0f} tasks/s: {drain_floor_ratio:.2f} x the floor, "
        "{drain_huey_ratio:.2f} x Huey. Both steps are one round trip each, as the floor's, "
        "so the difference is the server time above ({usec_in:.0f} against {usec_floor:.0f} µs "
        "per task) and the "
        "worker's own Python per task. A cProfile of an in-process drain of 3,000 no-op "
        "tasks on a private Redis (times under the profiler): per task, about 0.33 ms waiting "
        "for Redis's two replies (the server time and the loopback round trips), about "
        "0.35 ms in redis-py and the step wrappers around the two ``EVALSHA`` (the reserve "
        "alone sends 14 keys and 13 arguments, each made a string and packed: 30 "
        "conversions and about 70 packed parts per task), and about 0.3 ms in the worker's "
        "loop, hooks and outcome recorder. What stands between: the server time first, then "
        "fewer keys and arguments per step (both sides of the wire), then the loop. "
        "redis-py's own share was measured on its own: a connection kept by the worker's "
        "loop, sending each step without the pool's checkout, lock and bookkeeping (about "
        "25 µs a call in a loop of bare ``EVALSHA``), drained 5,000 tasks in 1.01 x the "
        "current code's whole-process time over 8 interleaved pairs (0.91-1.06; rates "
        "2,062 against 2,076 tasks/s): within this machine's noise, so it was not kept. "
        "The floor's rate needs the server time of its one-write steps; 0.9 x of it, with the server time above, would leave a worker "
        "less Python per task than the floor spends around its two bare ``EVALSHA``: "
        "it cannot be met with steps that keep a lease, a retention entry and the hostile "
        "checks."),
    PICKUP_TARGET: (
        "**Pickup latency in-process.** p50 {p50_in:.2f} ms, p99 {p99_in:.2f} ms: the p99 "
        "is met, the p50 over (it moves with the machine's load between runs: see the floor's "
        "server time above, 25.8 µs in the run at 9fc6817). A task enqueued to an idle "
        "worker costs the wake-up (the ``PUBLISH`` read by the worker's subscription), a "
        "turn of the loop, then the reserve step's server time above: the same reductions "
        "apply. Timed inside a worker (100 tasks 50 ms apart, from just before the enqueue "
        "call, medians): the enqueue call returns at 0.59 ms, the worker wakes at 0.80 ms, "
        "its reserve returns at 1.34 ms and the task starts at 1.43 ms. On this machine "
        "every hop after an idle gap pays the wake of an idle CPU: a round trip of a "
        "bare ``EVALSHA`` to a private Redis costs 42 µs back to back, 198 µs after 5 ms "
        "idle and 477 µs after 50 ms; a pickup is three such hops in a row (the enqueue, "
        "the wake-up, the reserve), as the floor's is, so its figure moves with the "
        "machine's idle states between runs more than with this library's work."),
    PICKUP_FORK_TARGET: (
        "**Pickup latency forking.** p50 {p50_fork:.2f} ms, p99 {p99_fork:.2f} ms, at the "
        "bounds or over them, as the in-process pickup: on top of the in-process path, the "
        "hand-over of the reservation to the "
        "spare process and its start, whose cost is the forked task's CPU below. Timed "
        "inside a worker (as for the in-process pickup): the reserve returns at 1.50 ms, "
        "the hand-over (the job prepared, its bounds resolved, the reservation sent on the "
        "spare's line, 0.11 ms of it the send itself) ends at 2.04 ms, and the task starts "
        "at 2.70 ms: the spare's wake and its own start, a fourth hop after idle."),
    CPU_TARGET: (
        "**CPU per forked task.** {cpu_forked_task_ms:.2f} ms against a bare fork's "
        "{cpu_bare_fork_ms:.2f} ms ({cpu_vs_bare_fork:.2f} x): worker "
        "{cpu_worker_ms:.2f} ms, task process {cpu_task_process_ms:.2f} ms. The task process "
        "no longer opens a Redis connection (its worker writes for it, over its line). "
        "Profiles of this layout (cProfile, 300 and 1,000 no-op tasks on a private Redis; "
        "each task process under its own profiler): in the task process, about 2 ms of "
        "Python per task, of which 0.57 ms is the orphan watch (a thread started in each "
        "task process), 0.13 ms the outcome made a message (``dataclasses.asdict``) and "
        "about 0.3 ms JSON on the line; the rest of its CPU beyond a bare fork is the "
        "kernel copying the pages its run touches (the PSS below). In the worker, "
        "``os.fork`` itself takes about 1.07 ms per task (a bare fork's worker side: "
        "{cpu_bare_fork_ms:.2f} ms in all), the round trips to Redis and the line about "
        "0.7 ms, and the rest is the loop's Python (the reservation handed over, the "
        "running-task state machine, the hooks, the outcome recorder). What stands between: "
        "no thread per task process (the orphan watch done by the beat the process already "
        "has), the outcome sent as it is built, and, for 1.5 x, a task process that touches "
        "less of its worker's image: a template process forked once, whose children start "
        "from it, rather than the worker's whole image. The orphan watch's thread was "
        "measured since: drains of 800 no-op tasks with and without it, interleaved, ran "
        "167-232 tasks/s either way (task process 2.7-3.9 ms against 3.0-3.7 ms of CPU), "
        "its cost within this machine's noise, so it stays. What is left beyond a bare "
        "fork is a fork of the worker's whole image, two round trips to Redis and one to the "
        "task process, and a Python run in a copy-on-write child: a layout where the "
        "worker forks per task and records what its task process tells it cannot reach "
        "1.5 x a child that exits at once."),
    FORK_TARGET: (
        "**Drain forking.** {drain_fork:,.0f}/s: {drain_fork_ratio:.2f} x blueque's "
        "ForkingRunner ({drain_blueque_fork:,.0f}/s). Bounded by the CPU per forked task "
        "above on two cores: the same work. blueque's ForkingRunner forks a bare child that "
        "makes its own two Redis calls and keeps no lease, no attempt and no outcome "
        "message: 1.8 x its rate would need the CPU per forked task under about 5 ms on "
        "this machine, below what the fork and the child's copy-on-write run cost here."),
    PSS_TARGET: (
        "**Task process PSS.** {pss_ratio:.2f} x a bare fork ({pss_task:.1f} against "
        "{pss_bare:.1f} MiB), 500 running. A running task process holds no connection any "
        "more; its private pages are those its run writes in the image it shares with its "
        "worker. ``/proc/<pid>/smaps`` of one task process (``private_of_one`` in "
        "``bench/results/concurrency.json``) puts them in anonymous memory (about 3.7 MiB: "
        "Python's arenas, whose pages a run dirties by touching objects, reference counts "
        "included, and by allocating; the orphan watch's thread stack), ``[heap]`` (about "
        "1.0 MiB) and ``libpython``'s data (0.4 MiB); the bare fork's child, which touches "
        "nothing before it exits, has 0.5-0.8, 0.1-0.2 and 0.2 MiB there. RQ's work horse, "
        "measured the same way in the same run, holds as much (3.5, 1.0 and 0.5 MiB): it is "
        "what a Python process that runs a task writes, after ``gc.freeze()`` (which the "
        "worker calls before its forks). What stands between: fewer objects touched by a "
        "run (the job built from its reservation, the hooks, the line's messages) and no "
        "thread per task process; a bare fork's figure is out of reach for any Python run."),
    MEMORY_TARGET: (
        "**Redis memory per finished task kept.** {mem_finished:,.0f} B against blueque's "
        "{mem_finished_blueque:,.0f} B ({mem_finished_ratio:.2f} x). ``MEMORY USAGE`` of "
        "2,000 tasks finished by an in-process worker (the benchmark's parameters, a listpack "
        "hash each, on the benchmark's redis-server 6.2): the task's hash 327 B, its retention "
        "entry 119 B (the sorted set is a skiplist past 128 members), its entry in the "
        "complete list 38 B; the rest of the figure is the key's entry in the keyspace, as "
        "for blueque. Beyond blueque's fields, the hash keeps ``attempt``, ``pstart`` (the "
        "process start mark, 44 bytes) and ``started_at``. A mark keeping 8 characters of "
        "the boot id rather than 36 was measured (a finished task's hash 360 B to 328 B; "
        "the run at f60f4cc had it, 541 B against 547 B in the run before) and reverted: "
        "workers of earlier versions compare marks as exact text, and would take a newer "
        "worker's live process on their host for dead during a rolling upgrade. Kept forever, as blueque keeps its tasks (``result_ttl=-1``), a "
        "task costs about {mem_finished_forever:,.0f} B ({mem_finished_forever_ratio:.2f} x): "
        "what stands between is the retention index, the price of deleting finished tasks on "
        "time, which blueque does not do. It cannot be met on this layout: the retention "
        "sorted set is part of the documented key layout (docs/keys.rst) and the existing "
        "tests of retention, workflows and the key layout read it (``ZSCORE``, "
        "``ZRANGE``), and any sorted set past 128 members costs this much per member. An index of lists (tasks of "
        "a queue's default retention filed by minute, each checked when its minute comes, "
        "about 40 B a task) would meet it, with a new key layout and every step that files "
        "or takes back a finished task changed."),
}

#: the measures taken as changes landed, kept by hand: appended to the page
HISTORY = "\n" + (HERE / "history.rst").read_text()


def target_table(rows: list[Target]) -> str:
    """The targets as an RST table: target, measured, status."""
    status = {True: "met", False: "missed", None: "–"}
    return rst_rows(["target", "measured", "status"],
                    [[name, measured, status[met]] for name, measured, met in rows])


def explanations(rows: list[Target], values: dict) -> list[str]:
    """The analysis of each missed target (`MISSES`), or a sentence saying there is none."""
    texts = []
    for name, _, met in rows:
        if met is not False:
            continue
        if name in MISSES:
            texts.append(MISSES[name].format(**values))
        else:
            print(f"warning: target missed without an analysis: {name}")
            texts.append(f"**{name[0].upper()}{name[1:]}.** Missed in this run, with no analysis "
                         "written yet: see the figures above and ``bench/results/latest.json``.")
    return texts


def steps_section(markdown: str) -> str:
    """Where a plain task's Redis work goes, step by step, and the CPU of a forked task."""
    return f"""For limpyd-blueque and the floor, each step of a plain task run on its own
(``measure_steps`` in ``bench/peers/_common.py``, the same sequence under MONITOR and then
timed with ``INFO commandstats`` around each step), and then what each worker sends per task
when it drains tasks (``measure_counts``), with what it sends beyond those steps. Commands
count those a script runs; server time is the ``usec`` of ``INFO commandstats`` of what the
client sent (a script's own usec holds the commands it runs). The steps run back to back, a
worker at its own pace, and a server left idle longer runs each command slower: the server
time of what a worker sends beyond its steps is therefore its client-issued commands at the
drain's mean server time per client-issued command, not a difference of times.

{page_table(markdown, "| peer | step |")}

CPU per forked task
-------------------

``getrusage`` of the worker process (``RUSAGE_SELF``) and of its task processes
(``RUSAGE_CHILDREN``, reaped) over drains of a few hundred no-op tasks (per task: the
difference between two drain sizes), against the same worker process, once stopped,
forking as many children that exit at once (``os._exit(0)``), each reaped before the next,
with the same accounting (``measure_fork_cpu``).

{page_table(markdown, "| process | worker side")}"""


#: the parts of a step's server instructions, in the order shown (bench/server_cost.py)
COST_PARTS = ("commands", "command calls", "KEYS and ARGV", "reply", "closures", "rest of Lua",
              "outside scripts", "total", "garbage collection")


def server_cost_section() -> str:
    """Where the server's instructions go per task (bench/server_cost.py, callgrind)."""
    path = RESULTS / "server_cost.json"
    if not path.exists():
        return (NOT_MEASURED[0].upper() + NOT_MEASURED[1:]
                + " (``bench/server_cost.py`` needs valgrind).")
    report = json.loads(path.read_text())
    steps = report["steps"]
    columns = [("reserve", "reserve"), ("finish", "complete"), ("both", "both steps"),
               ("floor", "the floor's two steps"), ("grouped", "both, a task of a group")]
    body = []
    for part in COST_PARTS:
        label = {"garbage collection": "of which Lua's garbage collector",
                 "total": "**total**"}.get(part, part)
        body.append([label] + [f"{steps[key][part] / 1000:,.1f}" for key, _ in columns])
    ratio = steps["both"]["total"] / steps["floor"]["total"]
    grouped = steps["grouped"]["total"] / steps["both"]["total"]
    return f"""``bench/server_cost.py``: redis-server run under valgrind's callgrind, counting
only while the steps run, {report['tasks']:,} plain tasks reserved and completed as an
in-process worker does, in batches of {report['batch']}. Instructions do not move with the
machine's load as microseconds do (two runs agree within 0.5 %). Thousands of instructions
per task, by the server function that spent them: the commands a script runs, the calls
around them (``redis.call``: the arguments made, the reply read back into Lua), the
``KEYS`` and ``ARGV`` tables Redis makes at every call, the conversion of the script's
reply, the functions a script defines at each call (closures), the rest of the Lua
interpreter, and what the server does outside scripts (reading the request, writing the
reply). The garbage collector runs inside those parts; its share is given last.

{rst_rows(["thousand instructions per task"] + [name for _, name in columns], body)}

Both steps cost {ratio:.2f} x the floor's; a task of a group costs {grouped:.2f} x a plain
task."""


#: what a section says of a figure no run measured
NOT_MEASURED_SENTENCE = NOT_MEASURED[0].upper() + NOT_MEASURED[1:] + "."


def results_of(name: str) -> dict | None:
    """The report a script of bench/ wrote in results/<name>.json (None: none yet)."""
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def groups_section() -> str:
    """What groups cost (bench/groups.py, issue #30), with the targets of that issue."""
    report = results_of("groups")
    if report is None:
        return NOT_MEASURED_SENTENCE
    sizes, summary = report["sizes"], report["summary"]
    reserve_ok = summary["reserve_ratio"] <= 1.5
    drain_ok = summary["drain_ratio"] >= 0.8
    body = rst_rows(["target (issue #30)", "measured", "status"], [
        ["reserve with 10,000 groups waiting at most 1.5 x its cost with 10",
         f"{summary['reserve_10000_us']:.0f} against {summary['reserve_10_us']:.0f} µs: "
         f"{summary['reserve_ratio']:.2f} x", "met" if reserve_ok else "missed"],
        ["in-process drain of tasks that all have a group at least 0.8 x without",
         f"{fmt(summary['drain_with_groups'])} against {fmt(summary['drain_without_groups'])} "
         f"tasks/s: {summary['drain_ratio']:.2f} x", "met" if drain_ok else "missed"]])
    return f"""``bench/groups.py``, on a private Redis, {sizes['repetitions']} repetitions, the two sides
of each comparison interleaved (medians). The reserve step as a worker takes it
(``Queue.reserve_from`` with a tally), timed over {sizes['reserves']:,} reserves with
{sizes['waiting']:,} tasks waiting spread over 10 or over 10,000 groups (each task
completed after its reserve, untimed): a group's turn is the first entry of one sorted set,
whatever the number of groups. The drain: one in-process worker, {sizes['drain_tasks']:,} no-op
tasks, from the first task's start to the last's, the tasks spread over
{sizes['drain_groups']} groups or without a group.

{body}"""


def workflows_section() -> str:
    """What workflows cost (bench/workflows.py, issue #31), with the targets of that
    issue."""
    report = results_of("workflows")
    if report is None:
        return NOT_MEASURED_SENTENCE
    sizes, summary = report["sizes"], report["summary"]
    finish = summary["finish"]
    small, large = (finish["1 waiting, workflow of 200"],
                    finish["1 waiting, workflow of 10,000"])
    size_ok = large["commands"] <= small["commands"] * 1.01
    submit_ok = summary["submit_s"] <= 1.0
    target_rows = [
        [f"submit a {sizes['fan_out']:,}-node fan-out with its fan-in in at most 1 s",
         f"{summary['submit_s']:.2f} s", "met" if submit_ok else "missed"],
        ["finishing a node costs nothing more in a larger workflow",
         f"{small['commands']:.0f} commands in a workflow of 200, {large['commands']:.0f} in "
         f"one of 10,000", "met" if size_ok else "missed"]]
    waiters_path = RESULTS / "waiters.json"
    if waiters_path.exists():
        waiters = json.loads(waiters_path.read_text())
        p99 = waiters["summary"]["p99_ms"]
        target_rows.append(
            [f"{waiters['sizes']['waiters']:,} concurrent waiters each woken within 50 ms "
             "(p99) of their task's end",
             f"p50 {waiters['summary']['p50_ms']:.1f} ms, p99 {p99:.1f} ms "
             "(bench/waiters.py)", "met" if p99 <= 50 else "missed"])
    body = rst_rows(["target (issue #31)", "measured", "status"], target_rows)
    rows = rst_rows(["finish of one node", "µs (reserve and complete)", "commands"], [
        [label, f"{found['us']:.0f}", f"{found['commands']:.1f}"]
        for label, found in finish.items()])
    return f"""``bench/workflows.py``, on a private Redis, {sizes['repetitions']} repetition(s)
(medians). The submission: ``Workflow.add`` of {sizes['fan_out']:,} nodes and their
fan-in, then ``submit()``, from the first ``add`` to the end of ``submit``. A finish: a
worker's reserve and complete of a node (``complete`` tells the tasks waiting for it),
timed per node over {sizes['finished']} nodes (20 for 100 waiting tasks), with the
commands the server ran for it (``INFO commandstats``, the scripts' own included). A
plain task pays nothing for dependencies; a node's finish grows with the tasks waiting for
it (about 13 commands each), not with the size of its workflow. ``bench/waiters.py``:
1,000 asyncio waiters (``aio.Queue.wait``) on one client, each on its own task, woken as
an in-process worker finishes the tasks as fast as it goes, from each task's end (its
``updated``) to its waiter's return.

{body}

{rows}"""


def payloads_section() -> str:
    """What codecs and encryption cost (bench/payloads.py, issue #33)."""
    report = results_of("payloads")
    if report is None:
        return NOT_MEASURED_SENTENCE
    summary, sizes = report["summary"], report["sizes"]
    rows = []
    for kind, by_size in summary.items():
        for size, found in by_size.items():
            rows.append([kind, f"{int(size):,} B", f"{found['stored_bytes']:,} B",
                         f"{found['enqueue_per_s']:,.0f}", f"{found['drain_per_s']:,.0f}"])
    table = rst_rows(["payload", "size", "stored", "enqueue /s (one call at a time)",
                      "drain /s (in-process, decoded)"], rows)
    return f"""``bench/payloads.py``, on a private Redis, {sizes['repetitions']} repetition(s)
(medians), every kind and size in the same run: enqueue one call at a time, then an
in-process worker drains the tasks, each decoding its parameters (``job.payload()``)
and returning a small result in its codec. ``json`` is the default (a ``str`` as it is,
anything else as compact JSON); ``bytes`` and ``msgpack`` travel as the text of their
bytes through the client's ``surrogateescape`` decoding; ``encrypted json`` is JSON sealed
with AES-256-GCM (base64 in its envelope: a third more stored). A 1 MB ``bytes`` or
``msgpack`` payload pays for that trip through text: the bytes of random data are mostly
not UTF-8, and turning them into text and back costs about 14 ms a megabyte on this
machine, where JSON text passes as it is; handing the client the bytes themselves is the
next step there. See :doc:`payloads`.

{table}"""


def main() -> None:
    """Write the page (`--output`, default docs/benchmarks.rst); print the targets."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", type=Path, default=PAGE, help="the page to write")
    args = parser.parse_args()
    data = json.loads((RESULTS / "latest.json").read_text())
    concurrency = RESULTS / "concurrency.json"
    many = json.loads(concurrency.read_text()) if concurrency.exists() else None
    markdown = (RESULTS / "latest.md").read_text()
    meta = data["meta"]
    rows, values = targets(data, many)
    misses = explanations(rows, values)
    error_line = re.search(r"Error filtering by date.*", markdown)
    page = f"""==========
Benchmarks
==========

limpyd-blueque measured against the queues users would pick instead, **in the same run**, on
the same private Redis, with the same no-op task. This page is written by
``bench/docs_page.py`` from the last full run of ``python3 bench/run.py``
(``bench/results/latest.md`` and ``latest.json`` hold all of it); ``bench/README.md`` says
how each figure is measured.

.. image:: _static/bench.png
   :alt: drain throughput and pickup latency per peer

The run
=======

* Started {meta['started']}, {meta['repetitions']} repetitions interleaved (every peer in
  repetition 1, then every peer in repetition 2...); it took {meta['elapsed_seconds'] / 60:.0f}
  minutes, venvs already built (building them on a fresh machine adds about 30 seconds).
* The machine: {meta['machine']}; redis-server {meta['redis']['redis_version']} without
  persistence, private to the run.
* Each peer in a virtualenv of its own, versions pinned in ``bench/run.py`` (the ``pip
  freeze`` of each is in the JSON). The "floor" is the Blueque protocol written by hand with
  redis-py, one Lua script per step: what Redis and redis-py allow on this layout.
* To reproduce: ``python3 bench/run.py`` (``--quick`` for a two-minute smoke run), then
  ``python3 bench/plot.py`` and ``python3 bench/docs_page.py``. Cells are medians over
  repetitions, with min-max.

Speed
=====

{page_table(markdown, "| peer | enqueue, one call")}

Redis memory
============

{page_table(markdown, "| peer | Redis memory per pending")}

Commands, round trips and server time per task
==============================================

{page_table(markdown, "| peer | commands per task, worker side")}

{page_table(markdown, "| peer | commands per enqueue")}

Server time: the ``usec`` of ``INFO commandstats`` for the commands the clients sent (a
script's usec holds the commands it runs), measured in a second pass without MONITOR.

Redis work per step
===================

{steps_section(markdown)}

Server work per task, counted
-----------------------------

{server_cost_section()}

Costs as tasks pile up
======================

{page_table(markdown, "| peer | pending tasks")}

{error_line.group(0) if error_line else ""}

Many tasks at once
==================

.. image:: _static/concurrency.png
   :alt: per running task, against N: task process PSS, Redis commands/s, pickup p99, start time

{many_tasks(many) if many else NOT_MEASURED[0].upper() + NOT_MEASURED[1:] + "."}

Groups
======

{groups_section()}

Workflows
=========

{workflows_section()}

Payloads
========

{payloads_section()}

The targets
===========

The targets of issue #28, each from this run (peers in the same run).

{target_table(rows)}
""" + ("\nThe misses\n----------\n\n" + "\n\n".join(misses) + "\n" if misses else "")
    args.output.write_text(page + HISTORY)
    met = sum(1 for _, _, ok in rows if ok)
    unmeasured = sum(1 for _, _, ok in rows if ok is None)
    print(target_table(rows))
    print(f"wrote {args.output}: {met} targets met, {len(misses)} missed, "
          f"{unmeasured} not measured in this run")


if __name__ == "__main__":
    main()
