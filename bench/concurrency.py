#!/usr/bin/env python3
"""Many tasks at once: what one limpyd-blueque worker costs per running task (issue 13, item 1).

    python3 bench/concurrency.py                  # levels 1, 2, 50, 500 (a few minutes)
    python3 bench/concurrency.py --quick          # levels 1 and 2, short windows (smoke run)
    python3 bench/concurrency.py --levels 1,50    # chosen levels
    python3 bench/concurrency.py --window 10      # another Redis window (seconds)
    python3 bench/concurrency.py --no-peers       # without RQ and Celery (bench/many_peers.py)

One private redis-server (`EmbeddedRedis`, no persistence, in a temporary directory
removed at the end), and for each level N, with every worker setting at its default
except those named:

1. **Running**: one `blueque-worker --fork --concurrency N` process (the task
   `concurrency_tasks.sleep_task`, imported through `--pythonpath bench`), idle, then N
   sleeping tasks enqueued in one `enqueue_many` call. Measured: the time from that call
   to N tasks in the started set (polled every 5 ms) and to N task bodies running (each
   task pushes its start time); then PSS and USS of every task process (psutil's
   `memory_full_info`, which reads /proc/<pid>/smaps_rollup), the worker's own RSS,
   descriptors and threads, and `INFO commandstats` deltas over a window (default 60 s:
   a whole number of lease renewals, every 20 s by default, and of light cleans, every
   30 s; a 10-second window holds 0 or 1 renewal) while all N run and nothing else
   talks to Redis. The worker and its task processes are then killed.
2. **Bare fork**: a Python process that imported the same modules (`limpyd_blueque`,
   its command line, the task module) forks N children that only wait; their median
   PSS and USS are the floor a task process is compared with (the same number of
   processes share the same pages, so PSS compares like with like).
3. **Pickup**: a worker with `--concurrency N+1` runs N sleeping tasks; one task that
   does not sleep is enqueued, `--probes` times, each once the previous one is done;
   latency = the time its body starts (pushed by the task) minus the time just before
   the enqueue call. Same machine, same clock.

Results: `bench/results/concurrency.json` (every figure, per level) and a table on
stdout. Every process started here runs in a process group of its own and carries a
token in its environment; all are killed (SIGKILL) at the end of each phase, on errors,
on Ctrl-C and on SIGTERM, the task processes too (this process becomes their
subreaper, so it also reaps them).
"""

from __future__ import annotations

import argparse
import ctypes
import datetime as dt
import gc
import importlib
import json
import math
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import psutil
import redis
from strays import kill_marked

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
RESULTS = BENCH / "results" / "concurrency.json"
sys.path.insert(0, str(REPO))  # the work tree's library, as bench/run.py uses it

from limpyd_blueque import Queue, Worker, __version__, use_redis  # noqa: E402
from limpyd_blueque.connection.embedded import EmbeddedRedis  # noqa: E402

QUEUE = "bench_concurrency"
CALLBACK = "concurrency_tasks.sleep_task"
BEGAN = "bench:began"  # the long tasks push the time their body starts here
PROBED = "bench:probe"  # and the pickup probes here
LONG_SLEEP = 86_400  # longer than any measurement: the tasks are killed at its end
TOKEN_VAR = "BENCH_CONCURRENCY_TOKEN"
#: what the reference process imports: what a task process of the worker has imported
REFERENCE_MODULES = ("limpyd_blueque", "limpyd_blueque.cli", "concurrency_tasks")
FULL = {"levels": [1, 2, 50, 500], "window": 60.0, "probes": 20, "settle": 2.0}
QUICK = {"levels": [1, 2], "window": 10.0, "probes": 10, "settle": 1.0}
#: issue #28: PSS and pickup at N=500 (the highest level); the Redis load, an earlier issue's
TARGETS = {"pss_ratio_max": 2.0, "cmds_per_s_per_1000_max": 50.0, "pickup_p99_ms_max": 10.0}
MIB = 1024 * 1024
#: seconds of the peers' Redis window: RQ's per-job heartbeats come every 30 s
PEER_WINDOW = 30.0
#: forks timed in the reference process (each child exits at once)
FORK_SAMPLES = 30
#: the calls of a script by a client; every other command counted runs inside one
SCRIPT_COMMANDS = {"eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"}
#: a task process's memory until one is measured (bytes): what the memory check assumes
DEFAULT_PROCESS_COST = 16 * MIB


