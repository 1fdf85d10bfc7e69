#!/usr/bin/env python3
"""Many tasks at once, for RQ and Celery: the figures of bench/concurrency.py, measured alike.

    python3 bench/many_peers.py --levels 1,2,50 --window 10 --probes 10
    python3 bench/many_peers.py --levels 500 --window 5 --probes 5

For each level N and peer, in the peer's own venv (`bench/.venvs/<peer>`, made by
run.py's `ensure_venvs`), driven through `bench/peers/many.py`:

1. **Running**: the peer's worker, idle and ready, then N sleeping tasks enqueued at once
   (RQ: `rq worker-pool -n N`, N workers forked by one pool process, each forking a work
   horse per job, `Queue.enqueue_many`; Celery: one `celery worker -P prefork -c N`,
   `apply_async` once per task: it has no bulk API). Each task pushes its start time and
   pid. Measured: the time from just before the enqueue to N bodies running; PSS and USS
   of the N task processes (RQ's work horses, Celery's pool children); the worker's RSS,
   descriptors and threads, summed over the worker's processes but the task processes
   (RQ: the pool process, its N workers and the scheduler one of them starts; Celery:
   the main process); `INFO commandstats` deltas over the window while nothing else
   talks to Redis. The worker is then killed, task processes included.
2. **Bare fork**: a process of the peer's venv imports what a task process has imported
   (`MODULES` in peers/many.py), forks N children that only wait; their median PSS/USS.
3. **Pickup**: the worker with N+1 workers (RQ) or N+1 pool processes (Celery), N
   sleeping tasks; a no-op task, `probes` times, each once the previous one has run;
   latency = its start time minus the time just before the enqueue call.

A worker not ready within START_TIMEOUT seconds, or tasks not all running within it, or
not enough memory, gives `{"n": N, "error": ...}` for that peer and level; the run goes
on. Every process started here carries a token in its environment (concurrency.py's
`Processes`) and is killed at the end of each phase, forked children included.
The standalone run writes `bench/results/many_peers.json` and prints a table.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import psutil
import redis
import run
from concurrency import (
    DEFAULT_PROCESS_COST,
    MIB,
    Processes,
    become_subreaper,
    interrupted,
    kill_group,
    memory_of,
    percentile,
    private_by_mapping,
    redis_window,
    tail,
    valid_levels,
)

from limpyd_blueque.connection.embedded import EmbeddedRedis

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results" / "many_peers.json"
PEERS = ("rq", "celery")
QUEUE = "bench_many"
BEGAN = "bench:began"  # the sleeping tasks push "<start time> <pid>" here
PROBED = "bench:probe"  # and the pickup probes here
LONG_SLEEP = 86_400  # longer than any measurement: the tasks are killed at its end
START_TIMEOUT = 120.0  # seconds for a worker to be ready, and for N tasks to be running


def log(message: str) -> None:
    print(f"[many_peers {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def how(peer: str, workers: int) -> str:
    if peer == "rq":
        return (f"rq worker-pool -n {workers} (fork per job); worker = pool process + its "
                f"{workers} workers + scheduler, summed; task process = work horse")
    return (f"celery -P prefork -c {workers} --without-gossip --without-mingle "
            "--without-heartbeat; worker = main process; task process = pool child")


def tree_resources(pid: int, task_pids: set[int], n: int) -> dict[str, Any]:
    """A worker's processes (`pid` and its descendants but the task processes): memory,
    descriptors and threads summed, and each per running task."""
    main = psutil.Process(pid)
    processes = [main, *(child for child in main.children(recursive=True)
                         if child.pid not in task_pids)]
    figures: dict[str, Any] = {"processes": len(processes), "rss": 0, "pss": 0, "uss": 0,
                               "fds": 0, "threads": 0}
    for process in processes:
        try:
            info = process.memory_full_info()
            figures["fds"] += process.num_fds()
            figures["threads"] += process.num_threads()
        except psutil.NoSuchProcess:
            continue
        for name in ("rss", "pss", "uss"):
            figures[name] += getattr(info, name)
    for name in ("rss", "fds", "threads"):
        figures[f"{name}_per_task"] = figures[name] / n
    return figures


def tree_cpu(pid: int) -> dict[int, float]:
    """CPU seconds of `pid` and of each of its descendants alive now, by pid."""
    seconds: dict[int, float] = {}
    try:
        main = psutil.Process(pid)
        for process in [main, *main.children(recursive=True)]:
            times = process.cpu_times()
            seconds[process.pid] = times.user + times.system
    except psutil.NoSuchProcess:
        pass
    return seconds


class PeerBench:
    """The phases of one level for one peer, on a Redis of its own (flushed here)."""

    def __init__(self, peer: str, url: str, cfg: dict[str, Any], processes: Processes) -> None:
        self.peer = peer
        self.url = url
        self.cfg = cfg
        self.processes = processes
        self.client = redis.Redis.from_url(url, decode_responses=True)
        self.python = str(run.venv_python(peer))

    def args(self, phase: str, **request: Any) -> list[str]:
        request = {"url": self.url, "queue": QUEUE, **request}
        return [self.python, "-m", "peers.many", self.peer, phase, json.dumps(request)]

    def call(self, phase: str, timeout: float, **request: Any) -> dict[str, Any]:
        """Run a phase of peers/many.py to its end; its JSON line."""
        name = f"{self.peer}-{phase}"
        process = self.processes.start(self.args(phase, **request), name, cwd=BENCH,
                                       stdout=subprocess.PIPE)
        try:
            out, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired as error:
            raise RuntimeError(f"{phase}: no answer within {timeout:g} s") from error
        finally:
            kill_group(process.pid)  # its group only: the worker carries the token too
            process.wait()
            self.processes.running.remove(process)
        lines = out.decode(errors="replace").strip().splitlines()
        result = json.loads(lines[-1]) if lines else {
            "ok": False, "error": f"no result: {tail(self.processes.workdir / f'{name}.log')}"}
        if not result.get("ok"):
            raise RuntimeError(f"{phase}: {result.get('error')}")
        return result

    def wait_for(self, what: str, done: Callable[[], bool], timeout: float,
                 worker: subprocess.Popen[bytes], every: float = 0.01) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if worker.poll() is not None:
                log_file = self.processes.workdir / f"{self.peer}-worker.log"
                raise RuntimeError(f"the worker exited (code {worker.returncode}) waiting for "
                                   f"{what}: {tail(log_file)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out after {timeout:g} s waiting for {what}")
            time.sleep(every)

    # -- the worker ----------------------------------------------------------------------
    def start_worker(self, workers: int) -> tuple[subprocess.Popen[bytes], float]:
        """The peer's worker with `workers` workers (RQ) or pool processes (Celery), ready
        to take tasks; and the seconds it took."""
        self.client.flushall()
        began = time.monotonic()
        worker = self.processes.start(self.args("worker", workers=workers),
                                      f"{self.peer}-worker", cwd=BENCH)
        def forked_count() -> int:  # RQ: its workers; Celery: its pool processes
            try:
                return len(psutil.Process(worker.pid).children())
            except psutil.NoSuchProcess:
                return 0
        try:
            self.call("ready", START_TIMEOUT + 30, workers=workers, pid=worker.pid,
                      wait=START_TIMEOUT)
        except RuntimeError as error:
            raise RuntimeError(f"{error} ({forked_count()} of {workers} processes forked; "
                               f"load average {os.getloadavg()[0]:.0f})") from error

        def forked() -> bool:
            return forked_count() >= workers
        self.wait_for(f"{workers} worker processes", forked,
                      max(5.0, START_TIMEOUT - (time.monotonic() - began)), worker, every=0.05)
        seconds = time.monotonic() - began
        time.sleep(0.3)
        return worker, seconds

    def start_tasks(self, n: int, worker: subprocess.Popen[bytes]) -> dict[str, Any]:
        """Enqueue N sleeping tasks at once; seconds until all are running, their pids, CPU
        seconds meanwhile of Redis and of the worker's processes but the task processes."""
        cpu, redis_cpu = tree_cpu(worker.pid), self.redis_cpu()
        began = self.call("enqueue", 60 + n * 0.2, n=n, key=BEGAN, sleep=LONG_SLEEP)["began"]
        self.wait_for(f"{n} task bodies", lambda: self.client.llen(BEGAN) >= n, START_TIMEOUT,
                      worker)
        stamps = [entry.split() for entry in self.client.lrange(BEGAN, 0, -1)]
        bodies = sorted(float(started) - began for started, _ in stamps)
        pids = sorted({int(pid) for _, pid in stamps})
        if len(pids) != n:
            raise RuntimeError(f"{n} tasks ran in {len(pids)} processes")
        return {"all_running_s": bodies[-1], "first_running_s": bodies[0],
                "median_running_s": statistics.median(bodies), "running_per_s": n / bodies[-1],
                "worker_cpu_s": sum(seconds - cpu.get(pid, 0.0) for pid, seconds
                                    in tree_cpu(worker.pid).items() if pid not in pids),
                "redis_cpu_s": self.redis_cpu() - redis_cpu, "pids": pids}

    def redis_cpu(self) -> float:
        info = self.client.info("cpu")
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])

    # -- the phases ----------------------------------------------------------------------
    def running(self, n: int) -> dict[str, Any]:
        worker, ready_s = self.start_worker(n)
        try:
            start = self.start_tasks(n, worker)
            pids = start.pop("pids")
            result: dict[str, Any] = {"start": {**start, "worker_ready_s": ready_s}}
            time.sleep(self.cfg["settle"])
            result["tasks"] = {**memory_of(pids), "private_of_one": private_by_mapping(pids[0])}
            result["worker"] = tree_resources(worker.pid, set(pids), n)
            result["redis"] = redis_window(self.client, self.cfg["window"], n)
            if worker.poll() is not None or not all(psutil.pid_exists(pid) for pid in pids):
                raise RuntimeError("the worker or some of its tasks stopped during the window")
            return result
        finally:
            self.processes.kill(worker)

    def bare_fork(self, n: int) -> dict[str, Any]:
        reference = self.processes.start(self.args("reference", n=n), f"{self.peer}-reference",
                                         cwd=BENCH, stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE)
        try:
            assert reference.stdout is not None
            line = reference.stdout.readline()
            if not line:
                raise RuntimeError("the reference process failed: "
                                   + tail(self.processes.workdir / f"{self.peer}-reference.log"))
            time.sleep(self.cfg["settle"])
            answer = json.loads(line)
            return {**memory_of(answer["pids"]),
                    "private_of_one": private_by_mapping(answer["pids"][0]),
                    "modules": answer["modules"]}
        finally:
            self.processes.kill(reference)

    def pickup(self, n: int) -> dict[str, Any]:
        worker, _ = self.start_worker(n + 1)
        try:
            self.start_tasks(n, worker)
            time.sleep(self.cfg["settle"])
            probes = self.cfg["probes"]
            samples = self.call("probe", 30 + 25 * probes, key=PROBED,
                                probes=probes)["samples_ms"]
            return {"p50_ms": statistics.median(samples), "p99_ms": percentile(samples, 0.99),
                    "max_ms": max(samples), "samples_ms": samples, "concurrency": n + 1,
                    "how": how(self.peer, n + 1)}
        finally:
            self.processes.kill(worker)


