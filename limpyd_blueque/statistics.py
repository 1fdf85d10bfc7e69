"""Statistics of queues in O(1), whatever their size: how many tasks each status holds,
read from the length of the structures that file them (which every Blueque client keeps
true, the reference included), and how many times each operation ran, counted by the
scripts themselves in `<prefix>:stats:<queue>` (operations of other Blueque clients are
not counted there).

The shape is Tarantool's queue's `statistics()`: `{"tasks": {...}, "calls": {...}}`,
with its names (`ready`, `taken`, `done`, `delayed`, `buried`, `total`) beside ours.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis

from .connection import reaching
from .keys import STATUS_STRUCTURES, KeySpace
from .statuses import Status

#: the operations the scripts count, each `calls.<name>` in the counters hash
CALLS = ("put", "take", "ack", "fail", "release", "requeue", "bury", "kick", "delete",
         "touch", "cancel", "expire")
_LENGTH = {"list": "llen", "zset": "zcard", "started": "scard"}


def _queue_commands(pipe: Any, keys: KeySpace, name: str) -> list[str]:
    """Queue the O(1) reads of one queue's figures on `pipe`; the label of each."""
    labels = []
    for status in STATUS_STRUCTURES:
        for key, kind in keys.structures_of(name, status):
            getattr(pipe, _LENGTH[kind])(key)
            labels.append(status.value)
    pipe.zcard(keys.stalled(name))
    labels.append("stalled")
    pipe.hgetall(keys.statistics(name))
    labels.append("calls")
    return labels


def _figures(labels: list[str], values: list[Any]) -> dict[str, dict[str, int]]:
    """One queue's statistics from its reads (see `_queue_commands`)."""
    tasks = {status.value: 0 for status in Status}
    stalled = 0
    calls = {name: 0 for name in CALLS}
    for label, value in zip(labels, values):
        if label == "calls":
            for field, count in dict(value).items():
                if str(field).startswith("calls.") and str(count).lstrip("-").isdigit():
                    calls[str(field)[6:]] = int(count)
        elif label == "reserved":
            tasks["taken"] = int(value)  # the lease set: reserved and started alike
        elif label == "stalled":
            stalled = int(value)
        else:
            tasks[label] += int(value)
    # started tasks are in the lease set too, unless a Blueque client started them
    tasks["taken"] = max(tasks["taken"], tasks["started"])
    tasks["reserved"] = tasks["taken"] - tasks["started"]
    tasks["total"] = sum(tasks[status.value] for status in Status)
    tasks.update(ready=tasks["pending"], done=tasks["complete"], delayed=tasks["scheduled"],
                 stalled=stalled)
    return {"tasks": tasks, "calls": calls}


def read(client: redis.Redis, keys: KeySpace, names: Sequence[str],
         ) -> dict[str, dict[str, dict[str, int]]]:
    """The statistics of each queue of `names`, in one round trip: `{name: {"tasks":
    {status: count, ..., "total", "ready", "taken", "done", "delayed", "stalled" (running
    tasks flagged stalled, counted in "started" too)}, "calls":
    {operation: count}}}`. Held tasks are counted from the lease set and the started set:
    a task a Blueque client reserved but did not start yet counts once `blueque reindex`
    or a deep clean gave it a lease entry."""
    with client.pipeline(transaction=False) as pipe:
        labels = [_queue_commands(pipe, keys, name) for name in names]
        with reaching(client):
            values = pipe.execute(raise_on_error=False)
    result, start = {}, 0
    for name, queue_labels in zip(names, labels):
        own = values[start:start + len(queue_labels)]
        start += len(queue_labels)
        clean = [0 if isinstance(value, Exception) else value for value in own]
        clean[-1] = own[-1] if isinstance(own[-1], dict) else {}
        result[name] = _figures(queue_labels, clean)
    return result
