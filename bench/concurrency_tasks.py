"""The task of bench/concurrency.py, imported by its `blueque-worker` through --pythonpath.

`sleep_task` (the worker's `--callback`) pushes the time its body starts to the Redis list
named by its parameters, on the connection the task process already has, then sleeps:
the benchmark's long tasks sleep longer than the measurement lasts (they are killed at
its end), its pickup probes do not sleep at all.
"""

from __future__ import annotations

import json
import time
from typing import Any


def sleep_task(job: Any, queue: Any) -> None:
    """Parameters `{"sleep": seconds, "stamp": list key}`: stamp the start, then sleep."""
    params = json.loads(job.known["parameters"])
    job.client().rpush(params["stamp"], repr(time.time()))
    if params["sleep"] > 0:
        time.sleep(params["sleep"])