def log(message: str) -> None:
    print(f"[concurrency {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile (p99 of 20 samples is their maximum)."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, math.ceil(fraction * len(ordered)) - 1))]


def worker_script() -> str:
    """The `blueque-worker` script of this interpreter (not a pyenv shim in front of it)."""
    beside = Path(sys.executable).parent / "blueque-worker"
    found = str(beside) if beside.exists() else shutil.which("blueque-worker")
    if not found:
        raise SystemExit("no blueque-worker script: pip install -e . first")
    return found


def tail(path: Path, size: int = 600) -> str:
    try:
        return path.read_text(errors="replace")[-size:].strip()
    except OSError:
        return ""


# -- processes ---------------------------------------------------------------------------
def become_subreaper() -> bool:
    """Orphaned task processes (their worker killed) become children of this process,
    which can then reap them, whatever PID 1 does."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0  # CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def wait_gone(pids: set[int], timeout: float = 10.0) -> set[int]:
    """Wait until `pids` are gone, reaping those that are (or become) our children; the
    pids still there after `timeout` seconds."""
    deadline, left = time.monotonic() + timeout, set(pids)
    while left and time.monotonic() < deadline:
        for pid in list(left):
            try:
                if os.waitpid(pid, os.WNOHANG)[0]:
                    left.discard(pid)
                    continue
            except ChildProcessError:
                pass
            try:
                process = psutil.Process(pid)
                if process.status() == psutil.STATUS_ZOMBIE and process.ppid() != os.getpid():
                    left.discard(pid)  # dead, another parent's to reap
            except psutil.NoSuchProcess:
                left.discard(pid)
        if left:
            time.sleep(0.02)
    return left


def kill_group(pid: int) -> None:
    """SIGKILL the group `pid` leads (each task process leads one), else `pid` alone."""
    try:
        os.killpg(pid, signal.SIGKILL)
        return
    except (ProcessLookupError, PermissionError):
        pass
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class Processes:
    """Every process this run starts, each in a group of its own, with the run's token."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.token = uuid.uuid4().hex
        self.running: list[subprocess.Popen[bytes]] = []

    def start(self, args: list[str], name: str, **options: Any) -> subprocess.Popen[bytes]:
        env = {**os.environ, TOKEN_VAR: self.token, "PYTHONUNBUFFERED": "1"}
        with open(self.workdir / f"{name}.log", "ab") as err:
            process = subprocess.Popen(args, env=env, stderr=err, start_new_session=True,
                                       stdout=options.pop("stdout", err), **options)
        self.running.append(process)
        return process

    def kill(self, process: subprocess.Popen[bytes]) -> None:
        """SIGKILL `process`, its group, and every descendant (task processes run in
        sessions of their own), then reap them."""
        try:
            descendants = {child.pid for child in psutil.Process(process.pid).children(True)}
        except psutil.NoSuchProcess:
            descendants = set()
        kill_group(process.pid)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        for pid in descendants:
            kill_group(pid)
        descendants |= self.kill_strays()
        left = wait_gone(descendants)
        if left:
            log(f"processes still there after SIGKILL: {sorted(left)}")
        if process in self.running:
            self.running.remove(process)

    def kill_strays(self) -> set[int]:
        """SIGKILL, by pid, whatever still carries this run's token; their pids."""
        return kill_marked(f"{TOKEN_VAR}={self.token}".encode())

    def kill_all(self) -> None:
        for process in list(self.running):
            self.kill(process)
        wait_gone(self.kill_strays())


