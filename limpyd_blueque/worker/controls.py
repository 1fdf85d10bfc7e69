"""What operators ask of a running worker, read twice a second in one round trip:
which of its queues are paused (`Queue.pause`), its own order (`Queue.tell_worker`:
`quiet`, take no new task; `stop`, stop as on SIGTERM), which of its queues have a
limit of their own (`Queue.set_limit`: the reserve step reads only theirs), and their
retry settings (`Queue.configure`). The worker's loop asks
`open_queues` before each reserve, so a paused queue gets no new task from it half a
second after the pause at most (a second with a slow Redis), whatever its wait timeout."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..models import Queue

#: seconds between two reads of the pauses and orders: half the second a pause promises
CONTROLS_INTERVAL = 0.5


class Controls:
    """The pauses and the order of one worker (`worker_id`) on its `queues`."""

    def __init__(self, queue_model: type[Queue], worker_id: str, queues: Sequence[str],
                 interval: float = CONTROLS_INTERVAL) -> None:
        self.queue_model = queue_model
        self.worker_id = worker_id
        self.queues = list(queues)
        self.interval = interval
        self.paused: frozenset[str] = frozenset()
        self.order: str | None = None
        #: until the first read, every queue may have a limit: the reserve step reads it
        self.limited: frozenset[str] = frozenset(self.queues)
        #: each queue's own retry settings and bounds at the last read (a task process is
        #: handed its queue's: it decides its retry without a read of its own)
        self.terms: Mapping[str, Mapping[str, str]] = {}
        self._next = 0.0

    def refresh(self) -> bool:
        """Read the pauses and the order when `interval` passed since the last read; True
        when what the worker may do changed."""
        if time.monotonic() < self._next:
            return False
        self._next = time.monotonic() + self.interval
        controls = self.queue_model.worker_controls(self.worker_id, self.queues)
        changed = (controls.paused, controls.order) != (self.paused, self.order)
        self.paused, self.order, self.limited = controls.paused, controls.order, controls.limited
        self.terms = controls.terms
        return changed

    def unlimited(self) -> frozenset[str]:
        """The worker's queues known to have no limit of their own, at the last read."""
        return frozenset(self.queues) - self.limited

    def open_queues(self) -> list[str]:
        """The queues the worker may take a task from now, in its order of preference
        (none while it is quiet or told to stop)."""
        if self.order is not None:
            return []
        return [name for name in self.queues if name not in self.paused]

    def until_due(self) -> float:
        """Seconds to the next read (infinity once the worker is told to stop)."""
        if self.order == "stop":
            return math.inf
        return max(self._next - time.monotonic(), 0.0)

    def forget(self) -> None:
        """A new worker of this id: an order left for an earlier one does not apply."""
        self.queue_model.tell_worker(self.worker_id, None)
