#!/usr/bin/env python3
"""Benchmark limpyd-blueque against the task queues users would pick instead.

    python3 bench/run.py                  # full run (3 repetitions, 1M-task scaling test)
    python3 bench/run.py --quick          # smoke run, under 2 minutes
    python3 bench/run.py --repetitions 5  # more repetitions

A full run also runs bench/concurrency.py (many tasks at once, with its peers) and then
writes docs/benchmarks.rst (bench/docs_page.py): one command gives every figure and every
target's status.

Each peer lives in its own virtualenv (`bench/.venvs/<peer>`, pinned versions from
PyPI, made once and reused) and is driven by its adapter `bench/peers/<peer>.py`, run
by that venv's python: one JSON request in argv, one JSON line out. All peers share
one private redis-server without persistence, started here and stopped on exit.
Repetitions interleave the peers (repetition 1: every peer, repetition 2: every
peer, ...), in a rotated order. Results: stdout, `bench/results/latest.md`, every raw
figure in `bench/results/latest.json`, and `docs/_static/bench.png` (bench/plot.py).
See bench/README.md for what each figure means.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime as dt
import hashlib
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

from strays import kill_marked

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
VENVS = BENCH / ".venvs"
LOGS = BENCH / ".logs"
RESULTS = BENCH / "results"
PNG = REPO / "docs" / "_static" / "bench.png"
CONCURRENCY_PNG = REPO / "docs" / "_static" / "concurrency.png"
LB = "limpyd_blueque"

# -- what is compared --------------------------------------------------------------------
# requirements are pinned; the full `pip freeze` of each venv lands in the JSON
NEWEST_REDIS = "redis==8.1.0"
PEERS: dict[str, dict] = {
    LB: {"requirements": [NEWEST_REDIS, "-e", str(REPO)], "scaling": True},
    "floor": {"requirements": [NEWEST_REDIS], "scaling": True},
    "blueque": {"requirements": ["blueque==1.0.1", "redis==5.3.1"], "scaling": True},
    "rq": {"requirements": ["rq==3.0.0", NEWEST_REDIS]},
    "celery": {"requirements": ["celery[redis]==5.7.0", "kombu==5.7.0", NEWEST_REDIS]},
    "dramatiq": {"requirements": ["dramatiq[redis]==2.2.1", NEWEST_REDIS]},
    "huey": {"requirements": ["huey==3.5.4", NEWEST_REDIS]},
    "limpyd_jobs": {"requirements": ["redis-limpyd-jobs==2", "redis-limpyd==2.1.2",
                                     "redis-limpyd-extensions==2.1", NEWEST_REDIS]},
}
PLOT_VENV = {"requirements": ["matplotlib==3.11.2"]}

# (peer, mode, kind, label): kind says which rows a limpyd-blueque row is compared with
ROWS = [
    (LB, "worker-inprocess", "in-process", "limpyd-blueque Worker (in-process)"),
    (LB, "worker-fork", "fork", "limpyd-blueque Worker (fork per task)"),
    (LB, "worker-fork2", "fork", "limpyd-blueque Worker (fork per task, concurrency 2)"),
    ("floor", "inprocess", "in-process", "floor: Blueque by hand, 1 Lua script/step"),
    ("blueque", "listen", "in-process", "blueque 1.0.1 (listen loop)"),
    ("blueque", "fork", "fork", "blueque 1.0.1 (ForkingRunner)"),
    ("rq", "simple", "in-process", "RQ (SimpleWorker)"),
    ("rq", "fork", "fork", "RQ (Worker, fork per job)"),
    ("celery", "solo", "in-process", "Celery (solo pool)"),
    ("dramatiq", "threads1", "in-process", "Dramatiq (1 worker thread)"),
    ("huey", "thread1", "in-process", "Huey (RedisHuey, 1 thread)"),
    ("limpyd_jobs", "worker", "in-process", "redis-limpyd-jobs (Worker)"),
]

# key, label, unit, better, scope ("producer": any peer compares; "worker": same kind)
FIGURES = [
    ("enqueue_per_s", "enqueue, one call at a time", "tasks/s", "higher", "producer"),
    ("enqueue_bulk_per_s", "enqueue, bulk API", "tasks/s", "higher", "producer"),
    ("drain_per_s", "drain, one worker process", "tasks/s", "higher", "worker"),
    ("latency_p50_ms", "pickup latency p50", "ms", "lower", "worker"),
    ("latency_p99_ms", "pickup latency p99", "ms", "lower", "worker"),
    ("mem_pending_bytes", "Redis memory per pending task", "B", "lower", "producer"),
    ("mem_finished_bytes", "Redis memory per finished task kept", "B", "lower", "worker"),
    ("mem_pending_keys_bytes", "MEMORY USAGE of all keys per pending task", "B", "lower",
     "producer"),
    ("mem_finished_keys_bytes", "MEMORY USAGE of all keys per finished task kept", "B", "lower",
     "worker"),
    ("cmds_enqueue", "commands per enqueue (all, Lua-inner included)", "", "lower", "producer"),
    ("usec_enqueue", "Redis server time per enqueue", "µs", "lower", "producer"),
    ("scripts_enqueue", "eval/evalsha per enqueue", "", "lower", "producer"),
    ("client_cmds_enqueue", "client-issued commands per enqueue", "", "lower", "producer"),
    ("rt_enqueue", "network round trips per enqueue", "", "lower", "producer"),
    ("cmds_worker", "commands per task, worker side (all)", "", "lower", "worker"),
    ("usec_worker", "Redis server time per task, worker side", "µs", "lower", "worker"),
    ("scripts_worker", "eval/evalsha per task, worker side", "", "lower", "worker"),
    ("client_cmds_worker", "client-issued commands per task, worker side", "", "lower", "worker"),
    ("rt_worker", "network round trips per task, worker side", "", "lower", "worker"),
    ("rt_bulk", "network round trips per task, bulk enqueue", "", "lower", "producer"),
]
FIGURE = {f[0]: f for f in FIGURES}
# counts of eval/evalsha are no cost in themselves (most peers use no script): no ratio
NO_RATIO = {"scripts_enqueue", "scripts_worker"}

FULL = {"n": 2000, "latency_n": 50, "latency_idle": 1.0, "count_sizes": [40, 200],
        "repetitions": 3, "scaling_sizes": [1000, 1_000_000], "scaling_ops": 500,
        "steps_n": 200, "cpu_sizes": [100, 400]}
QUICK = {"n": 200, "latency_n": 10, "latency_idle": 0.5, "count_sizes": [10, 40],
         "repetitions": 1, "scaling_sizes": [1000, 50_000], "scaling_ops": 100,
         "steps_n": 50, "cpu_sizes": [30, 120]}
TIMEOUTS = {"throughput": 300, "latency": 120, "count": 300, "scaling": 900, "options": 300,
            "steps": 240, "cpu": 600}
ACTIONS = ("throughput", "latency", "count")
#: measurements of some rows only: the Redis work of each step of a plain task
#: (`measure_steps`: the steps do not depend on the worker's mode), and the CPU of a
#: forked task against a bare fork (`measure_fork_cpu`)
ROW_ACTIONS = {(LB, "worker-inprocess"): ("steps",), ("floor", "inprocess"): ("steps",),
               (LB, "worker-fork"): ("cpu",)}


def actions_of(peer: str, mode: str) -> tuple[str, ...]:
    """The measurements of one row, in the order they run."""
    return ACTIONS + ROW_ACTIONS.get((peer, mode), ())


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- virtualenvs -------------------------------------------------------------------------
def venv_python(name: str) -> Path:
    return VENVS / name / "bin" / "python"


def venv_stamp(name: str, spec: dict) -> dict:
    stamp = {"requirements": spec["requirements"], "python": sys.version}
    if name == LB:  # reinstall when the package's own requirements change
        stamp["setup.py"] = hashlib.sha256((REPO / "setup.py").read_bytes()).hexdigest()
    return stamp


def ensure_venv(name: str, spec: dict) -> dict:
    """Create `bench/.venvs/<name>` with the pinned requirements, unless it is up to date."""
    target = VENVS / name
    stamp_file = target / "bench-stamp.json"
    stamp = venv_stamp(name, spec)
    if stamp_file.exists():
        saved = json.loads(stamp_file.read_text())
        if saved.get("stamp") == stamp and venv_python(name).exists():
            return {"reused": True, "freeze": saved["freeze"]}
    shutil.rmtree(target, ignore_errors=True)
    log_file = LOGS / f"venv-{name}.log"
    with open(log_file, "w") as out:
        subprocess.run([sys.executable, "-m", "venv", str(target)], check=True, stdout=out,
                       stderr=subprocess.STDOUT)
        done = subprocess.run([str(venv_python(name)), "-m", "pip", "install",
                               "--disable-pip-version-check", *spec["requirements"]],
                              stdout=out, stderr=subprocess.STDOUT)
    if done.returncode:
        tail = log_file.read_text()[-1500:]
        raise RuntimeError(f"pip install failed for {name}: {tail}")
    freeze = subprocess.run([str(venv_python(name)), "-m", "pip", "freeze",
                             "--disable-pip-version-check"], capture_output=True,
                            text=True).stdout.split()
    stamp_file.write_text(json.dumps({"stamp": stamp, "freeze": freeze}, indent=1))
    return {"reused": False, "freeze": freeze}


def ensure_venvs(names: list[str]) -> dict:
    specs = {name: PEERS.get(name, PLOT_VENV) for name in names}
    status: dict = {}
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        futures = {pool.submit(ensure_venv, name, spec): name for name, spec in specs.items()}
        for future in concurrent.futures.as_completed(futures):
            name = futures[future]
            try:
                status[name] = {"ok": True, **future.result()}
                log(f"venv {name}: {'reused' if status[name]['reused'] else 'installed'}")
            except Exception as error:
                status[name] = {"ok": False, "error": f"{type(error).__name__}: {error}"}
                log(f"venv {name}: FAILED ({error})")
    return status


def last_line(path: Path) -> str:
    """The last non-blank line of a log (the exception of a traceback)."""
    try:
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "no log"
    return (lines[-1].strip() if lines else "empty log") + f" (see bench/.logs/{path.name})"


def git_state() -> dict:
    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)
        return done.stdout.strip()
    return {"commit": git("rev-parse", "HEAD"),
            "library_dirty": bool(git("status", "--porcelain", "--", "limpyd_blueque", "setup.py"))}


# -- processes ---------------------------------------------------------------------------
class Runner:
    """Runs adapters; owns the Redis server and every process group it started."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.server = None
        self.current: subprocess.Popen | None = None

    def start_redis(self) -> None:
        sys.path.insert(0, str(REPO))
        from limpyd_blueque.connection.embedded import EmbeddedRedis

        self.server = EmbeddedRedis(persistence=False).start()
        log(f"redis-server {self.server.binary} on port {self.server.port}")

    def redis_info(self) -> dict:
        import redis
        client = redis.Redis(port=self.server.port)
        info = client.info("server")
        client.close()
        return {"redis_version": info.get("redis_version"), "binary": self.server.binary,
                "persistence": False}

    def ensure_redis(self) -> None:
        if self.server.process.poll() is not None:
            log("redis-server died: starting a new one")
            self.server.stop()
            self.start_redis()

    def run(self, peer: str, request: dict, label: str, entry: list[str] | None = None) -> dict:
        """Run `<venv python> -m peers.<peer> measure <request>` (or `<venv python> *entry
        <request>`) and return its JSON result."""
        self.ensure_redis()
        request = {**request, "host": "127.0.0.1", "port": self.server.port,
                   "url": self.server.url, "queue": f"bench_{peer}"}
        env = {k: v for k, v in os.environ.items() if not k.startswith("BENCH_")}
        env.update(PYTHONPATH=str(BENCH), PYTHONUNBUFFERED="1", BENCH_TOKEN=self.token,
                   BENCH_LOG_DIR=str(LOGS), BENCH_LABEL=label, BENCH_TMP=str(LOGS),
                   BENCH_REDIS_HOST="127.0.0.1", BENCH_REDIS_PORT=str(self.server.port))
        started = time.monotonic()
        with open(LOGS / f"{label}-adapter.log", "ab") as err:
            self.current = subprocess.Popen(
                [str(venv_python(peer)), *(entry or ["-m", f"peers.{peer}", "measure"]),
                 json.dumps(request)],
                cwd=BENCH, env=env, stdout=subprocess.PIPE, stderr=err,
                stdin=subprocess.DEVNULL, start_new_session=True)
            try:
                out, _ = self.current.communicate(timeout=TIMEOUTS[request["action"]])
                lines = out.decode(errors="replace").strip().splitlines()
                result = json.loads(lines[-1]) if lines else {
                    "ok": False, "error": f"no result (exit code {self.current.returncode}): "
                                          f"{last_line(LOGS / f'{label}-adapter.log')}"}
            except subprocess.TimeoutExpired:
                result = {"ok": False, "error": f"timed out after {TIMEOUTS[request['action']]} s"}
            except json.JSONDecodeError as error:
                result = {"ok": False, "error": f"unreadable result: {error}"}
            finally:
                self.kill_current()
        result["seconds"] = round(time.monotonic() - started, 2)
        return result

    def kill_current(self) -> None:
        if self.current is not None:
            try:
                os.killpg(self.current.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                self.current.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            self.current = None
        self.reap_strays()

    def reap_strays(self) -> None:
        """Kill, by pid, any process left that carries this run's token in its environment
        (workers and the task children some peers move to a session of their own)."""
        kill_marked(f"BENCH_TOKEN={self.token}".encode())

    def close(self) -> None:
        self.kill_current()
        if self.server is not None:
            self.server.stop()
            self.server = None


# -- task options (limpyd-blueque only) ---------------------------------------------------
# `run.py options '<json>'`, run by the limpyd-blueque venv, measures in one process, each
# pair back to back (the order swapped every other repetition): N enqueues one call at a
# time, plain and with `priority=5` and an identifier of its own; the same with the bulk
# API; the drain of N tasks by one in-process worker, all at priority 0 and at priorities
# 0, 5, 10 mixed. In the mixed drain, task `n` is the n-th to run (priority, then enqueue
# order), so that the drain marks of task 0 and task N-1 are the first and the last.
OPTIONS_FIGURES = [("enqueue", "enqueue, one call at a time", "plain", "priority=5 + identifier"),
                   ("bulk", "enqueue, bulk API", "plain", "priority=5 + identifier"),
                   ("drain", "drain, one in-process worker", "priority 0", "priorities 0/5/10")]


def measure_options(cfg: dict) -> dict:
    from peers._common import END_KEY, START_KEY, WorkerProcess, control, payload, wait_list

    from limpyd_blueque import Queue, use_redis

    ctl, n = control(cfg), cfg["n"]
    use_redis(cfg["url"])

    def fresh() -> Queue:
        ctl.flushall()
        return Queue.named(cfg["queue"])

    warm = fresh()  # the connection and the script cache, outside every timing
    warm.enqueue(payload(-1))
    warm.enqueue(payload(-2), priority=5, identifier="warm-up")
    warm.enqueue_many([payload(-3)])

    def enqueue(options: bool) -> float:
        queue, params = fresh(), [payload(i) for i in range(n)]
        extras = [{"priority": 5, "identifier": f"t{i}"} if options else {} for i in range(n)]
        started = time.perf_counter()
        for value, extra in zip(params, extras):
            queue.enqueue(value, **extra)
        return n / (time.perf_counter() - started)

    def bulk(options: bool) -> float:
        queue, params = fresh(), [payload(i) for i in range(n)]
        extra = {"priority": 5, "options": [{"identifier": f"t{i}"} for i in range(n)]}
        started = time.perf_counter()
        queue.enqueue_many(params, **(extra if options else {}))
        return n / (time.perf_counter() - started)

    def drain(options: bool) -> float:
        queue = fresh()
        priorities = [(0, 5, 10)[i % 3] if options else 0 for i in range(n)]
        order = sorted(range(n), key=lambda i: (-priorities[i], i))
        rank = {task: position for position, task in enumerate(order)}
        queue.enqueue_many([payload(rank[i]) for i in range(n)],
                           options=[{"priority": p} for p in priorities])
        worker = WorkerProcess("peers.limpyd_blueque", "worker-inprocess", cfg,
                               {"BENCH_MARKS": "drain", "BENCH_N": n}, f"drain-{options}")
        try:
            start = float(wait_list(ctl, START_KEY, 1, 60, worker)[0])
            end = float(wait_list(ctl, END_KEY, 1, 300, worker)[0])
            left = queue.counts()["pending"]
        finally:
            worker.stop()
        if left:
            raise RuntimeError(f"{left} task(s) still pending after the last one ran")
        return (n - 1) / (end - start)

    figures: dict = {}
    for name, measure in (("enqueue", enqueue), ("bulk", bulk), ("drain", drain)):
        for options in ((True, False) if cfg.get("swap") else (False, True)):
            figures[f"{name}_{'options' if options else 'plain'}_per_s"] = measure(options)
        figures[f"{name}_ratio"] = figures[f"{name}_options_per_s"] / figures[f"{name}_plain_per_s"]
    ctl.flushall()
    return {"figures": figures}


def options_child(request: str) -> int:
    """`run.py options '<json>'`: one line of JSON on stdout, as the adapters print."""
    import traceback

    try:
        result = {"ok": True, **measure_options(json.loads(request))}
    except Exception as error:  # noqa: BLE001 - reported to the harness, as the adapters do
        traceback.print_exc()
        result = {"ok": False, "error": f"{type(error).__name__}: {error}"[:2000]}
    print(json.dumps(result), flush=True)
    return 0


# -- summaries ---------------------------------------------------------------------------
def spread(values: list[float]) -> dict | None:
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "n": len(values)}


