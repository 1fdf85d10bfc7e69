"""The crash test: real workers and a real Redis (with AOF) killed at random moments.

Three `blueque-worker` processes run tasks of random length while workers are killed
with SIGKILL (sometimes with their task processes) or stopped with SIGTERM, and
restarted, and Redis itself is killed and restarted once. The workers also kill
themselves now and then in the middle of an exchange with a task process: when its
outcome has come but before they write it, or once they wrote it but before they answer
(`relay_workers.SometimesKilled`). Then every task must be complete, none lost or
stuck, no reserved list, started set or lease left, and a task may have run more than
once only if a process running it was killed.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections import defaultdict

import psutil
import pytest
import redis
from helpers import alive, kill, read_events, read_runs, wait_for, worker_command
from relay_workers import HERE

from limpyd_blueque import Client
from limpyd_blueque.connection.embedded import EmbeddedRedis

TASKS = 100
CHAOS_SECONDS = 20
FINISH_SECONDS = 120
MODES = ("wait", "detach", "requeue")
#: how often a worker kills itself at an outcome's write or answer (see relay_workers.py)
KILL_RATE = 0.04
KILL_POINTS = ("killed-before-writing", "killed-before-answering")

pytestmark = pytest.mark.crash


class Fleet:
    """Three worker slots, each with a stopping policy; dead slots are restarted."""

    def __init__(self, url, log_path):
        self.url = url
        self.env = {**os.environ, "CRASH_LOG": str(log_path), "RELAY_KILL_RATE": str(KILL_RATE)}
        self.workers = {}
        self.killed = set()       # task processes this test killed
        self.counts = defaultdict(int)

    def start(self, slot):
        command = worker_command(
            self.url, "--queues=crash", "--job-model=jobs.CrashJob", "--concurrency=2",
            "--ttr=3", "--heartbeat-interval=0.5", "--clean-interval=0.5", "--timeout=0.5",
            "--max-attempts=1000", "--max-loops=100000", f"--on-terminate={MODES[slot]}",
            "--terminate-timeout=1", "--no-title", "--logger-level=WARNING",
            f"--pythonpath={HERE}", "--worker-class=relay_workers.SometimesKilled")
        self.workers[slot] = subprocess.Popen(command, env=self.env, stdout=subprocess.DEVNULL,
                                              stderr=subprocess.DEVNULL)
        self.counts["workers started"] += 1

    def task_processes(self, slot):
        try:
            return [child.pid for child in psutil.Process(self.workers[slot].pid).children()]
        except psutil.NoSuchProcess:
            return []

    def sigkill(self, slot, with_tasks):
        worker = self.workers[slot]
        children = self.task_processes(slot) if with_tasks else []
        kill(worker.pid)
        for pid in children:
            kill(pid)
            self.killed.add(pid)
        worker.wait()
        self.counts["workers killed with SIGKILL"] += 1
        self.counts["task processes killed"] += len(children)

    def sigterm(self, slot):
        self.workers[slot].send_signal(signal.SIGTERM)
        self.counts["workers stopped with SIGTERM"] += 1

    def restart_dead(self):
        for slot, worker in list(self.workers.items()):
            if worker.poll() is not None:
                self.start(slot)

    def stop(self):
        for worker in self.workers.values():
            if worker.poll() is None:
                worker.send_signal(signal.SIGTERM)
        for worker in self.workers.values():
            try:
                worker.wait(timeout=15)
            except subprocess.TimeoutExpired:
                kill(worker.pid)
                worker.wait()


@pytest.mark.timeout(300)
def test_every_task_completes_through_killed_workers_and_a_redis_restart(tmp_path, capsys):
    seed = int(os.environ.get("CRASH_SEED", time.time()))
    rng = random.Random(seed)
    server = EmbeddedRedis(persistence=True, directory=str(tmp_path / "redis"), fsync="always")
    os.makedirs(server.directory)
    server.start()
    log_path = tmp_path / "runs.log"
    fleet = Fleet(server.url, log_path)
    started = time.monotonic()
    try:
        queue = Client(server.url).get_queue("crash")
        # some tasks in micro-queues, some with a ttl (long enough never to expire), some
        # in groups limited across the workers: the chaos must lose none of them either
        queue.model.set_limit("*", max_running=2)
        task_ids = [queue.model.enqueue(
            str(round(rng.uniform(0.2, 2.5), 2)), utube=f"u{n % 5}" if n % 4 == 0 else None,
            ttl=3600 if n % 5 == 0 else None,
            group=f"g{n % 3}" if n % 3 else None).task_id for n in range(TASKS)]
        for slot in range(len(MODES)):
            fleet.start(slot)
        redis_restarted = False
        while time.monotonic() - started < CHAOS_SECONDS:
            time.sleep(rng.uniform(0.8, 1.6))
            action = rng.random()
            slot = rng.randrange(len(MODES))
            if not redis_restarted and time.monotonic() - started > CHAOS_SECONDS * 0.4:
                server.kill()
                time.sleep(0.5)
                server.start()
                redis_restarted = True
                fleet.counts["redis restarts"] += 1
            elif fleet.workers[slot].poll() is not None:
                pass
            elif action < 0.45:
                fleet.sigkill(slot, with_tasks=rng.random() < 0.5)
            elif action < 0.8:
                fleet.sigterm(slot)
            fleet.restart_dead()
        # let the fleet finish the work
        client = redis.Redis.from_url(server.url, decode_responses=True)

        def all_complete():
            fleet.restart_dead()
            statuses = [client.hget(f"blueque_task_{task_id}", "status") for task_id in task_ids]
            return all(status == "complete" for status in statuses)

        fleet.counts["pending when the chaos ended"] = client.llen("blueque_pending_tasks_crash")
        wait_for(all_complete, timeout=FINISH_SECONDS, interval=0.5)
        fleet.stop()

        statuses = {task_id: client.hget(f"blueque_task_{task_id}", "status")
                    for task_id in task_ids}
        assert set(statuses.values()) == {"complete"}, f"seed {seed}"
        assert client.llen("blueque_pending_tasks_crash") == 0
        assert client.llen("blueque_complete_tasks_crash") == TASKS
        leftovers = [key for key in client.keys("blueque_reserved_tasks_crash_*")
                     if client.llen(key)]
        assert leftovers == [], f"seed {seed}"
        assert client.scard("blueque_started_tasks_crash") == 0, f"seed {seed}"
        assert client.zcard("blueque:leases:crash") == 0, f"seed {seed}"
        assert client.hlen("blueque:utubes:crash") == 0, f"seed {seed}"  # every key free
        assert client.zcard("blueque:utube_waiting:crash") == 0, f"seed {seed}"
        assert client.zcard("blueque:expiry:crash") == 0, f"seed {seed}"
        # every group's line, turn and slot is gone with its tasks
        assert not client.exists("blueque:grouped:crash", "blueque:groups:crash",
                                 "blueque:held:crash", "blueque:slots:crash:g1",
                                 "blueque:slots:crash:g2"), f"seed {seed}"

        runs = read_runs(log_path)
        reruns = {task_id: r for task_id, r in runs.items() if len(r) > 1}
        # exactly-once completion: a task's outcome is recorded by one run, and no run of
        # it begins once it was (a run cut short, or one that ended while its holder lost
        # the task, by a stop or a Redis restart longer than its lease, runs again)
        recorded = set()
        for event, task_id, pid in read_events(log_path):
            if event == "begin":
                assert task_id not in recorded, (task_id, pid, f"seed {seed}")
            elif event == "recorded":
                assert task_id not in recorded, (task_id, pid, f"seed {seed}")
                recorded.add(task_id)
        assert set(runs) == set(task_ids)
        with capsys.disabled():
            ended_again = sum(1 for task_runs in reruns.values()
                              if sum(ended for _, ended in task_runs) > 1)
            for point in KILL_POINTS:
                fleet.counts[f"workers {point.replace('-', ' ')}"] = sum(
                    1 for event, _, _ in read_events(log_path) if event == point)
            counts = dict(fleet.counts, tasks=TASKS, runs=sum(len(r) for r in runs.values()),
                          **{"tasks run more than once": len(reruns),
                             "tasks that ran to their end more than once": ended_again})
            print(f"\ncrash test (seed {seed}, {time.monotonic() - started:.0f} s): "
                  + ", ".join(f"{name}: {value}" for name, value in sorted(counts.items())))
    finally:
        fleet.stop()
        for pid in fleet.killed:
            kill(pid)
        server.kill()
        for entry in read_runs(log_path).values():
            for pid, _ in entry:
                if alive(pid):
                    kill(pid)