def level(bench: PeerBench, n: int, process_cost: float) -> dict[str, Any]:
    """One level of one peer; `{"n", "error"}` if it could not run."""
    result: dict[str, Any] = {"n": n, "how": how(bench.peer, n), "seconds": {}}
    began = time.monotonic()
    try:
        # task processes, plus RQ's workers; the bare fork's children come after
        processes = (2 * n + 2 if bench.peer == "rq" else n + 2) + 1
        needed, available = processes * process_cost, psutil.virtual_memory().available * 0.8
        if needed > available:
            raise RuntimeError(f"not enough memory: {processes} processes of "
                               f"{process_cost / MIB:.0f} MiB, {available / MIB:.0f} MiB free")
        for phase, measure in (("running", bench.running), ("bare_fork", bench.bare_fork),
                               ("pickup", bench.pickup)):
            log(f"{bench.peer} N={n}: {phase}")
            phase_began = time.monotonic()
            result[phase] = measure(n)
            result["seconds"][phase] = round(time.monotonic() - phase_began, 1)
        result["pss_ratio"] = (result["running"]["tasks"]["pss_median"]
                               / result["bare_fork"]["pss_median"])
        result["uss_ratio"] = (result["running"]["tasks"]["uss_median"]
                               / result["bare_fork"]["uss_median"])
    except Exception as error:  # noqa: BLE001 - recorded; the next peer and level go on
        result["error"] = f"{type(error).__name__}: {error}"[:1000]
        log(f"{bench.peer} N={n}: FAILED: {result['error']}")
    finally:
        bench.processes.kill_all()
    result["seconds"]["total"] = round(time.monotonic() - began, 1)
    return result