# -- measurements ------------------------------------------------------------------------
def memory_of(pids: list[int]) -> dict[str, Any]:
    """Median PSS, USS and RSS of processes (bytes), and the sums (smaps_rollup)."""
    infos = []
    for pid in pids:
        try:
            infos.append(psutil.Process(pid).memory_full_info())
        except psutil.NoSuchProcess:
            continue
    if not infos:
        raise RuntimeError(f"none of {len(pids)} processes could be measured")
    figures: dict[str, Any] = {"processes": len(infos)}
    for name in ("pss", "uss", "rss"):
        values = [getattr(info, name) for info in infos]
        figures[f"{name}_median"] = statistics.median(values)
        figures[f"{name}_sum"] = sum(values)
    return figures


def private_by_mapping(pid: int, top: int = 8) -> dict[str, int]:
    """Private memory (bytes) of one process by mapping, largest first: "[heap]",
    "[stack]", "[anon]" (anonymous: Python's arenas, thread stacks, malloc arenas), or a
    file's name. What a task process has of its own, and where."""
    sizes: dict[str, int] = {}
    name = "[anon]"
    with open(f"/proc/{pid}/smaps") as smaps:
        for line in smaps:
            head = line.split()
            if "-" in head[0] and not head[0].endswith(":"):  # a mapping's first line
                name = os.path.basename(head[5]) if len(head) > 5 else "[anon]"
            elif head[0] in ("Private_Clean:", "Private_Dirty:"):
                sizes[name] = sizes.get(name, 0) + int(head[1]) * 1024
    ranked = sorted(sizes.items(), key=lambda item: -item[1])
    return {**dict(ranked[:top]), "other": sum(size for _, size in ranked[top:])}


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds a process has used (not its children)."""
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def worker_resources(pid: int, n: int) -> dict[str, Any]:
    """The worker process's own memory, descriptors and threads, and each per task."""
    process = psutil.Process(pid)
    info = process.memory_full_info()
    figures = {"rss": info.rss, "pss": info.pss, "uss": info.uss, "fds": process.num_fds(),
               "threads": process.num_threads(), "children": len(process.children())}
    for name in ("rss", "fds", "threads"):
        figures[f"{name}_per_task"] = figures[name] / n
    return figures


def command_deltas(before: dict[str, Any], after: dict[str, Any]) -> dict[str, int]:
    """Calls per command between two `INFO commandstats` (the harness's INFO left out)."""
    deltas = {}
    for name, stats in after.items():
        command = name.removeprefix("cmdstat_")
        calls = stats["calls"] - before.get(name, {}).get("calls", 0)
        if calls and command != "info":
            deltas[command] = calls
    return dict(sorted(deltas.items(), key=lambda item: -item[1]))


def redis_window(client: redis.Redis, window: float, n: int) -> dict[str, Any]:
    """Commands per second while the N tasks run and nothing else talks to Redis."""
    clients = client.info("clients")["connected_clients"]
    before, began = client.info("commandstats"), time.monotonic()
    time.sleep(window)
    after, elapsed = client.info("commandstats"), time.monotonic() - began
    deltas = command_deltas(before, after)
    per_s = sum(deltas.values()) / elapsed
    scripts = sum(calls for name, calls in deltas.items() if name in SCRIPT_COMMANDS)
    return {"window_s": elapsed, "commands": sum(deltas.values()), "per_s": per_s,
            "per_s_per_1000_tasks": per_s * 1000 / n, "script_calls_per_s": scripts / elapsed,
            "per_command_per_s": {name: calls / elapsed for name, calls in deltas.items()},
            "connected_clients": clients}