def row_key(peer: str, mode: str) -> str:
    return f"{peer}/{mode}"


def collect(runs: list[dict], rows: list[tuple]) -> tuple[dict, dict]:
    """Per row and figure: the value of each repetition, and the summary over them (every
    figure of `FIGURES`, None when not measured, and every other figure the row's
    measurements gave, such as those of `ROW_ACTIONS`)."""
    per_rep: dict = {}
    for run in runs:
        if not run.get("ok") or run["action"] == "scaling":
            continue
        key = row_key(run["peer"], run["mode"])
        for figure, value in run.get("figures", {}).items():
            per_rep.setdefault(key, {}).setdefault(figure, {})[run["repetition"]] = value
    summary = {}
    for p, m, _, _ in rows:
        mine = per_rep.get(row_key(p, m), {})
        summary[row_key(p, m)] = {fig: spread(list(mine.get(fig, {}).values()))
                                  for fig in [*FIGURE, *(f for f in mine if f not in FIGURE)]}
    return per_rep, summary


def ratios(per_rep: dict, rows: list[tuple], repetitions: int) -> dict:
    """Each limpyd-blueque figure over the best peer's in the same repetition."""
    kinds = {row_key(p, m): kind for p, m, kind, _ in rows}
    out: dict = {}
    for peer, mode, kind, _ in rows:
        if peer != LB:
            continue
        mine = per_rep.get(row_key(peer, mode), {})
        for figure, (_, _, _, better, scope) in FIGURE.items():
            if figure in NO_RATIO:
                continue
            versus_best, best_names, versus_floor = [], [], []
            for rep in range(1, repetitions + 1):
                value = mine.get(figure, {}).get(rep)
                if value is None:
                    continue
                rivals = {}
                for key, figures in per_rep.items():
                    if key.startswith(LB + "/") or key.startswith("floor/"):
                        continue
                    if scope == "worker" and kinds.get(key) != kind:
                        continue
                    rival = figures.get(figure, {}).get(rep)
                    if rival is not None and rival > 0:
                        rivals[key] = rival
                if rivals:
                    pick = max if better == "higher" else min
                    best = pick(rivals, key=rivals.get)
                    versus_best.append(value / rivals[best])
                    best_names.append(best)
                floor = per_rep.get("floor/inprocess", {}).get(figure, {}).get(rep)
                if floor:
                    versus_floor.append(value / floor)
            out.setdefault(row_key(peer, mode), {})[figure] = {
                "vs_best_peer": statistics.median(versus_best) if versus_best else None,
                "per_repetition": versus_best,
                "best_peer": max(set(best_names), key=best_names.count) if best_names else None,
                "vs_floor": statistics.median(versus_floor) if versus_floor else None,
            }
    return out