def measure_peers(levels: list[int], url: str, window: float, probes: int,
                  quick: bool) -> dict[str, list[dict[str, Any]]]:
    """RQ's and Celery's figures at each level, shaped like concurrency.py's levels, on the
    Redis at `url` (flushed before each phase). Each level runs both peers in turn;
    `quick` shortens the settling pauses (1 s instead of 2)."""
    run.LOGS.mkdir(parents=True, exist_ok=True)
    venvs = run.ensure_venvs(list(PEERS))
    cfg = {"window": window, "probes": probes, "settle": 1.0 if quick else 2.0}
    workdir = Path(tempfile.mkdtemp(prefix="blueque-many-peers-"))
    processes = Processes(workdir)
    results: dict[str, list[dict[str, Any]]] = {peer: [] for peer in PEERS}
    cost = {peer: float(DEFAULT_PROCESS_COST) for peer in PEERS}
    try:
        for n in levels:
            for peer in PEERS:
                if not venvs[peer]["ok"]:
                    results[peer].append({"n": n, "error": f"venv: {venvs[peer]['error']}"})
                    continue
                result = level(PeerBench(peer, url, cfg, processes), n, cost[peer])
                if "error" not in result:
                    cost[peer] = max(DEFAULT_PROCESS_COST / 4,
                                     result["running"]["tasks"]["uss_median"])
                log(f"{peer} N={n}: {result['seconds']['total']} s")
                results[peer].append(result)
    finally:
        processes.kill_all()
        shutil.rmtree(workdir, ignore_errors=True)
    return results