def fit_line(points: list[tuple[float, float]]) -> tuple[float, float] | None:
    """Least squares `y = a + b x`: (a, b), or None with fewer than two distinct x."""
    if len({x for x, _ in points}) < 2:
        return None
    mean_x = statistics.fmean(x for x, _ in points)
    mean_y = statistics.fmean(y for _, y in points)
    slope = (sum((x - mean_x) * (y - mean_y) for x, y in points)
             / sum((x - mean_x) ** 2 for x, _ in points))
    return mean_y - slope * mean_x, slope


class Bench:
    """The phases of one level, on one private Redis."""

    def __init__(self, cfg: dict[str, Any], processes: Processes, url: str) -> None:
        self.cfg = cfg
        self.processes = processes
        self.url = url
        self.client = redis.Redis.from_url(url, decode_responses=True)
        use_redis(url)
        self.keys = Queue.keys()
        self.started_key = self.keys.started(QUEUE)
        self.process_cost = DEFAULT_PROCESS_COST

    def queue(self) -> Queue:
        return Queue.named(QUEUE)

    def wait_for(self, what: str, done: Callable[[], bool], timeout: float,
                 worker: subprocess.Popen[bytes] | None = None, every: float = 0.005) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if worker is not None and worker.poll() is not None:
                raise RuntimeError(f"the worker exited (code {worker.returncode}) waiting for "
                                   f"{what}: {tail(self.processes.workdir / 'worker.log')}")
            if done():
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out after {timeout:g} s waiting for {what}")
            time.sleep(every)

    # -- the worker ----------------------------------------------------------------------
    def start_worker(self, concurrency: int) -> subprocess.Popen[bytes]:
        """`blueque-worker --fork --concurrency <concurrency>`, idle and ready (registered,
        its spare process forked). `--max-loops` only so that no level stops it early."""
        self.client.flushall()
        worker = self.processes.start(
            [worker_script(), "--pythonpath", str(BENCH), "--redis-url", self.url,
             "--queues", QUEUE, "--callback", CALLBACK, "--concurrency", str(concurrency),
             "--fork", "--max-loops", str(10**9), "--logger-level", "WARNING"], "worker")

        def ready() -> bool:
            return (self.client.zcard(self.keys.workers) > 0
                    and self.client.scard(self.keys.listeners(QUEUE)) > 0
                    and len(psutil.Process(worker.pid).children()) > 0)
        self.wait_for("the worker to start", ready, 60, worker, every=0.05)
        time.sleep(0.3)
        return worker

    def start_tasks(self, n: int, worker: subprocess.Popen[bytes]) -> dict[str, float]:
        """Enqueue N sleeping tasks at once; seconds until all are started, and running."""
        params = [{"sleep": LONG_SLEEP, "stamp": BEGAN}] * n
        queue, timeout = self.queue(), 60 + n * 0.5
        cpu = cpu_seconds(worker.pid), self.redis_cpu()
        began = time.time()
        queue.enqueue_many(params)
        self.wait_for(f"{n} tasks started", lambda: self.client.scard(self.started_key) >= n,
                      timeout, worker)
        seen = time.time() - began
        self.wait_for(f"{n} task bodies", lambda: self.client.llen(BEGAN) >= n, timeout, worker,
                      every=0.01)
        bodies = sorted(float(stamp) - began for stamp in self.client.lrange(BEGAN, 0, -1))
        all_started = max(self.started_at()) - began
        # CPU spent meanwhile (polling included for Redis): who is busy while tasks start
        return {"all_started_s": all_started, "all_started_seen_by_polling_s": seen,
                "all_running_s": bodies[-1], "first_running_s": bodies[0],
                "median_running_s": statistics.median(bodies), "started_per_s": n / all_started,
                "worker_cpu_s": cpu_seconds(worker.pid) - cpu[0],
                "redis_cpu_s": self.redis_cpu() - cpu[1]}

    def redis_cpu(self) -> float:
        info = self.client.info("cpu")
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])

    def started_at(self) -> list[float]:
        """When each started task was reserved and started (`started_at`, the worker's
        clock, which is this machine's)."""
        with self.client.pipeline(transaction=False) as pipe:
            for member in self.client.smembers(self.started_key):
                pipe.hget(self.keys.task(member.split()[2]), "started_at")
            return [float(value) for value in pipe.execute()]

    def task_pids(self) -> list[int]:
        """The pids of the started tasks (members "<listener> <pid> <task id>")."""
        return [int(member.split()[1]) for member in self.client.smembers(self.started_key)]

    # -- the phases ----------------------------------------------------------------------
    def running(self, n: int) -> dict[str, Any]:
        """Phase 1: start N tasks, measure them, the worker, and Redis over the window."""
        worker = self.start_worker(n)
        try:
            result: dict[str, Any] = {"start": self.start_tasks(n, worker)}
            time.sleep(self.cfg["settle"])
            pids = self.task_pids()
            result["tasks"] = {**memory_of(pids), "private_of_one": private_by_mapping(pids[0])}
            self.process_cost = max(DEFAULT_PROCESS_COST // 4, result["tasks"]["uss_median"])
            result["worker"] = worker_resources(worker.pid, n)
            spares = [child.pid for child in psutil.Process(worker.pid).children()
                      if child.pid not in pids]  # forked ahead, waiting for its task
            result["spare"] = memory_of(spares[:1]) if spares else None
            result["redis"] = self.redis_window(n)
            if worker.poll() is not None or len(self.task_pids()) != n:
                raise RuntimeError("the worker or some of its tasks stopped during the window")
            return result
        finally:
            self.processes.kill(worker)

    def redis_window(self, n: int) -> dict[str, Any]:
        return redis_window(self.client, self.cfg["window"], n)

    def bare_fork(self, n: int, talk: bool = False) -> dict[str, Any]:
        """Phase 2: median memory of N children forked by a process that imported the
        same modules, doing nothing (with `talk`: each made one Redis round trip with
        redis-py first, the least a task process that uses Redis does); and how long one
        fork of that process takes."""
        reference = self.processes.start(
            [sys.executable, str(Path(__file__).resolve()), "--reference-children", str(n),
             *(["--reference-redis", self.url] if talk else [])],
            "reference", stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        try:
            assert reference.stdout is not None
            line = reference.stdout.readline()
            if not line:
                raise RuntimeError("the reference process failed: "
                                   + tail(self.processes.workdir / "reference.log"))
            time.sleep(self.cfg["settle"])
            made = json.loads(line)
            pids = made["pids"]
            return {**memory_of(pids), "private_of_one": private_by_mapping(pids[0]),
                    "modules": list(REFERENCE_MODULES), "fork_ms": made["fork_ms"]}
        finally:
            self.processes.kill(reference)

    def bare_fork_redis(self, n: int) -> dict[str, Any]:
        """Phase 2b: as `bare_fork`, each child having made one Redis round trip."""
        return self.bare_fork(n, talk=True)

    def pickup(self, n: int) -> dict[str, Any]:
        """Phase 3: concurrency N+1, N running; `probes` short tasks, one at a time."""
        worker = self.start_worker(n + 1)
        try:
            self.start_tasks(n, worker)
            time.sleep(self.cfg["settle"])
            queue, samples = self.queue(), []
            for _ in range(self.cfg["probes"]):
                self.wait_for("the previous probe to end",
                              lambda: self.client.scard(self.started_key) <= n, 10, worker)
                time.sleep(0.1)  # its slot freed, its successor spare forked
                began = time.time()
                queue.enqueue({"sleep": 0, "stamp": PROBED})
                got = self.client.blpop([PROBED], timeout=10)
                if got is None:
                    raise RuntimeError("a probe task did not start within 10 s")
                samples.append((float(got[1]) - began) * 1000)
            return {"p50_ms": statistics.median(samples), "p99_ms": percentile(samples, 0.99),
                    "max_ms": max(samples), "samples_ms": samples, "concurrency": n + 1}
        finally:
            self.processes.kill(worker)

    # -- one level -----------------------------------------------------------------------
    def fits(self, n: int) -> int:
        """The largest level up to `n` whose processes fit in 80% of the available memory
        (task processes and bare children, each costing what the last level measured)."""
        available = psutil.virtual_memory().available * 0.8
        return max(1, min(n, int(available // (2 * self.process_cost))))

    def level(self, asked: int) -> dict[str, Any]:
        n = self.fits(asked)
        result: dict[str, Any] = {"n": n}
        if n < asked:
            result["capped_from"] = asked
            log(f"level {asked} capped to {n}: not enough memory for {asked} processes")
        try:
            for phase, measure in (("running", self.running), ("bare_fork", self.bare_fork),
                                   ("bare_fork_redis", self.bare_fork_redis),
                                   ("pickup", self.pickup)):
                log(f"N={n}: {phase}")
                result[phase] = measure(n)
            result["pss_ratio"] = (result["running"]["tasks"]["pss_median"]
                                   / result["bare_fork"]["pss_median"])
            result["pss_ratio_redis"] = (result["running"]["tasks"]["pss_median"]
                                         / result["bare_fork_redis"]["pss_median"])
            result["uss_ratio"] = (result["running"]["tasks"]["uss_median"]
                                   / result["bare_fork"]["uss_median"])
        except Exception as error:  # noqa: BLE001 - recorded; the next level goes on
            result["error"] = f"{type(error).__name__}: {error}"
            log(f"N={n}: FAILED: {result['error']}")
        finally:
            self.processes.kill_all()
        return result


# -- the bare fork reference -------------------------------------------------------------
def reference_children(n: int, url: str | None = None) -> int:
    """Import what a task process has imported, time a fork of this process (the child
    exits at once), fork N children that only wait (each first makes one Redis round trip
    when `url` is given), print their pids and the fork time, and kill them when stdin
    closes."""
    sys.path.insert(0, str(BENCH))
    for module in REFERENCE_MODULES:
        importlib.import_module(module)
    gc.collect()
    gc.freeze()  # as the worker does before it forks
    times = []
    for _ in range(FORK_SAMPLES):
        began = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        times.append(time.perf_counter() - began)
        os.waitpid(pid, 0)
    pids = []
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            if url:
                redis.Redis.from_url(url).ping()
            while True:
                signal.pause()
        pids.append(pid)
    print(json.dumps({"pids": pids, "fork_ms": statistics.median(times) * 1000}), flush=True)
    sys.stdin.read()
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    for pid in pids:
        os.waitpid(pid, 0)
    return 0


# -- the report --------------------------------------------------------------------------
def targets(levels: list[dict[str, Any]]) -> dict[str, Any]:
    """Each target of the issue, met or missed, from the levels measured."""
    ok = [level for level in levels if "error" not in level]
    if not ok:
        return {}
    top = max(ok, key=lambda level: level["n"])
    at_top = f"N={top['n']}" + ("" if top["n"] >= 500 else " (the target is for N=500)")
    per_1000 = top["running"]["redis"]["per_s_per_1000_tasks"]
    fit = fit_line([(level["n"], level["running"]["redis"]["per_s"]) for level in ok])
    result: dict[str, Any] = {
        "pss_ratio": {"value": top["pss_ratio"], "max": TARGETS["pss_ratio_max"], "at": at_top,
                      "met": top["pss_ratio"] <= TARGETS["pss_ratio_max"]},
        "redis_per_1000_tasks": {"value": per_1000, "max": TARGETS["cmds_per_s_per_1000_max"],
                                 "at": f"N={top['n']}",
                                 "met": per_1000 < TARGETS["cmds_per_s_per_1000_max"]},
        "pickup_p99": {"value": top["pickup"]["p99_ms"], "max": TARGETS["pickup_p99_ms_max"],
                       "at": at_top,
                       "met": top["pickup"]["p99_ms"] < TARGETS["pickup_p99_ms_max"]},
    }
    if fit is not None:
        fixed, per_task = fit
        result["redis_fit"] = {"per_worker_per_s": fixed, "per_running_task_per_s": per_task,
                               "one_worker_1000_tasks_per_s": fixed + 1000 * per_task}
    return result


def mib(value: float) -> str:
    return f"{value / MIB:.1f}"


def table(levels: list[dict[str, Any]], goals: dict[str, Any]) -> str:
    headers = ["N", "all started (s)", "all running (s)", "task PSS/USS (MiB)",
               "bare fork PSS/USS", "bare fork + 1 Redis call", "PSS ratio (USS)",
               "worker RSS MiB (/task)", "fds (/task)",
               "threads (/task)", "Redis cmds/s", "per 1,000 tasks", "pickup p50/p99 (ms)"]
    rows = []
    for level in levels:
        if "error" in level:
            rows.append([str(level["n"]), f"FAILED: {level['error'][:150]}"])
            continue
        run, bare, work = level["running"], level["bare_fork"], level["running"]["worker"]
        rows.append([
            str(level["n"]) + (f" (asked {level['capped_from']})" if "capped_from" in level
                               else ""),
            f"{run['start']['all_started_s']:.3f}", f"{run['start']['all_running_s']:.3f}",
            f"{mib(run['tasks']['pss_median'])} / {mib(run['tasks']['uss_median'])}",
            f"{mib(bare['pss_median'])} / {mib(bare['uss_median'])}",
            f"{mib(level['bare_fork_redis']['pss_median'])} / "
            f"{mib(level['bare_fork_redis']['uss_median'])}",
            f"{level['pss_ratio']:.2f} (USS {level['uss_ratio']:.1f})",
            f"{mib(work['rss'])} ({mib(work['rss_per_task'])})",
            f"{work['fds']} ({work['fds_per_task']:.2f})",
            f"{work['threads']} ({work['threads_per_task']:.2f})",
            f"{run['redis']['per_s']:.1f}", f"{run['redis']['per_s_per_1000_tasks']:.0f}",
            f"{level['pickup']['p50_ms']:.2f} / {level['pickup']['p99_ms']:.2f}"])
    widths = [max(len(row[i]) for row in [headers, *rows] if i < len(row))
              for i in range(len(headers))]
    lines = [" | ".join(cell.ljust(widths[i]) for i, cell in enumerate(row))
             for row in [headers, *rows]]
    lines.insert(1, "-+-".join("-" * width for width in widths))
    return "\n".join([*lines, "", *target_lines(levels, goals)])


def target_lines(levels: list[dict[str, Any]], goals: dict[str, Any]) -> list[str]:
    lines = []
    for name in ("pss_ratio", "redis_per_1000_tasks", "pickup_p99"):
        if name in goals:
            goal = goals[name]
            lines.append(f"target {name}: {goal['value']:.2f} ({goal['at']}), limit "
                         f"{goal['max']:g}: {'met' if goal['met'] else 'MISSED'}")
    fit = goals.get("redis_fit")
    if fit:
        lines.append(f"Redis load fit: {fit['per_worker_per_s']:.1f} commands/s per worker + "
                     f"{fit['per_running_task_per_s']:.2f} per running task "
                     f"(one worker, 1,000 tasks: {fit['one_worker_1000_tasks_per_s']:.0f}/s)")
    ok = [level for level in levels if "error" not in level]
    if ok:
        top = max(ok, key=lambda level: level["n"])
        busiest = list(top["running"]["redis"]["per_command_per_s"].items())[:8]
        lines.append(f"commands/s by command at N={top['n']} (Lua-inner included): "
                     + ", ".join(f"{name} {rate:.1f}" for name, rate in busiest))
    return lines


def meta(cfg: dict[str, Any], quick: bool, started: str) -> dict[str, Any]:
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "limpyd_blueque"], cwd=REPO,
                           capture_output=True, text=True).stdout.strip()
    return {"started": started, "quick": quick, **cfg, "limpyd_blueque": __version__,
            "commit": commit, "library_dirty": bool(dirty),
            "machine": f"{os.cpu_count()} cores, {psutil.virtual_memory().total // MIB} MiB, "
                       f"{platform.system()} {platform.machine()}, "
                       f"Python {platform.python_version()}",
            "worker_settings": {"ttr": Worker.ttr, "heartbeat_interval": "ttr / 3",
                                "liveness_interval": Worker.liveness_interval,
                                "schedule_interval": Worker.schedule_interval,
                                "clean_interval": "ttr / 2", "fork": True,
                                "max_loops": "1e9 (only so no level stops the worker)"},
            "targets": TARGETS}


# -- main --------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="levels 1 and 2, a 10-second Redis window (smoke run)")
    parser.add_argument("--levels", help="comma-separated concurrency levels "
                                         "(default 1,2,50,500; --quick: 1,2)")
    parser.add_argument("--window", type=float,
                        help="seconds of the Redis window (default 60; --quick: 10)")
    parser.add_argument("--probes", type=int, help="pickup probes per level (default 20)")
    parser.add_argument("--output", type=Path, default=RESULTS, help="the JSON file to write")
    parser.add_argument("--no-peers", action="store_true",
                        help="limpyd-blueque only (no RQ and Celery, bench/many_peers.py)")
    parser.add_argument("--reference-children", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--reference-redis", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.levels and not valid_levels(args.levels):
        parser.error(f"--levels: positive whole numbers, comma separated, not {args.levels!r}")
    return args


def valid_levels(text: str) -> bool:
    """True for levels such as '1,2,50': positive whole numbers, comma separated."""
    return all(part.strip().isdigit() and int(part) > 0 for part in text.split(","))


def interrupted(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.reference_children is not None:
        return reference_children(args.reference_children, args.reference_redis)
    cfg = dict(QUICK if args.quick else FULL)
    if args.levels:
        cfg["levels"] = [int(part) for part in args.levels.split(",")]
    cfg.update({key: value for key, value in (("window", args.window), ("probes", args.probes))
                if value is not None})
    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGHUP, interrupted)
    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    if not become_subreaper():
        log("could not become a subreaper: orphaned task processes are reaped by PID 1")
    workdir = Path(tempfile.mkdtemp(prefix="blueque-concurrency-"))
    processes, server, levels = Processes(workdir), None, []
    peers: dict[str, list[dict[str, Any]]] = {}
    try:
        (workdir / "redis").mkdir()
        server = EmbeddedRedis(persistence=False, directory=str(workdir / "redis")).start()
        bench = Bench(cfg, processes, server.url)
        redis_version = bench.client.info("server")["redis_version"]
        for n in cfg["levels"]:
            levels.append(bench.level(n))
        processes.kill_all()
        if not args.no_peers:  # RQ and Celery, same levels, same Redis (flushed), same task
            from many_peers import measure_peers
            peers = measure_peers(cfg["levels"], server.url, min(cfg["window"], PEER_WINDOW),
                                  cfg["probes"], args.quick)
    finally:
        processes.kill_all()
        if server is not None:
            server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    goals = targets(levels)
    report = {"meta": {**meta(cfg, args.quick, started), "redis_version": redis_version},
              "levels": levels, "targets": goals, "peers": peers}
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=1) + "\n")
    print(table(levels, goals))
    if peers:
        from many_peers import table as peers_table
        print("\n" + peers_table(peers))
    return 1 if any("error" in level for level in levels) else 0


if __name__ == "__main__":
    sys.exit(main())
