"""Many tasks at once, RQ and Celery: the side of bench/many_peers.py that runs in a peer's venv.

    <venv>/bin/python -m peers.many <peer> <phase> '<json>'      (cwd: bench/)

`peer` is `rq` or `celery`; the JSON holds `url`, `queue` and what the phase needs.
Phases:

* `worker`: runs the peer's worker until killed: RQ `rq worker-pool -n <workers>` (its
  command line, called in this process), Celery `worker -P prefork -c <workers>` with
  the options of bench/peers/celery.py. Prints nothing.
* `ready`: waits until that worker takes tasks (RQ: `<workers>` workers registered on
  the queue; Celery: its `worker_ready` signal), or its pid is gone, or `wait` s.
* `enqueue`: N sleeping tasks with the peer's API (RQ `Queue.enqueue_many`, no job
  timeout; Celery `apply_async`, one call each: no bulk API); prints the time taken just
  before the first enqueue call.
* `probe`: `probes` no-op tasks, each enqueued once the previous one has run; prints
  each one's start time minus the time just before its enqueue call (ms).
* `reference`: imports the modules of a task process, forks N children that only wait,
  prints their pids; they are killed when stdin closes.

The task pushes `"<time.time()> <pid>"` to the list its parameters name, on the
connection its process already has, then sleeps `sleep` seconds. Every phase but
`worker` prints one JSON line: `{"ok": true, ...}` or `{"ok": false, "error": ...}`.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import signal
import sys
import time
import traceback
from typing import Any, Callable

import redis

READY = "bench:ready"  # set by Celery's worker_ready signal
CELERY_TASK = "bench.many.task"
#: what a task process has imported, for the bare fork it is compared with
MODULES = {"rq": ["rq", "rq.cli", "rq.worker", "rq.worker_pool", "peers.many"],
           "celery": ["celery", "celery.bin.celery", "celery.apps.worker",
                      "celery.worker.worker", "celery.concurrency.prefork",
                      "kombu.transport.redis", "celery.backends.redis", "peers.celery",
                      "peers.many"]}


def stamp(client: Any, key: str, started: float) -> None:
    client.rpush(key, f"{started!r} {os.getpid()}")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


# -- RQ ----------------------------------------------------------------------------------
def rq_task(key: str, sleep: float) -> None:
    started = time.time()
    from rq import get_current_job

    job = get_current_job()
    assert job is not None
    stamp(job.connection, key, started)
    if sleep > 0:
        time.sleep(sleep)


class RQ:
    def __init__(self, cfg: dict[str, Any]) -> None:
        from rq import Queue

        self.cfg = cfg
        self.client = redis.Redis.from_url(cfg["url"])
        self.queue = Queue(cfg["queue"], connection=self.client)

    def worker(self) -> None:
        from rq.cli import main

        main(["worker-pool", "-n", str(self.cfg["workers"]), "-u", self.cfg["url"],
              "-l", "WARNING", self.cfg["queue"]], prog_name="rq")

    def ready(self) -> bool:
        from rq import Worker

        return bool(Worker.count(connection=self.client, queue=self.queue) >= self.cfg["workers"])

    def enqueue(self, n: int, key: str, sleep: float) -> None:
        from rq import Queue

        self.queue.enqueue_many([Queue.prepare_data(rq_task, args=(key, sleep), timeout=-1)
                                 for _ in range(n)])

    def submit(self, key: str) -> Callable[[], bool]:
        job = self.queue.enqueue(rq_task, key, 0)
        return lambda: job.get_status(refresh=True) == "finished"


# -- Celery ------------------------------------------------------------------------------
def celery_task(task: Any, key: str, sleep: float) -> None:
    started = time.time()
    stamp(task.app.backend.client, key, started)
    if sleep > 0:
        time.sleep(sleep)


class Celery:
    def __init__(self, cfg: dict[str, Any]) -> None:
        from peers.celery import make_app

        self.cfg = cfg
        self.app = make_app(cfg["url"], cfg["queue"])
        self.task = self.app.task(name=CELERY_TASK, bind=True)(celery_task)

    def worker(self) -> None:
        from celery.signals import worker_ready

        def ready(**_: Any) -> None:
            redis.Redis.from_url(self.cfg["url"]).set(READY, os.getpid())

        worker_ready.connect(ready, weak=False)
        self.app.worker_main(["worker", "-P", "prefork", "-c", str(self.cfg["workers"]),
                              "--loglevel=WARNING", "-Q", self.cfg["queue"],
                              "--without-gossip", "--without-mingle", "--without-heartbeat",
                              "-n", "bench-many@%h"])

    def ready(self) -> bool:
        return bool(redis.Redis.from_url(self.cfg["url"]).exists(READY))

    def enqueue(self, n: int, key: str, sleep: float) -> None:
        for _ in range(n):
            self.task.apply_async((key, sleep))

    def submit(self, key: str) -> Callable[[], bool]:
        result = self.task.apply_async((key, 0))
        return lambda: bool(result.ready())


PEERS: dict[str, Callable[[dict[str, Any]], Any]] = {"rq": RQ, "celery": Celery}


# -- the phases --------------------------------------------------------------------------
def wait(what: str, done: Callable[[], bool], timeout: float, every: float = 0.01) -> float:
    began = time.monotonic()
    while not done():
        if time.monotonic() - began > timeout:
            raise TimeoutError(f"{what}: not after {timeout:g} s")
        time.sleep(every)
    return time.monotonic() - began


def ready(peer: Any, cfg: dict[str, Any]) -> dict[str, Any]:
    def done() -> bool:
        if not pid_alive(cfg["pid"]):
            raise RuntimeError(f"the worker (pid {cfg['pid']}) exited")
        return bool(peer.ready())
    return {"waited_s": wait("the worker to be ready", done, cfg["wait"], every=0.1)}


def enqueue(peer: Any, cfg: dict[str, Any]) -> dict[str, Any]:
    began = time.time()
    peer.enqueue(cfg["n"], cfg["key"], cfg["sleep"])
    return {"began": began, "enqueue_s": time.time() - began}


def probe(peer: Any, cfg: dict[str, Any]) -> dict[str, Any]:
    client = redis.Redis.from_url(cfg["url"])
    samples = []
    for _ in range(cfg["probes"]):
        time.sleep(0.1)  # the worker that ran the previous one is back waiting
        began = time.time()
        finished = peer.submit(cfg["key"])
        got = client.blpop([cfg["key"]], timeout=10)
        if got is None:
            raise RuntimeError("a probe task did not start within 10 s")
        samples.append((float(got[1].split()[0]) - began) * 1000)
        wait("the probe to finish", finished, 10)
    return {"samples_ms": samples}


def reference(name: str, cfg: dict[str, Any]) -> dict[str, Any]:
    for module in MODULES[name]:
        importlib.import_module(module)
    peer = PEERS[name](cfg)  # the connection (RQ) or the app and its task (Celery)
    if name == "celery":
        peer.app.finalize(auto=True)
    gc.collect()
    pids = []
    for _ in range(cfg["n"]):
        pid = os.fork()
        if pid == 0:
            while True:
                signal.pause()
        pids.append(pid)
    print(json.dumps({"ok": True, "pids": pids, "modules": MODULES[name]}), flush=True)
    sys.stdin.read()
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    for pid in pids:
        os.waitpid(pid, 0)
    return {}


def main(argv: list[str]) -> None:
    name, phase, cfg = argv[0], argv[1], json.loads(argv[2])
    if phase == "worker":
        PEERS[name](cfg).worker()
        return
    if phase == "reference":
        reference(name, cfg)
        return
    out = os.fdopen(os.dup(1), "w")  # the result line; what libraries print goes to stderr
    os.dup2(2, 1)
    try:
        action = {"ready": ready, "enqueue": enqueue, "probe": probe}[phase]
        result = {"ok": True, **action(PEERS[name](cfg), cfg)}
    except Exception as error:  # noqa: BLE001 - reported to the harness, which goes on
        traceback.print_exc()
        result = {"ok": False, "error": f"{type(error).__name__}: {error}"[:1000]}
    out.write(json.dumps(result) + "\n")
    out.flush()
    os._exit(0)  # no waiting on the libraries' background threads at exit


if __name__ == "__main__":
    importlib.import_module("peers.many").main(sys.argv[1:])  # the tasks under their own name
