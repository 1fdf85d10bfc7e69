"""The package runs on the oldest versions it supports: Python 3.9 and redis-py 5.0.

A slow suite of its own (`python3 -m pytest -m oldest`, a step of .ci/run). This test
builds (once, in `.cache/`) a virtualenv with the oldest Python found on the machine (3.9
when present) and redis-py 5.0.0, and runs the core of this suite in it.
The main run itself uses the newest redis-py.
"""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OLDEST_REDIS_PY = "5.0.0"
#: the inner run leaves out the slow end-to-end suites, which the main run covers
LEFT_OUT = ("package/test_supported_versions.py", "worker/test_crash.py",
            "interop/test_wire_compat.py")


def oldest_python() -> str:
    """A Python 3.9 interpreter (from the PATH or pyenv), else the one running the tests."""
    candidates = [shutil.which("python3.9")]
    candidates += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.9*/bin/python3")))
    for found in candidates:
        if found:
            probe = subprocess.run([found, "-c", "import sys; print(sys.version_info[:2])"],
                                   capture_output=True, text=True)
            if probe.returncode == 0 and probe.stdout.strip() == "(3, 9)":
                return found
    return sys.executable


def build(venv: Path, python: str) -> None:
    subprocess.run([python, "-m", "venv", str(venv)], check=True, capture_output=True)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                    f"redis=={OLDEST_REDIS_PY}", "-e", f"{ROOT}[test]"],
                   check=True, capture_output=True, text=True, timeout=600)


@pytest.mark.oldest
@pytest.mark.timeout(900)
def test_core_suite_passes_on_the_oldest_supported_versions():
    if os.environ.get("LIMPYD_BLUEQUE_INNER_RUN"):
        pytest.skip("already the inner run")
    python = oldest_python()
    version = subprocess.run([python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    venv = ROOT / ".cache" / f"py{version}-redis{OLDEST_REDIS_PY}-venv"
    marker = venv / "built"
    # built again when the requirements change (its mark is a digest of setup.py)
    digest = hashlib.sha256((ROOT / "setup.py").read_bytes()).hexdigest()
    if not marker.exists() or marker.read_text().strip() != digest:
        shutil.rmtree(venv, ignore_errors=True)
        try:
            build(venv, python)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as error:
            details = getattr(error, "stderr", "") or ""
            if os.environ.get("CI"):
                pytest.fail(f"cannot build the oldest-versions environment: {details[-2000:]}")
            pytest.skip(f"cannot build the oldest-versions environment: {details[-300:]}")
        marker.write_text(digest + "\n")
    inner = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider",
         *(f"--deselect=tests/{name}" for name in LEFT_OUT), "tests"],
        cwd=ROOT, capture_output=True, text=True, timeout=800,
        env={**os.environ, "LIMPYD_BLUEQUE_INNER_RUN": "1"})
    probe = "import sys, redis; print(sys.version.split()[0], redis.__version__)"
    versions = subprocess.run([str(venv / "bin" / "python"), "-c", probe],
                              capture_output=True, text=True).stdout.split()
    summary = inner.stdout.strip().splitlines()[-1] if inner.stdout.strip() else inner.stderr[-500:]
    assert inner.returncode == 0, f"Python {versions}: {inner.stdout[-4000:]}{inner.stderr[-2000:]}"
    assert versions[1] == OLDEST_REDIS_PY
    assert " passed" in summary and " failed" not in summary
