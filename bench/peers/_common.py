"""What every peer adapter shares. Runs inside each peer's own virtualenv.

Only the standard library and redis-py are used here (any redis-py from 5 on), so
that the same file serves peers with conflicting redis-py pins.

The protocol with `bench/run.py`:

    <venv>/bin/python -m peers.<name> measure '<json request>'

prints ONE JSON line on stdout, `{"ok": true, "figures": {...}, "raw": {...}}` or
`{"ok": false, "error": "..."}`; everything else goes to stderr. An adapter that
needs a worker starts it as `python -m peers.<name> worker <mode> '<json>'`, in its
own process group, and stops it before returning.

An adapter module defines `class Peer(BasePeer)` and ends with
`if __name__ == "__main__": main(__spec__.name)`.
"""

from __future__ import annotations

import json
import mmap
import os
import resource
import signal
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
import traceback
import uuid
from typing import Any, Callable

import redis

MARK_PREFIX = "bench:"  # every key and message of the harness itself starts with it
LAT_KEY = "bench:latency"
START_KEY = "bench:drain:start"
END_KEY = "bench:drain:end"
SETTLE = 0.3  # seconds for commands sent without waiting for a reply to reach the server
SCRIPT_COMMANDS = {"eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"}


# -- counting network round trips on the client side ------------------------------------
# With BENCH_RT_FILE set, every write of a command buffer to a Redis socket (one per
# command, one per pipeline) adds 1 to a slot of a shared memory-mapped file, in every
# process of the peer (forked children included). A write is one network round trip:
# each is followed by reading the replies before the next one is sent.
RT_SLOTS = 65536
_rt = {"map": None, "lock": threading.Lock()}


class UncountedConnection(redis.Connection):
    """A connection of the harness itself (control, marks): never counted."""

    bench_uncounted = True


def _rt_add() -> None:
    slot = (os.getpid() % RT_SLOTS) * 8
    with _rt["lock"]:
        value = struct.unpack_from("<Q", _rt["map"], slot)[0]
        struct.pack_into("<Q", _rt["map"], slot, value + 1)


def install_rt_counter(path: str) -> None:
    if _rt["map"] is not None:
        return
    fd = os.open(path, os.O_RDWR)
    _rt["map"] = mmap.mmap(fd, RT_SLOTS * 8, mmap.MAP_SHARED)
    os.close(fd)
    os.register_at_fork(after_in_child=lambda: _rt.__setitem__("lock", threading.Lock()))
    base = getattr(redis.connection, "AbstractConnection", redis.connection.Connection)
    original = base.send_packed_command
    if getattr(original, "bench_wrapped", False):
        return

    def send_packed_command(self, command, *args, **kwargs):
        if not getattr(self, "bench_uncounted", False):
            _rt_add()
        return original(self, command, *args, **kwargs)

    send_packed_command.bench_wrapped = True
    base.send_packed_command = send_packed_command


def make_rt_file() -> str:
    path = os.path.join(os.environ.get("BENCH_TMP", "/tmp"), f"bench-rt-{uuid.uuid4().hex}")
    with open(path, "wb") as handle:
        handle.truncate(RT_SLOTS * 8)
    return path


def rt_total() -> int:
    data = _rt["map"]
    return sum(struct.unpack_from(f"<{RT_SLOTS}Q", data, 0)) if data is not None else 0


if os.environ.get("BENCH_RT_FILE"):
    install_rt_counter(os.environ["BENCH_RT_FILE"])


# -- the task every peer runs ----------------------------------------------------------
_marks: dict = {}


def _mark_client() -> redis.Redis:
    pid = os.getpid()
    if _marks.get("pid") != pid:  # a new client after a fork
        _marks["pid"] = pid
        _marks["client"] = uncounted_client(os.environ["BENCH_REDIS_HOST"],
                                            int(os.environ["BENCH_REDIS_PORT"]))
    return _marks["client"]


def task_body(payload: Any) -> int:
    """The no-op task. Records timestamps only where the harness asks for them.

    BENCH_MARKS=latency: every task pushes [enqueue time, start time] to a list.
    BENCH_MARKS=drain: task 0 pushes its start time, task BENCH_N-1 its end time.
    """
    started = time.time()
    if isinstance(payload, (str, bytes)):
        payload = json.loads(payload)
    n = int(payload["n"])
    marks = os.environ.get("BENCH_MARKS")
    if marks == "latency":
        _mark_client().rpush(LAT_KEY, json.dumps([payload.get("t"), started, n]))
    elif marks == "drain":
        if n == 0:
            _mark_client().rpush(START_KEY, repr(started))
        if n == int(os.environ["BENCH_N"]) - 1:
            _mark_client().rpush(END_KEY, repr(time.time()))
    return n


