"""docs/operating.rst quotes a real run of docs/operators_day.py: the run still works, and
types the commands the page quotes, in its order, each answering as the page shows (the
values differ from run to run: ids, times, progress)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
TASK_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def transcript(lines):
    """[(command, first word of its answer)] of each `$ blueque` line (the page's quoted
    lines are indented), task ids left out."""
    lines = [line[4:] if line.startswith("    ") else line for line in lines]
    found = []
    for number, line in enumerate(lines):
        if line.startswith("$ blueque"):
            answer = next((later for later in lines[number + 1:] if later.strip()), "")
            found.append((TASK_ID.sub("<id>", line), answer.split()[0]))
    return found


@pytest.mark.timeout(120)
def test_the_operators_day_runs_and_types_the_commands_the_page_quotes():
    environment = {name: value for name, value in os.environ.items() if name != "REDIS_URL"}
    run = subprocess.run([sys.executable, str(DOCS / "operators_day.py")],
                         capture_output=True, text=True, timeout=110, env=environment)
    assert run.returncode == 0, run.stderr[-3000:]
    quoted = transcript((DOCS / "operating.rst").read_text().split("\n"))
    assert len(quoted) >= 10
    assert quoted == transcript(run.stdout.split("\n"))
