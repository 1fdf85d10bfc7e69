"""The reference package `blueque==1.0.1`, run for real beside limpyd-blueque.

The reference pins redis-py < 6, so it cannot share the test environment: it lives in a
virtualenv of its own, `<repo>/.cache/blueque-1.0.1-venv`, made on first use, and tests
talk to it through `blueque_driver.py`, one JSON line per call. The `reference` fixture
starts that driver once per session on the test Redis and returns a `Reference`.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

REQUIREMENT = "blueque==1.0.1"
REPO = Path(__file__).resolve().parent.parent
VENV = REPO / ".cache" / "blueque-1.0.1-venv"
DRIVER = Path(__file__).with_name("blueque_driver.py")
#: seconds one driver call may take before the test fails instead of hanging
REPLY_TIMEOUT = 30.0


class VenvUnavailable(Exception):
    """The virtualenv holding the reference package could not be made."""


class ReferenceRaised(Exception):
    """The reference package raised; the message is its exception, as the driver saw it."""


class Listened(NamedTuple):
    """What one reference listener call gave: the listener's id, and the task or None."""

    listener: str
    task: dict | None


def _venv_python() -> Path:
    return VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _has_reference(python: Path) -> bool:
    check = "import importlib.metadata as m, blueque; assert m.version('blueque') == '1.0.1'"
    return python.exists() and subprocess.run(
        [str(python), "-c", check], capture_output=True).returncode == 0


def ensure_venv() -> Path:
    """The Python of the reference virtualenv, made (and `blueque` installed) if needed."""
    python = _venv_python()
    if _has_reference(python):
        return python
    steps = [[sys.executable, "-m", "venv", str(VENV)],
             [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check",
              REQUIREMENT]]
    for step in steps:
        try:
            done = subprocess.run(step, capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.TimeoutExpired) as error:
            raise VenvUnavailable(f"{' '.join(step)}: {error}") from error
        if done.returncode != 0:
            raise VenvUnavailable(f"{' '.join(step)} exited with {done.returncode}: "
                                  f"{(done.stderr or done.stdout).strip()[-1500:]}")
    if not _has_reference(python):
        raise VenvUnavailable(f"{REQUIREMENT} is not importable from {python}")
    return python


class Reference:
    """One process running the reference client; one method per driver command."""

    def __init__(self, python: Path, url: str) -> None:
        self.python, self.url = python, url
        self._stderr = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - closed by close()
        self.process = subprocess.Popen(
            [str(python), str(DRIVER), url], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self._stderr, text=True, bufsize=1)
        self.pid: int = self._call("pid")

    def _call(self, cmd: str, **fields: Any) -> Any:
        assert self.process.stdin and self.process.stdout
        self.process.stdin.write(json.dumps({"cmd": cmd, **fields}) + "\n")
        self.process.stdin.flush()
        ready, _, _ = select.select([self.process.stdout], [], [], REPLY_TIMEOUT)
        line = self.process.stdout.readline() if ready else ""
        if not line:
            self._stderr.seek(0)
            raise RuntimeError(f"the blueque driver gave no reply to {cmd!r} "
                               f"(exit code {self.process.poll()}): {self._stderr.read()[-2000:]}")
        answer = json.loads(line)
        if not answer["ok"]:
            raise ReferenceRaised(answer["error"])
        return answer["value"]

    def close(self) -> None:
        """End the driver (closing its stdin ends its loop) and wait for it to exit."""
        if self.process.poll() is None:
            assert self.process.stdin
            self.process.stdin.close()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout:
            self.process.stdout.close()
        self._stderr.close()

    @contextlib.contextmanager
    def spawn(self) -> Iterator[Reference]:
        """Another reference process on the same Redis, dead once the block ends."""
        other = Reference(self.python, self.url)
        try:
            yield other
        finally:
            other.close()

    # -- the reference API ------------------------------------------------------------
    def reset(self) -> None:
        """Forget this process's listeners, after the database was flushed."""
        self._call("reset")

    def enqueue(self, queue: str, parameters: str) -> str:
        return self._call("enqueue", queue=queue, parameters=parameters)

    def schedule(self, queue: str, parameters: str, eta: float) -> str:
        return self._call("schedule", queue=queue, parameters=parameters, eta=eta)

    def enqueue_due_tasks(self, queue: str) -> None:
        self._call("enqueue_due_tasks", queue=queue)

    def add_listener(self, queue: str) -> str:
        """Create one more reference `Listener` on `queue`; returns its id."""
        return self._call("add_listener", queue=queue)

    def remove_listener(self, queue: str, listener: str) -> int:
        return self._call("remove_listener", queue=queue, listener=listener)

    def listen(self, queue: str) -> Listened:
        """Reserve the next task of `queue`, as one turn of `Listener.listen`."""
        return Listened(**self._call("listen", queue=queue))

    def claim_orphan(self, queue: str) -> Listened:
        return Listened(**self._call("claim_orphan", queue=queue))

    def start(self, task_id: str, pid: int) -> None:
        self._call("start", task_id=task_id, pid=pid)

    def complete(self, task_id: str, result: str) -> None:
        self._call("complete", task_id=task_id, result=result)

    def fail(self, task_id: str, error: str) -> None:
        self._call("fail", task_id=task_id, error=error)

    def delete_task(self, queue: str, task_id: str) -> None:
        self._call("delete_task", queue=queue, task_id=task_id)

    def get_task(self, task_id: str) -> dict:
        return self._call("get_task", task_id=task_id)


@pytest.fixture(scope="session")
def reference(redis_url: str) -> Iterator[Reference]:
    """The reference client in its own process, on the test Redis, for the whole session.

    Without its virtualenv the tests that need it fail under CI and are skipped elsewhere.
    """
    try:
        python = ensure_venv()
    except VenvUnavailable as error:
        message = f"cannot install the reference {REQUIREMENT}: {error}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    driver = Reference(python, redis_url)
    try:
        yield driver
    finally:
        driver.close()