def payload(i: int, stamp: bool = False) -> dict:
    """The task parameters: a small JSON object (with its enqueue time for latency)."""
    value: dict = {"n": i, "s": "x"}
    if stamp:
        value["t"] = time.time()
    return value


# -- peers -----------------------------------------------------------------------------
class Unsupported(Exception):
    """This peer has no such feature (the figure is recorded as null, with the reason)."""


class BasePeer:
    """What an adapter implements. `cfg` holds host, port, url, queue and the sizes."""

    name = "?"
    #: False when the library keeps nothing once a task is done (in the setup used here)
    keeps_finished = True

    def __init__(self, cfg: dict) -> None:
        self.cfg = cfg
        self.url = cfg["url"]
        self.queue = cfg["queue"]

    # producer side
    def setup(self) -> None:
        """Connect the producer (called again after each FLUSHALL)."""

    def enqueue(self, params: dict) -> Any:
        raise NotImplementedError

    def enqueue_bulk(self, params: list) -> Any:
        raise Unsupported("no bulk enqueue API")

    def pending_count(self) -> int | None:
        return None

    def versions(self) -> dict:
        return {"redis-py": redis.__version__}

    # worker side, in the worker process
    def worker(self, mode: str) -> None:
        raise NotImplementedError

    # scaling (optional; the queue is filled in the Blueque layout by the harness)
    def reserve_one(self) -> Any:
        raise Unsupported("no scaling test for this peer")

    def complete_one(self, handle: Any) -> None:
        raise Unsupported("no scaling test for this peer")

    def extra_scaling(self) -> dict:
        return {}


# -- helpers for adapters --------------------------------------------------------------
def listener_id() -> str:
    """A Blueque listener id, `<host>_<pid>`."""
    return f"{socket.gethostname()}_{os.getpid()}"


class StopFlag:
    """SIGTERM/SIGINT set the flag; while idle (not inside a task) they exit at once."""

    def __init__(self) -> None:
        self.stop = False
        self.busy = False
        signal.signal(signal.SIGTERM, self._handle)
        signal.signal(signal.SIGINT, self._handle)

    def _handle(self, signum, frame) -> None:
        self.stop = True
        if not self.busy:
            raise SystemExit(0)


def uncounted_client(host: str, port: int) -> redis.Redis:
    """A client of the harness itself, never counted as a peer's round trip."""
    pool = redis.ConnectionPool(host=host, port=port, decode_responses=True,
                                connection_class=UncountedConnection)
    return redis.Redis(connection_pool=pool)


def control(cfg: dict) -> redis.Redis:
    return uncounted_client(cfg["host"], cfg["port"])