# -- the standalone run ------------------------------------------------------------------
def table(results: dict[str, list[dict[str, Any]]]) -> str:
    def mib(value: float) -> str:
        return f"{value / MIB:.1f}"

    headers = ["peer", "N", "ready (s)", "all running (s)", "task PSS/USS (MiB)",
               "bare fork PSS/USS", "PSS ratio (USS)", "worker RSS MiB (/task)", "fds (/task)",
               "threads (/task)", "Redis cmds/s", "per 1,000 tasks", "pickup p50/p99 (ms)",
               "level (s)"]
    rows = []
    for peer, levels in results.items():
        for entry in levels:
            if "error" in entry:
                rows.append([peer, str(entry["n"]), f"FAILED: {entry['error'][:150]}"])
                continue
            run_, bare, work = entry["running"], entry["bare_fork"], entry["running"]["worker"]
            rows.append([
                peer, str(entry["n"]), f"{run_['start']['worker_ready_s']:.1f}",
                f"{run_['start']['all_running_s']:.3f}",
                f"{mib(run_['tasks']['pss_median'])} / {mib(run_['tasks']['uss_median'])}",
                f"{mib(bare['pss_median'])} / {mib(bare['uss_median'])}",
                f"{entry['pss_ratio']:.2f} ({entry['uss_ratio']:.1f})",
                f"{mib(work['rss'])} ({mib(work['rss_per_task'])})",
                f"{work['fds']} ({work['fds_per_task']:.2f})",
                f"{work['threads']} ({work['threads_per_task']:.2f})",
                f"{run_['redis']['per_s']:.1f}", f"{run_['redis']['per_s_per_1000_tasks']:.0f}",
                f"{entry['pickup']['p50_ms']:.2f} / {entry['pickup']['p99_ms']:.2f}",
                f"{entry['seconds']['total']:.0f}"])
    widths = [max(len(row[i]) for row in [headers, *rows] if len(row) == len(headers))
              for i in range(len(headers))]
    lines = [" | ".join(cell.ljust(widths[i]) for i, cell in enumerate(row))
             for row in [headers, *rows]]
    lines.insert(1, "-+-".join("-" * width for width in widths))
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--levels", default="1,2,50,500",
                        help="comma-separated levels (default 1,2,50,500)")
    parser.add_argument("--window", type=float, default=60.0,
                        help="seconds of the Redis window (default 60)")
    parser.add_argument("--probes", type=int, default=20, help="pickup probes (default 20)")
    parser.add_argument("--quick", action="store_true", help="shorter settling pauses")
    parser.add_argument("--output", type=Path, default=RESULTS, help="the JSON file to write")
    args = parser.parse_args(argv)
    if not valid_levels(args.levels):
        parser.error(f"--levels: positive whole numbers, comma separated, not {args.levels!r}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    levels = [int(part) for part in args.levels.split(",")]
    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGHUP, interrupted)
    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    began = time.monotonic()
    if not become_subreaper():
        log("could not become a subreaper: orphaned task processes are reaped by PID 1")
    workdir = Path(tempfile.mkdtemp(prefix="blueque-many-peers-redis-"))
    server = None
    try:
        server = EmbeddedRedis(persistence=False, directory=str(workdir)).start()
        redis_version = redis.Redis.from_url(server.url).info("server")["redis_version"]
        results = measure_peers(levels, server.url, args.window, args.probes, args.quick)
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    venvs = {peer: " ".join(run.PEERS[peer]["requirements"]) for peer in PEERS}
    report = {"meta": {"started": started, "levels": levels, "window": args.window,
                       "probes": args.probes, "quick": args.quick,
                       "elapsed_s": round(time.monotonic() - began, 1),
                       "redis_version": redis_version, "requirements": venvs,
                       "machine": f"{os.cpu_count()} cores, "
                                  f"{psutil.virtual_memory().total // MIB} MiB, "
                                  f"{platform.system()} {platform.machine()}, "
                                  f"Python {platform.python_version()}"},
              "peers": results}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=1) + "\n")
    print(table(results))
    return 1 if any("error" in entry for levels_ in results.values() for entry in levels_) else 0


if __name__ == "__main__":
    sys.exit(main())
