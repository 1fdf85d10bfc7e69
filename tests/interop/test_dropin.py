"""The drop-in, as a blueque 1.0.1 application sees it.

The cases of the reference package's own integration test (its published sdist ships no
tests, so `reference_cases/` holds an equivalent of each, plus a ForkingRunner script)
run in the reference's virtualenv with `import blueque` resolving to limpyd-blueque.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest
from reference import REPO, ensure_venv

from limpyd_blueque import Client, InvalidTransition, TaskNotFound
from limpyd_blueque.models import Job

pytestmark = pytest.mark.timeout(600)
TESTS = REPO / "tests"
CASES = 6


def _with_drop_in(python) -> None:
    """Install limpyd-blueque's own dependencies in the reference's virtualenv (once)."""
    check = subprocess.run([str(python), "-c", "import limpyd, psutil, setproctitle"],
                           capture_output=True)
    if check.returncode:
        done = subprocess.run([str(python), "-m", "pip", "install", "-q",
                               "--disable-pip-version-check", "-e", str(REPO)],
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]


def test_the_reference_integration_cases_pass_against_the_drop_in(redis_url):
    python = ensure_venv()
    _with_drop_in(python)
    env = {**os.environ, "REDIS_URI": redis_url,
           "PYTHONPATH": os.pathsep.join([str(TESTS / "as_blueque"), str(REPO)])}
    done = subprocess.run(
        [str(python), "-m", "unittest", "discover", "-v", "-s", str(TESTS / "reference_cases"),
         "-p", "reference_*.py"], env=env, capture_output=True, text=True, timeout=300)
    output = done.stdout + done.stderr
    print(output)
    assert done.returncode == 0, output[-4000:]
    assert re.search(rf"^Ran {CASES} tests", output, re.M), output[-2000:]
    which = "import blueque; print(blueque.Client.__module__)"
    resolved = subprocess.run([str(python), "-c", which],
                              env=env, capture_output=True, text=True)
    assert resolved.stdout.strip() == "limpyd_blueque.client"


def test_an_unknown_task_raises_through_the_models_but_reads_as_empty_through_the_client(
        redis_url, database):
    with pytest.raises(TaskNotFound):
        Job.lazy_connect("nothing").data()
    task = Client(redis_url).get_task("nothing")
    assert (task.id, task.status, task.pid, task.attempt) == ("nothing", None, None, 0)


def test_refusing_to_delete_an_unfinished_task_is_also_a_value_error(redis_url, database):
    client = Client(redis_url)
    queue = client.get_queue("q")
    task = client.get_task(queue.enqueue("x"))
    with pytest.raises(InvalidTransition) as refused:
        queue.delete_task(task)
    assert isinstance(refused.value, ValueError)
    assert client.get_task(task.id).status == "pending"