# -- tables ------------------------------------------------------------------------------
def fmt(value: float | None) -> str:
    if value is None:
        return "–"
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:,.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    if magnitude == 0:
        return "0"
    return f"{value:.3f}"


def cell(stats: dict | None) -> str:
    if stats is None:
        return "–"
    if stats["n"] > 1 and fmt(stats["min"]) != fmt(stats["max"]):
        return f"{fmt(stats['median'])} ({fmt(stats['min'])}–{fmt(stats['max'])})"
    return fmt(stats["median"])


def table(headers: list[str], body: list[list[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in body]
    return "\n".join(lines)


#: the per-step table: the row whose `steps` figures give each step of a peer, and the
#: worker rows whose drains (the `count` measurement) give that peer's totals per task
STEP_TABLE = {
    row_key(LB, "worker-inprocess"): ("limpyd-blueque", [row_key(LB, "worker-inprocess"),
                                                         row_key(LB, "worker-fork")]),
    row_key("floor", "inprocess"): ("floor", [row_key("floor", "inprocess")]),
}
STEP_LABELS = (("enqueue", "enqueue"), ("reserve", "reserve + start"), ("complete", "complete"))
#: the columns of the per-step table: the step's figure, the drain's figure
STEP_COLUMNS = (("cmds", "cmds_worker"), ("client", "client_cmds_worker"),
                ("scripts", "scripts_worker"), ("lua", "lua_cmds_worker"), ("usec", "usec_worker"))


def median_of(figures: dict, key: str) -> float | None:
    """The median of a figure of a row's summary (None: not measured)."""
    stats = figures.get(key)
    return stats["median"] if stats else None


def script_commands(report: dict, row: str, step: str, top: int = 6) -> str:
    """The commands the scripts of `step` run, per task, most frequent first (last
    repetition measured), e.g. "hget 3, hset 1"."""
    runs = [run for run in report["runs"] if run["action"] == "steps" and run.get("ok")
            and row_key(run["peer"], run["mode"]) == row]
    if not runs:
        return ""
    counts = [(name[4:], calls) for name, calls in
              runs[-1]["raw"][step]["by_command_per_task"].items() if name.startswith("lua:")]
    shown = ", ".join(f"{name} {fmt(calls)}" for name, calls in counts[:top])
    return shown + (f", {len(counts) - top} more" if len(counts) > top else "")


def beyond_steps(steps: dict, totals: dict) -> list[float | None]:
    """What a worker sends per task beyond its reserve and complete steps, per column of
    `STEP_COLUMNS` (None: not measured): the drain's medians minus the steps'. Its server
    time is its client-issued commands at the drain's mean server time per client-issued
    command: the steps run back to back, the worker at its own pace, and a server kept
    busier runs each command faster, so the two times do not subtract."""
    values: dict[str, float | None] = {}
    for column, total in STEP_COLUMNS:
        parts = [median_of(totals, total), median_of(steps, f"step_reserve_{column}"),
                 median_of(steps, f"step_complete_{column}")]
        values[column] = None if None in parts else parts[0] - parts[1] - parts[2]
    usec, sent = median_of(totals, "usec_worker"), median_of(totals, "client_cmds_worker")
    values["usec"] = (values["client"] * usec / sent
                      if values["client"] is not None and usec is not None and sent else None)
    return [values[column] for column, _ in STEP_COLUMNS]


def step_section(report: dict, labels: dict) -> list[str]:
    """The per-step table (markdown lines; none when no step was measured): for each
    peer of `STEP_TABLE`, each step of a plain task, then each worker's drain per task and
    what it sends beyond the reserve and complete steps."""
    summary, body = report["summary"], []
    for steps_row, (name, drain_rows) in STEP_TABLE.items():
        steps = summary.get(steps_row, {})
        if median_of(steps, "step_enqueue_cmds") is None:
            continue
        for step, label in STEP_LABELS:
            body.append([name, label] + [cell(steps.get(f"step_{step}_{column}"))
                                         for column, _ in STEP_COLUMNS]
                        + [script_commands(report, steps_row, step)])
        for drain_row in drain_rows:
            totals = summary.get(drain_row, {})
            if median_of(totals, "cmds_worker") is None:
                continue
            body.append([name, f"drain by {labels[drain_row]}, per task"]
                        + [cell(totals.get(total)) for _, total in STEP_COLUMNS] + [""])
            body.append([name, "… of which beyond reserve + complete"]
                        + [fmt(value) if value is not None else "–"
                           for value in beyond_steps(steps, totals)] + [""])
    if not body:
        return []
    n = report["meta"]["sizes"].get("steps_n")
    return ["", "## Redis work per step of a plain task", "",
            f"Steps: {n} plain tasks run step by step by the adapter (`measure_steps`): "
            "commands per task from `INFO commandstats` around each step (those scripts run "
            "included), sent by the client and run by scripts from MONITOR, server time = the "
            "usec of what the client sent (a script's usec holds the commands it runs). "
            "Drains: the worker itself (`measure_counts`), per task = difference between two "
            "drain sizes; the row after each is what the worker sends beyond the two steps "
            "(medians subtracted; its server time: its client-issued commands at the drain's "
            "mean per client-issued command, since the steps run back to back and the worker "
            "at its own pace, and a busier server runs each command faster).", "",
            table(["peer", "step", "commands (all)", "sent by the client", "of which scripts",
                   "run by scripts", "server time (µs)", "commands the scripts run, per task"],
                  body)]


def fork_cpu_section(report: dict) -> list[str]:
    """The CPU split of a forked task against a bare fork (markdown lines; none when not
    measured)."""
    figures = report["summary"].get(row_key(LB, "worker-fork"), {})
    if median_of(figures, "cpu_forked_task_ms") is None:
        return []
    small, large = report["meta"]["sizes"]["cpu_sizes"]
    body = [["limpyd-blueque Worker (fork per task), no-op task"]
            + [cell(figures.get(key)) for key in ("cpu_worker_ms", "cpu_task_process_ms",
                                                  "cpu_forked_task_ms")],
            ["bare fork of the same worker process, child exits at once"]
            + [cell(figures.get(key)) for key in ("cpu_bare_parent_ms", "cpu_bare_child_ms",
                                                  "cpu_bare_fork_ms")]]
    return ["", "## CPU per forked task", "",
            f"getrusage of the worker process after draining {small} and then {large} no-op "
            "tasks: RUSAGE_SELF (the worker, every thread) and RUSAGE_CHILDREN (its task "
            f"processes, reaped); per task = difference / {large - small}. Bare fork: each of "
            "those worker processes, once stopped, forks as many children as it ran tasks, "
            "each exiting at once and reaped before the next, same accounting.", "",
            table(["process", "worker side (ms/task)", "task process side (ms/task)",
                   "total (ms/task)"], body), "",
            f"Forked task / bare fork: {cell(figures.get('cpu_vs_bare_fork'))}."]


def markdown(report: dict, rows: list[tuple]) -> str:
    meta, summary = report["meta"], report["summary"]
    labels = {row_key(p, m): label for p, m, _, label in rows}
    failures = report["failures"]
    parts = [
        "# limpyd-blueque and its peers",
        "",
        f"Run {meta['started']} ({'quick' if meta['quick'] else 'full'}), "
        f"{meta['repetitions']} repetition(s), interleaved; "
        f"{meta['sizes']['n']} tasks per drain, {meta['sizes']['latency_n']} latency samples "
        f"{int(meta['latency_gap'] * 1000)} ms apart; redis-server {meta['redis']['redis_version']} "
        f"without persistence; {meta['machine']}. No-op tasks, payload `{{\"n\": i, \"s\": \"x\"}}`. "
        "Cells: median (min–max over repetitions). See bench/README.md.",
        "",
        "## Speed",
        "",
    ]

    def figure_table(keys: list[str]) -> str:
        headers = ["peer"] + [f"{FIGURE[k][1]}" + (f" ({FIGURE[k][2]})" if FIGURE[k][2] else "")
                              + (" ↑" if FIGURE[k][3] == "higher" else " ↓") for k in keys]
        body = []
        for p, m, _, _ in rows:
            key = row_key(p, m)
            if key in failures and all(summary[key][k] is None for k in keys):
                body.append([labels[key]] + ["failed"] * len(keys))
                continue
            body.append([labels[key]] + [cell(summary[key][k]) for k in keys])
        return table(headers, body)

    parts.append(figure_table(["enqueue_per_s", "enqueue_bulk_per_s", "drain_per_s",
                               "latency_p50_ms", "latency_p99_ms"]))
    parts += ["", "## Redis memory", "",
              figure_table(["mem_pending_bytes", "mem_finished_bytes", "mem_pending_keys_bytes",
                            "mem_finished_keys_bytes"]),
              "", "## Commands and round trips per task", "",
              figure_table(["cmds_enqueue", "scripts_enqueue", "client_cmds_enqueue", "rt_enqueue",
                            "rt_bulk", "usec_enqueue"]),
              "", figure_table(["cmds_worker", "scripts_worker", "client_cmds_worker", "rt_worker",
                                "usec_worker"])]
    parts += step_section(report, labels) + fork_cpu_section(report)

    parts += ["", "## limpyd-blueque against the best peer", "",
              "Ratio = limpyd-blueque / best peer of the same repetition (median over "
              "repetitions); worker-side figures compare with peers of the same kind "
              "(in-process or fork per task); the floor is left out of \"best peer\" and "
              "shown apart. ↑: higher is better (ratio > 1 wins); ↓: lower is better "
              "(ratio < 1 wins).", ""]
    body = []
    for figure, (_, label, unit, better, _) in FIGURE.items():
        if figure in NO_RATIO:
            continue
        line = [f"{label} {'↑' if better == 'higher' else '↓'}"]
        for p, m, _, _ in rows:
            if p != LB:
                continue
            entry = report["ratios"].get(row_key(p, m), {}).get(figure, {})
            if entry.get("vs_best_peer") is None:
                line.append("–")
            else:
                line.append(f"{entry['vs_best_peer']:.2f} (best: "
                            f"{labels.get(entry['best_peer'], entry['best_peer'])})")
            line.append(f"{entry['vs_floor']:.2f}" if entry.get("vs_floor") else "–")
        body.append(line)
    headers = ["figure"]
    for p, m, _, _ in rows:
        if p == LB:
            headers += [f"{labels[row_key(p, m)]} vs best peer", "vs floor"]
    parts.append(table(headers, body))

    scaling = report.get("scaling", {})
    if scaling:
        parts += ["", "## Scaling: cost per operation with many tasks pending", "",
                  "Measured once. Each operation timed alone from Python (client included), "
                  "median of "
                  f"{meta['sizes']['scaling_ops']} (p90 in brackets); reserve and complete "
                  "alternate, as a worker does. The queue is first filled by a pipelined "
                  "insert of the Blueque layout (the three peers share it); fill rate and "
                  "memory are of that insert.", ""]
        body = []
        names = {LB: "limpyd-blueque", "floor": "floor", "blueque": "blueque 1.0.1"}
        for peer, result in scaling.items():
            if not result.get("ok"):
                body.append([names.get(peer, peer), "failed: " + result.get("error", "")[:80]]
                            + [""] * 5)
                continue
            for entry in result["raw"]["scaling"]:
                body.append([names.get(peer, peer), f"{entry['pending']:,}", fmt(entry["fill_per_s"]),
                             fmt(entry["mem_pending_bytes"]),
                             f"{fmt(entry['enqueue_us'])} ({fmt(entry['enqueue_p90_us'])})",
                             f"{fmt(entry['reserve_us'])} ({fmt(entry['reserve_p90_us'])})",
                             f"{fmt(entry['complete_us'])} ({fmt(entry['complete_p90_us'])})"])
        parts.append(table(["peer", "pending tasks", "fill (tasks/s)", "memory per pending (B)",
                            "enqueue (µs)", "reserve (µs)", "complete (µs)"], body))
        raw = scaling.get(LB, {}).get("raw", {})
        lb = raw.get("error_filter_100k")
        if lb is not None:
            parts += ["", "Error filtering by date, 100 matching errors (limpyd-blueque, median of "
                      f"30): {fmt(lb['value'])} ms among 100k stored errors, "
                      f"{fmt(lb['at_1k'])} ms among 1k (storing them with `Error.add_errors`: "
                      f"{fmt(raw['error_store_100000_s'])} s for 100k)."]

    options = report.get("options", {}).get("summary")
    if options:
        parts += ["", "## Task options (limpyd-blueque)", "",
                  "Measured in one process per repetition, each pair back to back (order "
                  "swapped every other repetition); ratio = with options / without, "
                  "per repetition, then the median.", ""]
        body = [[label, f"{base}: {cell(options[f'{name}_plain_per_s'])}",
                 f"{other}: {cell(options[f'{name}_options_per_s'])}",
                 cell(options[f"{name}_ratio"])]
                for name, label, base, other in OPTIONS_FIGURES]
        parts.append(table(["figure (tasks/s)", "without options", "with options", "ratio"],
                           body))

    parts += ["", "## Failures", ""]
    if failures:
        for key, errors in failures.items():
            for error in errors:
                parts.append(f"- `{key}`: {error}")
    else:
        parts.append("None.")
    parts += ["", "## Versions", "",
              "Pinned requirements of each venv (the full `pip freeze` of each is in the "
              "JSON, `meta.venvs`); limpyd-blueque is the work tree at commit "
              f"`{meta['limpyd_blueque_tree']['commit'][:12]}`"
              + (" with uncommitted changes to the library" if meta["limpyd_blueque_tree"]
                 ["library_dirty"] else "") + ".", ""]
    venvs = report["meta"]["venvs"]
    for name in [*PEERS, "plot"]:
        if name not in venvs:
            continue
        pins = " ".join(PEERS.get(name, PLOT_VENV)["requirements"]).replace(str(REPO), "<repo>")
        parts.append(f"- {name}: `{pins}`" + ("" if venvs[name].get("ok") else " — venv FAILED"))
    return "\n".join(parts) + "\n"


# -- main --------------------------------------------------------------------------------
def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="short smoke run (< 2 minutes)")
    parser.add_argument("--repetitions", type=int, help="repetitions (default 3; --quick: 1)")
    parser.add_argument("--peers", help="comma-separated peers to run (default: all)")
    parser.add_argument("--no-scaling", action="store_true", help="skip the scaling test")
    parser.add_argument("--no-options", action="store_true",
                        help="skip the task options scenario (limpyd-blueque)")
    parser.add_argument("--no-plot", action="store_true", help="do not draw the PNG")
    parser.add_argument("--no-concurrency", action="store_true",
                        help="skip the many-tasks-at-once benchmark (bench/concurrency.py)")
    return parser.parse_args(argv)


def run_concurrency(quick: bool) -> dict:
    """bench/concurrency.py, in a process of its own (its own private Redis): many
    sleeping tasks at once, limpyd-blueque and its peers. Its JSON is read back."""
    output = RESULTS / "concurrency.json"
    began = time.monotonic()
    done = subprocess.run([sys.executable, str(BENCH / "concurrency.py"), "--output", str(output),
                           *(["--quick"] if quick else [])])
    log(f"concurrency: exit {done.returncode} ({time.monotonic() - began:.0f} s)")
    if not output.exists():
        return {"ok": False, "error": f"bench/concurrency.py exited with {done.returncode} "
                                      "and wrote nothing"}
    report = json.loads(output.read_text())
    return {"ok": done.returncode == 0, "report": report,
            **({} if done.returncode == 0 else
               {"error": f"bench/concurrency.py exited with {done.returncode}"})}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = dict(QUICK if args.quick else FULL)
    repetitions = args.repetitions or sizes["repetitions"]
    if repetitions < 1:
        raise SystemExit("--repetitions must be at least 1")
    wanted = set(args.peers.split(",")) if args.peers else set(PEERS)
    unknown = wanted - set(PEERS)
    if unknown:
        raise SystemExit(f"unknown peer(s): {', '.join(sorted(unknown))}")
    rows = [row for row in ROWS if row[0] in wanted]
    LOGS.mkdir(parents=True, exist_ok=True)
    for old in [*LOGS.glob("*.log"), *LOGS.glob("bench-rt-*")]:
        if not old.name.startswith("venv-"):
            old.unlink()

    def interrupted(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGHUP, interrupted)
    began = time.monotonic()
    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    runner = Runner(uuid.uuid4().hex)
    runs: list[dict] = []
    scaling: dict = {}
    options_runs: list[dict] = []
    try:
        venvs = ensure_venvs(sorted(wanted) + ([] if args.no_plot else ["plot"]))
        log(f"venvs ready in {time.monotonic() - began:.0f} s")
        runner.start_redis()
        meta = {
            "started": started, "quick": args.quick, "repetitions": repetitions,
            "sizes": {k: v for k, v in sizes.items() if k != "repetitions"},
            "latency_gap": 0.05, "redis": runner.redis_info(), "venvs": venvs,
            "limpyd_blueque_tree": git_state(),
            "machine": f"{os.cpu_count()} cores, {platform.system()} {platform.machine()}, "
                       f"Python {platform.python_version()}",
        }
        request_base = {**meta["sizes"], "latency_gap": meta["latency_gap"]}
        for rep in range(1, repetitions + 1):
            shift = (rep - 1) % len(rows)
            for peer, mode, kind, label in rows[shift:] + rows[:shift]:
                for action in actions_of(peer, mode):
                    tag = f"r{rep}-{peer}-{mode}-{action}"
                    if not venvs[peer]["ok"]:
                        result = {"ok": False, "error": "venv: " + venvs[peer]["error"]}
                    else:
                        result = runner.run(peer, {**request_base, "action": action,
                                                   "mode": mode}, tag)
                    runs.append({"repetition": rep, "peer": peer, "mode": mode,
                                 "action": action, **result})
                    status = "ok" if result.get("ok") else f"FAILED: {result.get('error', '')[:300]}"
                    log(f"rep {rep}/{repetitions} {peer}/{mode} {action}: {status} "
                        f"({result.get('seconds', 0)} s)")
        if not args.no_scaling:
            for peer in PEERS:
                if peer in wanted and PEERS[peer].get("scaling") and venvs[peer]["ok"]:
                    result = runner.run(peer, {**request_base, "action": "scaling"},
                                        f"scaling-{peer}")
                    scaling[peer] = result
                    log(f"scaling {peer}: {'ok' if result.get('ok') else result.get('error')} "
                        f"({result.get('seconds')} s)")
        if LB in wanted and venvs[LB]["ok"] and not args.no_options:
            for rep in range(1, repetitions + 1):
                result = runner.run(LB, {**request_base, "action": "options", "swap": rep % 2 == 0},
                                    f"options-r{rep}", entry=[str(BENCH / "run.py"), "options"])
                options_runs.append({"repetition": rep, **result})
                status = "ok" if result.get("ok") else result.get("error")
                log(f"options {rep}/{repetitions}: {status} ({result.get('seconds')} s)")
    finally:
        runner.close()
    concurrency = {} if args.no_concurrency else run_concurrency(args.quick)
    if not args.no_concurrency:  # what groups cost (issue #30): results/groups.json
        began_groups = time.monotonic()
        done = subprocess.run([sys.executable, str(BENCH / "groups.py"),
                               *(["--quick"] if args.quick else [])])
        log(f"groups: exit {done.returncode} ({time.monotonic() - began_groups:.0f} s)")
        began_workflows = time.monotonic()  # what workflows cost (#31): results/workflows.json
        done = subprocess.run([sys.executable, str(BENCH / "workflows.py"),
                               *(["--quick"] if args.quick else [])])
        log(f"workflows: exit {done.returncode} ({time.monotonic() - began_workflows:.0f} s)")
        began_waiters = time.monotonic()  # producers woken (#31): results/waiters.json
        done = subprocess.run([sys.executable, str(BENCH / "waiters.py"),
                               *(["--quick"] if args.quick else [])])
        log(f"waiters: exit {done.returncode} ({time.monotonic() - began_waiters:.0f} s)")
        began_payloads = time.monotonic()  # codecs and encryption (#33): results/payloads.json
        done = subprocess.run([sys.executable, str(BENCH / "payloads.py"),
                               *(["--quick"] if args.quick else [])])
        log(f"payloads: exit {done.returncode} ({time.monotonic() - began_payloads:.0f} s)")
        began_cost = time.monotonic()  # server instructions per task: results/server_cost.json
        done = subprocess.run([sys.executable, str(BENCH / "server_cost.py"),
                               *(["--tasks", "200"] if args.quick else [])])
        log(f"server cost: exit {done.returncode} ({time.monotonic() - began_cost:.0f} s)")
    per_rep, summary = collect(runs, rows)
    failures: dict = {}
    for run in runs:
        if not run.get("ok"):
            failures.setdefault(row_key(run["peer"], run["mode"]), []).append(
                f"repetition {run['repetition']}, {run['action']}: {run.get('error')}")
    for peer, result in scaling.items():
        if not result.get("ok"):
            failures.setdefault(f"{peer}/scaling", []).append(result.get("error"))
    for run in options_runs:
        if not run.get("ok"):
            failures.setdefault(f"{LB}/options", []).append(
                f"repetition {run['repetition']}: {run.get('error')}")
    if concurrency and not concurrency.get("ok"):
        failures.setdefault(f"{LB}/concurrency", []).append(concurrency.get("error"))
    ok_options = [run["figures"] for run in options_runs if run.get("ok")]
    options = {"runs": options_runs, "summary": {
        key: spread([figures[key] for figures in ok_options]) for key in
        (ok_options[0] if ok_options else {})}}
    meta["finished"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    meta["elapsed_seconds"] = round(time.monotonic() - began, 1)
    meta["rows"] = [{"key": row_key(p, m), "peer": p, "mode": m, "kind": k, "label": label}
                    for p, m, k, label in rows]
    meta["figures"] = [{"key": k, "label": label, "unit": unit, "better": better, "scope": scope}
                       for k, label, unit, better, scope in FIGURES]
    report = {"meta": meta, "summary": summary, "per_repetition": per_rep,
              "ratios": ratios(per_rep, rows, repetitions), "scaling": scaling,
              "options": options, "failures": failures, "runs": runs}
    text = markdown(report, rows)
    write_atomic(RESULTS / "latest.json", json.dumps(report, indent=1, sort_keys=False) + "\n")
    write_atomic(RESULTS / "latest.md", text)
    print(text)
    if not args.no_plot and venvs.get("plot", {}).get("ok"):
        done = subprocess.run([str(venv_python("plot")), str(BENCH / "plot.py"),
                               str(RESULTS / "latest.json"), str(PNG)])
        if concurrency.get("report"):
            done = subprocess.run([str(venv_python("plot")), str(BENCH / "plot.py"),
                                   "--concurrency", str(RESULTS / "concurrency.json"),
                                   str(CONCURRENCY_PNG)])
        if done.returncode:
            log("plot failed")
    if not args.quick and not wanted ^ set(PEERS) and concurrency.get("report"):
        # a full run of every part: the documentation page follows it
        if subprocess.run([sys.executable, str(BENCH / "docs_page.py")]).returncode:
            log("docs/benchmarks.rst: not written (see above)")
    log(f"done in {time.monotonic() - began:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(options_child(sys.argv[2]) if sys.argv[1:2] == ["options"] else main())
