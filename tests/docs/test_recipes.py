"""The deploy recipes of docs/bounds.rst (docs/recipes/), run as their platform would: the
worker command they start, the hook and the stop signal they send, and the next worker
resuming the task the stopped one handed over. The Kubernetes recipe's scaling query
names a metric the dashboard exports; the systemd unit sends its stop signal to the
worker alone (`KillMode=mixed`), as the worker's hand-over needs.
"""

from __future__ import annotations

import configparser
import json
import os
import re
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from bounded_jobs import BoundedJob, steps_key
from helpers import BIN, TESTS, kill, script, wait_for
from jobs import events

from limpyd_blueque import Error, Queue

pytestmark = pytest.mark.timeout(120)
#: steps of the task handed over (0.1 s each on its first worker: long enough for the
#: hook and the stop on a loaded machine; quicker once resumed)
STEPS = 200
RECIPES = Path(__file__).resolve().parents[2] / "docs" / "recipes"
#: what the tests' task needs beyond the recipe's command: its module, and quick beats
TEST_OPTIONS = [f"--pythonpath={TESTS}", "--job-model=bounded_jobs.BoundedJob",
                "--timeout=0.2", "--liveness-interval=0.2", "--liveness-timeout=2"]


def long_task():
    return Queue.named("reports").enqueue({"do": "steps", "n": STEPS, "step": 0.1,
                                           "resumed_step": 0.005}, model=BoundedJob)


def steps(conn, job):
    return [json.loads(entry)[1] for entry in conn.lrange(steps_key(job.task_id), 0, -1)]


def installed(command):
    """`command` with its program as installed here (`blueque-worker`, `blueque`)."""
    program = Path(command[0]).name
    module = "limpyd_blueque.cli" if program == "blueque-worker" else "limpyd_blueque.admin"
    return [*script(program, module), *command[1:]]


def assert_resumed_each_step_once(conn, job, holder):
    wait_for(lambda: job.node.hget() == holder, timeout=10)
    wait_for(lambda: job.status.hget() == "complete", timeout=30)
    assert steps(conn, job) == list(range(STEPS))
    assert job.uncounted.hget() == "1" and not Error.collection_for_job(job)


# -- Kubernetes --------------------------------------------------------------------------------
def kubernetes():
    documents = list(yaml.safe_load_all((RECIPES / "kubernetes.yaml").read_text()))
    deployment = next(d for d in documents if d["kind"] == "Deployment")
    scaler = next(d for d in documents if d["kind"] == "ScaledObject")
    return deployment["spec"]["template"]["spec"], scaler


def pod_command(container, env):
    """The container's arguments as the kubelet passes them to the image's entrypoint (an
    init, here left out): `$(VAR)` from its environment."""
    return [re.sub(r"\$\((\w+)\)", lambda match: env[match.group(1)], part)
            for part in container["args"]]


