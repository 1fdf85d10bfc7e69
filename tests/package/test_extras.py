"""The core package installs and runs without its optional extras (issue 14): a fresh
virtualenv (built once in `.cache/`, again when setup.py changes) holds the package and
its core dependencies only; there, the library imports, and `blueque web` and `blueque
metrics` name the extra to install instead of failing with a traceback."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".cache" / "core-only-venv"


@pytest.fixture(scope="module")
def core_python():
    """The python of a virtualenv holding the package without extras."""
    marker = VENV / "built"
    digest = hashlib.sha256((ROOT / "setup.py").read_bytes()).hexdigest()
    python = VENV / "bin" / "python"
    if not marker.exists() or marker.read_text().strip() != digest:
        shutil.rmtree(VENV, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True,
                       capture_output=True)
        built = subprocess.run([str(python), "-m", "pip", "install", "-q", str(ROOT)],
                               capture_output=True, text=True, timeout=600)
        if built.returncode != 0:
            message = f"cannot build the core-only environment: {built.stderr[-2000:]}"
            if os.environ.get("CI"):
                pytest.fail(message)
            pytest.skip(message)
        marker.write_text(digest + "\n")
    return python


@pytest.mark.timeout(900)
def test_the_core_installs_without_the_web_and_metrics_extras(core_python):
    listed = subprocess.run([str(core_python), "-m", "pip", "list", "--format=freeze"],
                            capture_output=True, text=True, check=True).stdout.lower()
    for extra_only in ("flask", "waitress", "prometheus-client", "prometheus_client",
                       "selenium"):
        assert f"{extra_only}==" not in listed
    probe = ("import limpyd_blueque, limpyd_blueque.operations.metrics, limpyd_blueque.admin; "
             "print(limpyd_blueque.__version__)")
    result = subprocess.run([str(core_python), "-c", probe], capture_output=True, text=True,
                            cwd="/")
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(("command", "extra"), [("web", "web"), ("metrics", "metrics")])
def test_a_command_of_an_extra_names_the_extra_to_install(core_python, redis_url, command,
                                                           extra):
    blueque = core_python.parent / "blueque"
    result = subprocess.run([str(blueque), f"--redis-url={redis_url}", command],
                            capture_output=True, text=True, timeout=60, cwd="/")
    assert result.returncode == 2
    assert f"pip install 'limpyd-blueque[{extra}]'" in result.stderr
    assert "Traceback" not in result.stderr