def used_memory(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def memory(client: redis.Redis) -> tuple[int, int]:
    """`used_memory`, and the sum of `MEMORY USAGE` over every key.

    The second is exact and steady: it leaves out client buffers and the keyspace's
    own hash tables, which make `used_memory` move in steps.
    """
    used = int(client.info("memory")["used_memory"])
    keys = [key for key in client.scan_iter(count=1000) if not key.startswith(MARK_PREFIX)]
    total = 0
    for start in range(0, len(keys), 1000):
        with client.pipeline(transaction=False) as pipe:
            for key in keys[start:start + 1000]:
                pipe.memory_usage(key, samples=0)
            total += sum(size or 0 for size in pipe.execute())
    return used, total


def fill_blueque_layout(client: redis.Redis, queue: str, count: int, batch: int = 10_000) -> None:
    """`count` pending tasks in the Blueque layout (what the Submission step writes:
    hash with status, queue, parameters, created, updated; id pushed on the pending
    list), inserted with pipelines of `batch` tasks."""
    pending = f"blueque_pending_tasks_{queue}"
    for start in range(0, count, batch):
        now = repr(time.time())
        with client.pipeline(transaction=False) as pipe:
            for i in range(start, min(count, start + batch)):
                task_id = str(uuid.uuid4())
                pipe.hset(f"blueque_task_{task_id}", mapping={
                    "status": "pending", "queue": queue,
                    "parameters": json.dumps({"n": i, "s": "x"}, separators=(",", ":")),
                    "created": now, "updated": now})
                pipe.lpush(pending, task_id)
            pipe.zincrby("blueque_queues", 0, queue)
            pipe.execute()


def command_stats(client: redis.Redis) -> dict:
    """`INFO commandstats`: `{command: {"calls": n, "usec": µs}}`, commands run inside
    scripts included (Redis counts them there too, and in the script's own usec)."""
    stats = client.info("commandstats")
    return {key[len("cmdstat_"):]: {"calls": int(value["calls"]), "usec": int(value["usec"])}
            for key, value in stats.items() if key.startswith("cmdstat_")}


class RawCommandStats:
    """`INFO commandstats` on a socket of its own, kept raw until `parse`: a probe between
    two steps that leaves the server idle as briefly as it can (an idle server runs the
    next commands slower: caches go cold)."""

    def __init__(self, cfg: dict) -> None:
        """Connect to the run's Redis (`cfg`: host and port)."""
        self.sock = socket.create_connection((cfg["host"], cfg["port"]))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def sample(self) -> bytes:
        """The reply, unparsed."""
        self.sock.sendall(b"INFO commandstats\r\n")
        data = b""
        while b"\r\n" not in data:
            data += self.sock.recv(65536)
        head, _, body = data.partition(b"\r\n")
        size = int(head[1:])
        while len(body) < size + 2:
            body += self.sock.recv(65536)
        return body[:size]

    @staticmethod
    def parse(raw: bytes) -> dict:
        """A sample as `command_stats` gives it."""
        stats = {}
        for line in raw.decode().splitlines():
            if line.startswith("cmdstat_"):
                name, _, fields = line[len("cmdstat_"):].partition(":")
                values = dict(field.split("=") for field in fields.split(","))
                stats[name] = {"calls": int(values["calls"]), "usec": int(values["usec"])}
        return stats

    def close(self) -> None:
        """Close its socket."""
        self.sock.close()


def stats_delta(before: dict, after: dict) -> dict:
    """What happened between two `command_stats`: the commands called, with calls and usec."""
    delta = {}
    for name, entry in after.items():
        old = before.get(name, {"calls": 0, "usec": 0})
        if entry["calls"] != old["calls"]:
            delta[name] = {"calls": entry["calls"] - old["calls"],
                           "usec": entry["usec"] - old["usec"]}
    return dict(sorted(delta.items()))


def client_calls(seen: dict) -> dict:
    """The commands clients sent themselves in a MONITOR window (`Monitor.summarize`),
    by name: those run inside scripts and those of the harness left out."""
    return {name: calls for name, calls in seen["by_command"].items()
            if not name.startswith("lua:")}


def server_usec(delta: dict, sent: dict) -> float:
    """Server time (µs) of the commands `sent` by clients (`client_calls`), each at the
    mean usec per call of its name in `delta` (`stats_delta`).

    A script call's usec holds the commands it runs, which Redis also counts under their
    own names: counting only what clients sent counts each microsecond once. For a name
    clients send but scripts never run (EVALSHA, most of all) the mean times the calls is
    exactly its usec. EXEC is left out likewise: the commands of a transaction are counted
    under their own names (they show in MONITOR as the client's). `sent` comes from a
    window watched by MONITOR, `delta` from the same sequence run again without it: MONITOR
    costs the server time inside each script, for every command the script runs."""
    total = 0.0
    for name, calls in sent.items():
        entry = delta.get(name)
        if name != "exec" and entry and entry["calls"]:
            total += entry["usec"] / entry["calls"] * calls
    return total


class Monitor:
    """The server's MONITOR stream, read raw in a thread.

    Lines between two ECHO markers form a window. Commands a Lua script runs show as
    `[db lua]`; those of the harness (its control connection, keys `bench:*`) are
    counted apart.
    """

    def __init__(self, cfg: dict, control_client: redis.Redis) -> None:
        self.sock = socket.create_connection((cfg["host"], cfg["port"]))
        self.sock.sendall(b"MONITOR\r\n")
        self.lines: list[bytes] = []
        self.lock = threading.Lock()
        self.closed = False
        self.control = control_client
        info = control_client.client_info()
        self.control_addr = info["addr"].encode()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        buffer = b""
        while not self.closed:
            try:
                chunk = self.sock.recv(1 << 20)
            except OSError:
                return
            if not chunk:
                return
            buffer += chunk
            *complete, buffer = buffer.split(b"\r\n")
            with self.lock:
                self.lines.extend(complete)

    def mark(self) -> bytes:
        token = f"{MARK_PREFIX}marker:{uuid.uuid4().hex}"
        self.control.echo(token)
        return token.encode()

    def window(self, start: bytes, end: bytes, timeout: float = 30.0) -> dict:
        """The summary of the lines between two markers (see `windows`)."""
        return self.windows([(start, end)], timeout)[0]

    def windows(self, pairs: list[tuple[bytes, bytes]], timeout: float = 30.0) -> list[dict]:
        """The summary of each window between markers `(start, end)`, in the order they
        were marked, read in one pass once the last end marker is seen; the lines up to
        it are dropped."""
        last = pairs[-1][1]
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                found = next((i for i in range(len(self.lines) - 1, -1, -1)
                              if last in self.lines[i]), None)
                if found is not None:
                    lines = self.lines[:found + 1]
                    del self.lines[:found + 1]
                    break
            if time.monotonic() > deadline:
                raise TimeoutError("MONITOR marker not seen")
            time.sleep(0.01)
        summaries, position = [], 0
        for start, end in pairs:
            while start not in lines[position]:
                position += 1
            begin = position + 1
            while end not in lines[position]:
                position += 1
            summaries.append(self.summarize(lines[begin:position]))
        return summaries

    def summarize(self, lines: list[bytes]) -> dict:
        client = lua = harness = scripts = 0
        by_command: dict[str, int] = {}
        harness_by_command: dict[str, int] = {}
        for line in lines:
            if not line.startswith(b"+") or b"] " not in line:
                continue
            head, _, command = line.partition(b"] ")
            name = command.split(b" ", 1)[0].strip(b'"').decode(errors="replace").lower()
            origin = head.rsplit(b" ", 1)[-1]
            if origin == self.control_addr or MARK_PREFIX.encode() in command:
                harness += 1
                harness_by_command[name] = harness_by_command.get(name, 0) + 1
                continue
            if origin == b"lua":
                lua += 1
                key = f"lua:{name}"
            else:
                client += 1
                key = name
                if name in SCRIPT_COMMANDS:
                    scripts += 1
            by_command[key] = by_command.get(key, 0) + 1
        return {"client_commands": client, "lua_commands": lua, "scripts": scripts,
                "harness_commands": harness, "harness_by_command": harness_by_command,
                "by_command": dict(sorted(by_command.items()))}

    def close(self) -> None:
        self.closed = True
        try:
            self.sock.close()
        except OSError:
            pass


# -- workers ---------------------------------------------------------------------------
class WorkerProcess:
    """A worker subprocess of this adapter (`python -m <module> worker <mode> <cfg>`)."""

    def __init__(self, module: str, mode: str, cfg: dict, env: dict, label: str) -> None:
        log_dir = os.environ.get("BENCH_LOG_DIR") or "/tmp"
        self.log_path = os.path.join(log_dir, f"{os.environ.get('BENCH_LABEL', module)}-{label}-worker.log")
        full_env = dict(os.environ, **{k: str(v) for k, v in env.items()})
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, "worker", mode, json.dumps(cfg)],
            stdout=self.log, stderr=self.log, stdin=subprocess.DEVNULL, env=full_env,
            start_new_session=True)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self) -> str:
        try:
            with open(self.log_path, "rb") as handle:
                return handle.read()[-1500:].decode(errors="replace")
        except OSError:
            return ""

    def stop(self, grace: float = 8.0) -> None:
        """SIGTERM (a warm shutdown for every peer), then SIGKILL to the whole group."""
        if self.alive():
            try:
                os.kill(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self.log.close()


def wait_list(ctl: redis.Redis, key: str, count: int, timeout: float,
              worker: WorkerProcess | None = None) -> list[str]:
    """Wait until list `key` holds `count` items; raise if the worker dies or time runs out."""
    deadline = time.monotonic() + timeout
    while True:
        if ctl.llen(key) >= count:
            return ctl.lrange(key, 0, -1)
        if worker is not None and not worker.alive():
            raise RuntimeError(f"worker exited with {worker.proc.returncode}: {worker.tail()}")
        if time.monotonic() > deadline:
            extra = f"; worker log: {worker.tail()}" if worker is not None else ""
            raise TimeoutError(f"{key}: {ctl.llen(key)}/{count} after {timeout:.0f}s{extra}")
        time.sleep(0.002)


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


# -- the measurements ------------------------------------------------------------------
def measure_throughput(peer: BasePeer, module: str, mode: str, cfg: dict) -> dict:
    """Enqueue N one at a time, memory, drain N with one worker, memory, bulk enqueue N."""
    ctl = control(cfg)
    n = cfg["n"]
    figures: dict = {}
    raw: dict = {}
    ctl.flushall()
    peer.setup()
    params = [payload(i) for i in range(n)]
    mem0, data0 = memory(ctl)
    started = time.perf_counter()
    for value in params:
        peer.enqueue(value)
    elapsed = time.perf_counter() - started
    mem1, data1 = memory(ctl)
    figures["enqueue_per_s"] = n / elapsed
    figures["mem_pending_bytes"] = (mem1 - mem0) / n
    figures["mem_pending_keys_bytes"] = (data1 - data0) / n
    raw.update(enqueue_seconds=elapsed, used_memory_before=mem0, used_memory_pending=mem1,
               keys_memory_before=data0, keys_memory_pending=data1)

    worker = WorkerProcess(module, mode, cfg, {"BENCH_MARKS": "drain", "BENCH_N": n}, "drain")
    try:
        start = float(wait_list(ctl, START_KEY, 1, cfg.get("start_timeout", 60), worker)[0])
        end = float(wait_list(ctl, END_KEY, 1, cfg.get("drain_timeout", 300), worker)[0])
        raw["pending_after_drain"] = peer.pending_count()
    finally:
        worker.stop()
    figures["drain_per_s"] = (n - 1) / (end - start)
    raw.update(drain_first_start=start, drain_last_end=end)
    time.sleep(0.2)
    mem2, data2 = memory(ctl)
    raw.update(used_memory_finished=mem2, keys_memory_finished=data2)
    if peer.keeps_finished:
        figures["mem_finished_bytes"] = (mem2 - mem0) / n
        figures["mem_finished_keys_bytes"] = (data2 - data0) / n
    else:
        figures["mem_finished_bytes"] = figures["mem_finished_keys_bytes"] = None
        raw["mem_finished_note"] = "keeps no finished task"
        raw["mem_after_drain_per_task"] = (mem2 - mem0) / n

    ctl.flushall()
    peer.setup()
    bulk = [payload(i) for i in range(n)]
    try:
        started = time.perf_counter()
        peer.enqueue_bulk(bulk)
        elapsed = time.perf_counter() - started
        figures["enqueue_bulk_per_s"] = n / elapsed
        raw["enqueue_bulk_seconds"] = elapsed
        raw["pending_after_bulk"] = peer.pending_count()
    except Unsupported as why:
        figures["enqueue_bulk_per_s"] = None
        raw["enqueue_bulk_note"] = str(why)
    ctl.flushall()
    return {"figures": figures, "raw": raw}


def measure_latency(peer: BasePeer, module: str, mode: str, cfg: dict) -> dict:
    """An idle worker; tasks enqueued one by one `gap` apart; enqueue-to-start times."""
    ctl = control(cfg)
    count, gap = cfg["latency_n"], cfg.get("latency_gap", 0.05)
    ctl.flushall()
    peer.setup()
    worker = WorkerProcess(module, mode, cfg, {"BENCH_MARKS": "latency"}, "latency")
    try:
        peer.enqueue(payload(-1, stamp=True))  # warm-up: the worker is up once this ran
        wait_list(ctl, LAT_KEY, 1, cfg.get("start_timeout", 60), worker)
        time.sleep(cfg.get("latency_idle", 1.0))
        ctl.delete(LAT_KEY)
        due = time.perf_counter()
        for i in range(count):
            pause = due - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
            peer.enqueue(payload(i, stamp=True))
            due += gap
        marks = wait_list(ctl, LAT_KEY, count, 30, worker)
    finally:
        worker.stop()
    samples = sorted((start - enqueued) * 1000 for enqueued, start, _ in map(json.loads, marks))
    ctl.flushall()
    return {"figures": {"latency_p50_ms": quantile(samples, 0.5),
                        "latency_p99_ms": quantile(samples, 0.99)},
            "raw": {"latency_ms": samples, "latency_mean_ms": statistics.fmean(samples),
                    "latency_max_ms": samples[-1]}}


def _counted_window(mon: Monitor, ctl: redis.Redis, action: Callable[[], None]) -> dict:
    """One window of the counting pass: `INFO commandstats`, MONITOR and the client-side
    round-trip counter around `action`."""
    start = mon.mark()
    stats0, rt0 = command_stats(ctl), rt_total()
    action()
    # commands some clients send without waiting for the reply (pub/sub) land late
    time.sleep(SETTLE)
    rt1, stats1 = rt_total(), command_stats(ctl)
    end = mon.mark()
    seen = mon.window(start, end)
    delta = {name: entry["calls"] for name, entry in stats_delta(stats0, stats1).items()}
    # the harness's own commands (control connection, marks) are left out of the total
    library_total = sum(delta.values()) - seen["harness_commands"]
    return {"commandstats": delta, "commands": library_total,
            "commandstats_scripts": sum(v for k, v in delta.items() if k in SCRIPT_COMMANDS),
            "round_trips": rt1 - rt0, **seen}


def _timed_window(ctl: redis.Redis, action: Callable[[], None]) -> dict:
    """One window of the timing pass, without MONITOR: calls and usec of each command
    (`INFO commandstats`) around `action`."""
    before = command_stats(ctl)
    action()
    time.sleep(SETTLE)
    return {"commandstats": stats_delta(before, command_stats(ctl))}


def _count_phases(peer: BasePeer, module: str, mode: str, cfg: dict, n: int,
                  window: Callable[[Callable[[], Any]], dict], env: dict, label: str,
                  bulk: bool) -> dict:
    """The phases of one size, each in `window(action)`: n enqueues one call at a time,
    their drain by one worker (from its start to its clean exit), and with `bulk` n tasks
    enqueued in one bulk call ({"unsupported": why} when the peer has no bulk API)."""
    ctl = control(cfg)
    ctl.flushall()
    peer.setup()
    params = [payload(i) for i in range(n)]
    phases = {"enqueue": window(lambda: [peer.enqueue(p) for p in params])}

    def drain() -> None:
        """One worker, from its start to its clean exit after the last task."""
        worker = WorkerProcess(module, mode, cfg, {"BENCH_MARKS": "drain", "BENCH_N": n, **env},
                               f"{label}{n}")
        try:
            wait_list(ctl, END_KEY, 1, cfg.get("drain_timeout", 300), worker)
        finally:
            worker.stop()

    phases["worker"] = window(drain)
    if bulk:
        ctl.flushall()
        peer.setup()
        bulk_params = [payload(i) for i in range(n)]
        try:
            phases["bulk"] = window(lambda: peer.enqueue_bulk(bulk_params))
        except Unsupported as why:
            phases["bulk"] = {"unsupported": str(why)}
    return phases


def measure_counts(peer: BasePeer, module: str, mode: str, cfg: dict) -> dict:
    """Commands, round trips and server time: windows for two sizes; per task =
    difference / sizes.

    Two passes run the same phases: the counting pass under MONITOR (which commands
    clients send, which scripts run), then the timing pass without it (the usec of
    `INFO commandstats`; MONITOR would add its own cost to every script)."""
    rt_file = make_rt_file()
    install_rt_counter(rt_file)
    ctl = control(cfg)
    env = {"BENCH_RT_FILE": rt_file}
    windows: dict = {}
    timed: dict = {}
    try:
        # warm-up, outside any window: the server's script cache and the client's state
        ctl.flushall()
        peer.setup()
        peer.enqueue(payload(-1))
        try:
            peer.enqueue_bulk([payload(-2)])
        except Unsupported:
            pass
        mon = Monitor(cfg, ctl)
        try:
            for n in cfg["count_sizes"]:
                windows[str(n)] = _count_phases(peer, module, mode, cfg, n,
                                                lambda action: _counted_window(mon, ctl, action),
                                                env, "count", bulk=True)
        finally:
            mon.close()
        for n in cfg["count_sizes"]:
            timed[str(n)] = _count_phases(peer, module, mode, cfg, n,
                                          lambda action: _timed_window(ctl, action),
                                          env, "time", bulk=False)
    finally:
        os.unlink(rt_file)
    small, large = (str(n) for n in cfg["count_sizes"])
    span = cfg["count_sizes"][1] - cfg["count_sizes"][0]
    figures: dict = {}
    for phase in ("enqueue", "worker", "bulk"):
        a, b = windows[small][phase], windows[large][phase]
        for figure, field in (("cmds", "commands"), ("scripts", "scripts"),
                              ("client_cmds", "client_commands"), ("rt", "round_trips"),
                              ("lua_cmds", "lua_commands")):
            if "unsupported" in a:
                figures[f"{figure}_{phase}"] = None
            else:
                figures[f"{figure}_{phase}"] = (b[field] - a[field]) / span
    for phase in ("enqueue", "worker"):
        usec = {size: server_usec(timed[size][phase]["commandstats"],
                                  client_calls(windows[size][phase])) for size in (small, large)}
        figures[f"usec_{phase}"] = (usec[large] - usec[small]) / span
    ctl.flushall()
    return {"figures": figures, "raw": {"windows": windows, "timed_windows": timed}}


# -- where a plain task's Redis work goes, step by step ---------------------------------
STEPS = ("enqueue", "reserve", "complete")
#: what each probe of `_run_steps` adds to the window after it: the control connection's
#: `INFO commandstats` (counted once it has run, so in the next probe's figures)
PROBE_COMMANDS = {"info": 1}


def _run_steps(peer: BasePeer, ctl: redis.Redis, n: int,
               probe: Callable[[], Any]) -> list[tuple[str, Any, Any]]:
    """N plain tasks, step by step, as one worker takes them: N enqueues one call at a
    time, then for each task in turn its reserve (and start) and its complete (the no-op
    task between does no Redis work). `probe()` runs before and after each step; returns
    `(step, before, after)` in the order the steps ran. One task goes through every step
    first, outside any probe: the connection and the script cache are ready."""
    ctl.flushall()
    peer.setup()
    peer.enqueue(payload(-1))
    peer.complete_one(peer.reserve_one())
    trace: list[tuple[str, Any, Any]] = []

    def step(name: str, action: Callable[[], Any]) -> Any:
        """Run one step between two probes; its result."""
        before = probe()
        value = action()
        trace.append((name, before, probe()))
        return value

    for i in range(n):
        step("enqueue", lambda i=i: peer.enqueue(payload(i)))
    for _ in range(n):
        handle = step("reserve", peer.reserve_one)
        if handle is None:
            raise RuntimeError("the reserve step found no pending task")
        step("complete", lambda handle=handle: peer.complete_one(handle))
    return trace


def _merge(counts: list[dict]) -> dict:
    """The sum of several `{name: number}` or `{name: {"calls", "usec"}}` dicts."""
    total: dict = {}
    for count in counts:
        for name, value in count.items():
            if isinstance(value, dict):
                entry = total.setdefault(name, {"calls": 0, "usec": 0})
                entry["calls"] += value["calls"]
                entry["usec"] += value["usec"]
            else:
                total[name] = total.get(name, 0) + value
    return total


def measure_steps(peer: BasePeer, module: str, mode: str, cfg: dict) -> dict:
    """Redis work of each step of one plain task: commands (those scripts run included),
    those the client sent, and server time, per task, over `steps_n` tasks.

    The same scripted sequence (`_run_steps`) runs twice on a flushed Redis: under
    MONITOR, with a marker around each step (which commands the client sent, which the
    scripts ran), then with `INFO commandstats` around each step (calls and usec; no
    MONITOR, which would slow every script down; `RawCommandStats`, whose probe keeps the
    server idle about as long as a round trip). Server time: `server_usec`."""
    ctl = control(cfg)
    n = cfg["steps_n"]
    mon = Monitor(cfg, ctl)
    try:
        marked = _run_steps(peer, ctl, n, mon.mark)
        seen = mon.windows([(before, after) for _, before, after in marked])
    finally:
        mon.close()
    probe = RawCommandStats(cfg)
    try:
        timed = [(name, probe.parse(before), probe.parse(after)) for name, before, after
                 in _run_steps(peer, ctl, n, probe.sample)]
    finally:
        probe.close()
    figures: dict = {}
    raw: dict = {"tasks": n}
    for step in STEPS:
        watched = [summary for (name, _, _), summary in zip(marked, seen) if name == step]
        delta = _merge([stats_delta(before, after) for name, before, after in timed
                        if name == step])
        for command, calls in PROBE_COMMANDS.items():
            delta[command]["calls"] -= calls * len(watched)
        sent = _merge([client_calls(summary) for summary in watched])
        by_command = _merge([summary["by_command"] for summary in watched])
        figures.update({
            f"step_{step}_cmds": sum(entry["calls"] for entry in delta.values()) / n,
            f"step_{step}_client": sum(sent.values()) / n,
            f"step_{step}_scripts": sum(s["scripts"] for s in watched) / n,
            f"step_{step}_lua": sum(s["lua_commands"] for s in watched) / n,
            f"step_{step}_usec": server_usec(delta, sent) / n,
        })
        raw[step] = {"by_command_per_task": {name: calls / n for name, calls in
                                             sorted(by_command.items(), key=lambda i: -i[1])},
                     "commandstats": delta}
    ctl.flushall()
    return {"figures": figures, "raw": raw}


# -- CPU of a forked task against a bare fork --------------------------------------------
def _cpu_usage() -> dict:
    """CPU seconds (user + system) and minor page faults of this process (all its
    threads) and of its children waited for."""
    usage = {}
    for name, who in (("self", resource.RUSAGE_SELF), ("children", resource.RUSAGE_CHILDREN)):
        ru = resource.getrusage(who)
        usage[name] = ru.ru_utime + ru.ru_stime
        usage[f"{name}_minflt"] = ru.ru_minflt
    return usage


def report_rusage() -> None:
    """Called by a worker once it stopped cleanly. With BENCH_RUSAGE_FILE set: write the
    CPU this worker process used (RUSAGE_SELF) and its reaped task processes used
    (RUSAGE_CHILDREN); then, in this same process (the same image), fork
    BENCH_BARE_FORKS children that `os._exit(0)` at once, each reaped before the next,
    and write what they cost with the same accounting, under "bare"."""
    path = os.environ.get("BENCH_RUSAGE_FILE")
    if not path:
        return
    drained = _cpu_usage()
    forks = int(os.environ.get("BENCH_BARE_FORKS", "0"))
    for _ in range(forks):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
    after = _cpu_usage()
    report = {**drained, "bare": {"forks": forks,
                                  **{key: after[key] - drained[key] for key in drained}}}
    with open(path + ".tmp", "w") as handle:
        json.dump(report, handle)
    os.replace(path + ".tmp", path)


def measure_fork_cpu(peer: BasePeer, module: str, mode: str, cfg: dict) -> dict:
    """CPU per forked task, worker side and task process side, against a bare fork of
    the same image.

    For each of the two sizes of `cpu_sizes`, N no-op tasks are enqueued, one worker
    drains them and stops cleanly, and reports (`report_rusage`) its RUSAGE_SELF and its
    RUSAGE_CHILDREN (its task processes, reaped): per task = difference / sizes, so that
    start-up and shut-down cancel out. Each of those workers then forks N children that
    exit at once: the bare fork, per fork, pooled over both."""
    ctl = control(cfg)
    reports = {}
    for n in cfg["cpu_sizes"]:
        ctl.flushall()
        peer.setup()
        peer.enqueue_bulk([payload(i) for i in range(n)])
        path = os.path.join(os.environ.get("BENCH_TMP", "/tmp"), f"bench-rusage-{uuid.uuid4().hex}")
        worker = WorkerProcess(module, mode, cfg, {"BENCH_MARKS": "drain", "BENCH_N": n,
                                                   "BENCH_RUSAGE_FILE": path,
                                                   "BENCH_BARE_FORKS": n}, f"cpu{n}")
        try:
            wait_list(ctl, END_KEY, 1, cfg.get("drain_timeout", 300), worker)
        finally:
            worker.stop(grace=120)
        try:
            with open(path) as handle:
                reports[n] = json.load(handle)
            os.unlink(path)
        except OSError as error:
            raise RuntimeError(f"the worker wrote no CPU report ({error}): "
                               f"{worker.tail()}") from error
    small, large = cfg["cpu_sizes"]
    span = large - small
    per_task = {key: (reports[large][key] - reports[small][key]) / span
                for key in ("self", "children", "self_minflt", "children_minflt")}
    forks = sum(report["bare"]["forks"] for report in reports.values())
    bare = {key: sum(report["bare"][key] for report in reports.values()) / forks
            for key in ("self", "children", "self_minflt", "children_minflt")}
    figures = {"cpu_worker_ms": per_task["self"] * 1000,
               "cpu_task_process_ms": per_task["children"] * 1000,
               "cpu_forked_task_ms": (per_task["self"] + per_task["children"]) * 1000,
               "cpu_bare_parent_ms": bare["self"] * 1000,
               "cpu_bare_child_ms": bare["children"] * 1000,
               "cpu_bare_fork_ms": (bare["self"] + bare["children"]) * 1000}
    figures["cpu_vs_bare_fork"] = figures["cpu_forked_task_ms"] / figures["cpu_bare_fork_ms"]
    ctl.flushall()
    raw = {"reports": {str(n): report for n, report in reports.items()},
           "faults_per_task": {"worker": per_task["self_minflt"],
                               "task_process": per_task["children_minflt"]},
           "faults_per_bare_fork": {"parent": bare["self_minflt"],
                                    "child": bare["children_minflt"]}}
    return {"figures": figures, "raw": raw}


def measure_scaling(peer: BasePeer, module: str, mode: str, cfg: dict) -> dict:
    """Enqueue, reserve and complete cost with `size` tasks pending, for each size.

    Only for peers on the Blueque layout: the queue is filled by a pipelined insert."""
    ctl = control(cfg)
    k = cfg["scaling_ops"]
    results = []
    for size in cfg["scaling_sizes"]:
        ctl.flushall()
        peer.setup()
        mem0 = used_memory(ctl)
        started = time.perf_counter()
        fill_blueque_layout(ctl, peer.queue, size)
        fill_seconds = time.perf_counter() - started
        mem1 = used_memory(ctl)
        peer.setup()
        enqueue, reserve, complete = [], [], []
        for i in range(k):
            value = payload(size + i)
            t0 = time.perf_counter()
            peer.enqueue(value)
            enqueue.append(time.perf_counter() - t0)
        for _ in range(k):
            t0 = time.perf_counter()
            handle = peer.reserve_one()
            t1 = time.perf_counter()
            peer.complete_one(handle)
            t2 = time.perf_counter()
            reserve.append(t1 - t0)
            complete.append(t2 - t1)
        pending = peer.pending_count()
        results.append({
            "pending": size, "fill_seconds": fill_seconds, "fill_per_s": size / fill_seconds,
            "mem_pending_bytes": (mem1 - mem0) / size, "pending_after": pending,
            "enqueue_us": statistics.median(enqueue) * 1e6,
            "enqueue_p90_us": quantile(enqueue, 0.9) * 1e6,
            "reserve_us": statistics.median(reserve) * 1e6,
            "reserve_p90_us": quantile(reserve, 0.9) * 1e6,
            "complete_us": statistics.median(complete) * 1e6,
            "complete_p90_us": quantile(complete, 0.9) * 1e6,
        })
        ctl.flushall()
    return {"figures": {}, "raw": {"scaling": results, **peer.extra_scaling()}}


ACTIONS = {"throughput": measure_throughput, "latency": measure_latency,
           "count": measure_counts, "scaling": measure_scaling, "steps": measure_steps,
           "cpu": measure_fork_cpu}


def main(module: str) -> None:
    """Entry point of an adapter: `measure <json>` or `worker <mode> <json>`."""
    import importlib

    adapter = importlib.import_module(module)  # the module under its own name, not __main__
    role = sys.argv[1]
    if role == "worker":
        mode, cfg = sys.argv[2], json.loads(sys.argv[3])
        adapter.Peer(cfg).worker(mode)
        return
    # keep stdout for the one result line; libraries that print go to stderr
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    request = json.loads(sys.argv[2])
    try:
        peer = adapter.Peer(request)
        result = ACTIONS[request["action"]](peer, module, request.get("mode", ""), request)
        result = {"ok": True, "versions": peer.versions(), **result}
    except Exception as error:  # reported to the harness, which goes on with the others
        traceback.print_exc()
        result = {"ok": False, "error": f"{type(error).__name__}: {error}"[:2000]}
    out.write(json.dumps(result) + "\n")
    out.flush()
