#!/usr/bin/env python3
"""Draw drain throughput and pickup latency per peer from bench/results/latest.json, and
what one worker costs per running task from bench/results/concurrency.json.

    bench/.venvs/plot/bin/python bench/plot.py [results.json] [out.png]
    bench/.venvs/plot/bin/python bench/plot.py --concurrency [concurrency.json] [out.png]

matplotlib lives in the `plot` venv that bench/run.py makes (it is no dependency of
the package); run with another python, this script re-runs itself in that venv.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
DEFAULT_JSON = BENCH / "results" / "latest.json"
DEFAULT_PNG = BENCH.parent / "docs" / "_static" / "bench.png"

try:
    import matplotlib
except ImportError:
    venv = BENCH / ".venvs" / "plot" / "bin" / "python"
    if venv.exists() and Path(sys.executable) != venv:
        os.execv(str(venv), [str(venv), __file__, *sys.argv[1:]])
    raise SystemExit("matplotlib is missing: run `python3 bench/run.py` once (it makes "
                     "bench/.venvs/plot), or install matplotlib")

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


CONCURRENCY_JSON = BENCH / "results" / "concurrency.json"
CONCURRENCY_PNG = BENCH.parent / "docs" / "_static" / "concurrency.png"
MIB = 1024 * 1024


def concurrency_series(report: dict) -> list[tuple[str, str, list[dict]]]:
    """(label, color, levels measured) of limpyd-blueque and of each peer."""
    series = [("limpyd-blueque (fork per task)", "#c0392b", report["levels"])]
    colors = iter(["#2c7fb8", "#41ab5d", "#756bb1"])
    for peer, levels in (report.get("peers") or {}).items():
        series.append((peer, next(colors, "#636363"), levels))
    return [(label, color, [level for level in levels if "error" not in level])
            for label, color, levels in series]


def concurrency(source: Path, target: Path) -> None:
    """Four panels against N running tasks: task process PSS (and its bare fork), Redis
    commands/s per 1,000 running tasks, pickup p99 while N run, time to start all N."""
    report = json.loads(source.read_text())
    fig, axes = plt.subplots(1, 4, figsize=(16, 4.2))
    panels = [
        ("PSS per task process (MiB)", lambda lv: lv["running"]["tasks"]["pss_median"] / MIB),
        ("Redis commands/s per 1,000 running tasks",
         lambda lv: lv["running"]["redis"]["per_s_per_1000_tasks"]),
        ("pickup p99 while N run (ms)", lambda lv: lv["pickup"]["p99_ms"]),
        ("time to start all N (s)", lambda lv: lv["running"]["start"]["all_running_s"]),
    ]
    for axis, (title, value) in zip(axes, panels):
        for label, color, levels in concurrency_series(report):
            points = [(lv["n"], value(lv)) for lv in levels]
            if points:
                axis.plot(*zip(*points), marker="o", color=color, label=label)
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_xlabel("tasks running at once (N)")
        axis.set_title(title, fontsize=10)
    bare = [(lv["n"], lv["bare_fork"]["pss_median"] / MIB) for lv in report["levels"]
            if "error" not in lv]
    if bare:
        axes[0].plot(*zip(*bare), linestyle="--", color="#c0392b", alpha=0.5,
                     label="bare fork (same imports)")
    targets = report["meta"]["targets"]
    axes[1].axhline(targets["cmds_per_s_per_1000_max"], color="#999999", linestyle=":",
                    label="target")
    axes[2].axhline(targets["pickup_p99_ms_max"], color="#999999", linestyle=":",
                    label="target")
    axes[0].legend(fontsize=7)
    axes[2].legend(fontsize=7)
    meta = report["meta"]
    fig.suptitle(f"One worker, N sleeping tasks at once — {meta['machine']} "
                 f"({meta['started'][:10]}), redis {meta.get('redis_version', '?')}", fontsize=9)
    fig.tight_layout()
    target.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(target, dpi=110)
    print(f"wrote {target}")


def main() -> None:
    if sys.argv[1:2] == ["--concurrency"]:
        arguments = sys.argv[2:]
        concurrency(Path(arguments[0]) if arguments else CONCURRENCY_JSON,
                    Path(arguments[1]) if len(arguments) > 1 else CONCURRENCY_PNG)
        return
    source = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_JSON
    target = Path(sys.argv[2]) if len(sys.argv) > 2 else DEFAULT_PNG
    report = json.loads(source.read_text())
    rows = report["meta"]["rows"]
    summary = report["summary"]
    labels = [row["label"] for row in rows]
    colors = ["#c0392b" if row["peer"] == "limpyd_blueque" else
              "#7f8c8d" if row["peer"] == "floor" else "#2c7fb8" for row in rows]

    def series(figure: str):
        medians, low, high = [], [], []
        for row in rows:
            stats = summary[row["key"]].get(figure)
            if stats is None:
                medians.append(0), low.append(0), high.append(0)
            else:
                medians.append(stats["median"])
                low.append(stats["median"] - stats["min"])
                high.append(stats["max"] - stats["median"])
        return medians, [low, high]

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 0.45 * len(rows) + 2.2),
                                      sharey=True)
    positions = list(range(len(rows)))[::-1]
    drain, drain_err = series("drain_per_s")
    left.barh(positions, drain, xerr=drain_err, color=colors, capsize=3)
    left.set_yticks(positions, labels)
    left.set_xlabel("tasks/s (higher is better)")
    left.set_title("Drain throughput, one worker process")
    for y, value, above in zip(positions, drain, drain_err[1]):
        left.text(value + above, y, f"  {value:,.0f}" if value else " failed", va="center",
                  fontsize=8)
    left.set_xlim(0, max(d + e for d, e in zip(drain, drain_err[1])) * 1.18 or 1)

    p50, p50_err = series("latency_p50_ms")
    p99, p99_err = series("latency_p99_ms")
    height = 0.38
    right.barh([y + height / 2 for y in positions], p50, height, xerr=p50_err, color=colors,
               capsize=3, label="p50")
    right.barh([y - height / 2 for y in positions], p99, height, xerr=p99_err, color=colors,
               alpha=0.45, capsize=2, error_kw={"alpha": 0.5}, label="p99 (lighter)")
    right.set_xscale("log")
    right.set_xlabel("ms, log scale (lower is better)")
    right.set_title("Pickup latency, idle worker (enqueue → task start)")
    for y, a, a_up, b, b_up in zip(positions, p50, p50_err[1], p99, p99_err[1]):
        if a:
            right.text(b + b_up, y - height / 2, f"  p99 {b:,.1f}", va="center", fontsize=7)
            right.text(a + a_up, y + height / 2, f"  p50 {a:,.1f}", va="center", fontsize=7)
    right.set_xlim(right=max(b + e for b, e in zip(p99, p99_err[1])) * 4)
    right.legend(loc="lower right", fontsize=8)
    meta = report["meta"]
    fig.suptitle(f"limpyd-blueque and peers — {meta['repetitions']} repetition(s), "
                 f"{meta['sizes']['n']} no-op tasks per drain, redis {meta['redis']['redis_version']}, "
                 f"{meta['machine']} ({meta['started'][:10]}); bars: median, whiskers: min–max",
                 fontsize=9)
    fig.tight_layout()
    target.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(target, dpi=110)
    print(f"wrote {target}")


if __name__ == "__main__":
    main()