def test_the_kubernetes_recipe_hands_a_task_over_within_its_grace_period(conn, redis_url):
    pod, _ = kubernetes()
    container = pod["containers"][0]
    grace = pod["terminationGracePeriodSeconds"]
    assert "command" not in container  # the image's entrypoint (its init) stays
    release_timeout = float(next(part.split("=")[1] for part in container["args"]
                                 if part.startswith("--release-timeout=")))
    assert grace > release_timeout
    job = long_task()
    pods = {}

    def start(name):
        env = {**os.environ, "REDIS_URL": redis_url, "POD_NAME": name}
        pods[name] = subprocess.Popen(installed(pod_command(container, env)) + TEST_OPTIONS,
                                      env=env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL)
        return env

    try:
        first = start("reports-7d9f-a1")
        wait_for(lambda: len(steps(conn, job)) >= 10, timeout=30)
        start("reports-7d9f-b2")
        hook = container["lifecycle"]["preStop"]["exec"]["command"]
        path = f"{BIN}{os.pathsep}{first.get('PATH', '')}"  # `blueque` as installed here
        done = subprocess.run(hook, env={**first, "PATH": path}, capture_output=True,
                              text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        wait_for(lambda: quiet(redis_url, "reports-7d9f-a1_1"), timeout=10)
        stopped = time.monotonic()
        pods["reports-7d9f-a1"].send_signal(signal.SIGTERM)  # the kubelet's, after the hook
        assert pods["reports-7d9f-a1"].wait(timeout=grace) == 0
        assert time.monotonic() - stopped < grace
        assert_resumed_each_step_once(conn, job, "reports-7d9f-b2_1")
    finally:
        for process in pods.values():
            kill(process.pid)
            process.wait()


def quiet(redis_url, worker_id):
    listing = subprocess.run(installed(["blueque", f"--redis-url={redis_url}", "workers",
                                        "--json"]), capture_output=True, text=True, timeout=30)
    rows = json.loads(listing.stdout)["workers"]
    return any(row["id"] == worker_id and row["state"] == "quiet" for row in rows)


def test_the_kubernetes_recipe_scales_on_a_metric_the_dashboard_exports(conn, redis_url):
    from prometheus_client import generate_latest

    from limpyd_blueque.operations.metrics import registry

    _, scaler = kubernetes()
    query = scaler["spec"]["triggers"][0]["metadata"]["query"]
    metric, queue = re.fullmatch(r'sum\((\w+)\{queue="([\w-]+)"\}\)', query).groups()
    for _ in range(3):
        Queue.named(queue).enqueue({"do": "quick"}, model=BoundedJob)
    exported = generate_latest(registry()).decode()
    assert f'{metric}{{queue="{queue}"}} 3.0' in exported
    stats = subprocess.run(installed(["blueque", f"--redis-url={redis_url}", "stats",
                                      "--json"]), capture_output=True, text=True, timeout=30)
    shown = {row["queue"]: row for row in json.loads(stats.stdout)["queues"]}
    assert shown[queue]["waiting"] == 3


# -- systemd -----------------------------------------------------------------------------------
def unit():
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # systemd's keys are case-sensitive
    parser.read_string((RECIPES / "blueque-worker.service").read_text())
    return parser["Service"]


def test_the_systemd_unit_stops_the_worker_alone_and_hands_its_task_over(conn, redis_url):
    service = unit()
    assert service["KillMode"] == "mixed"  # else the task processes get SIGTERM too
    command = shlex.split(service["ExecStart"])
    release_timeout = float(next(part.split("=")[1] for part in command
                                 if part.startswith("--release-timeout=")))
    timeout = float(service["TimeoutStopSec"])
    assert timeout > release_timeout
    name, value = service["Environment"].split("=", 1)
    env = {**os.environ, name: redis_url}
    assert name == "REDIS_URL" and value.startswith("redis://")
    job = long_task()
    units = []
    try:
        units.append(subprocess.Popen(installed(command) + TEST_OPTIONS, env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_for(lambda: len(steps(conn, job)) >= 10, timeout=30)
        task_pid = next(e["pid"] for e in events(conn, job.task_id) if e["event"] == "running")
        units[0].send_signal(getattr(signal, service["KillSignal"]))  # the worker alone
        assert units[0].wait(timeout=timeout) == 0
        wait_for(lambda: not os.path.exists(f"/proc/{task_pid}")
                 or b") Z" in Path(f"/proc/{task_pid}/stat").read_bytes(), timeout=5)
        assert job.status.hget() == "pending"  # handed over: nothing left for SIGKILL
        # Restart=always: systemd starts the unit again, which resumes the task
        units.append(subprocess.Popen(installed(command) + TEST_OPTIONS, env=env,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_for(lambda: job.status.hget() == "complete", timeout=30)
        assert steps(conn, job) == list(range(STEPS))
        assert job.uncounted.hget() == "1" and not Error.collection_for_job(job)
    finally:
        for process in units:
            kill(process.pid)
            process.wait()
