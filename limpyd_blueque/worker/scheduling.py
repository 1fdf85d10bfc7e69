"""Moving due scheduled tasks to pending, ticking due periodic tasks, and telling the tasks
that wait for finished ones, as every worker does for its queues."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Callable

from redis.exceptions import RedisError

from ..exceptions import LimpydBluequeError, ProtocolError
from ..models import dependencies
from ..models.periodic import tick_due
from ..protocol.options import DEFAULT_RETENTION, Retention

if TYPE_CHECKING:
    from ..models import Queue

logger = logging.getLogger(__name__)
#: most due scheduled tasks one script moves to pending
DUE_CHUNK = 1000


class DueTasks:
    """Every `interval` seconds, expires the waiting tasks of some queues past their ttl,
    moves their due scheduled tasks to pending, then enqueues the due ticks of their
    periodic tasks."""

    def __init__(self, queues: list[Queue], interval: float,
                 log: Callable[..., None] | None = None) -> None:
        self.queues = queues
        self.interval = interval
        self.log = log or (lambda message, level=logging.INFO: logger.log(level, message))
        self.next_due = 0.0  # time.monotonic() of the next move

    def move(self) -> int:
        """Move the due tasks and tick the due periodic tasks if it is time; the number of
        tasks moved or enqueued."""
        now = time.monotonic()
        if now < self.next_due:
            return 0
        self.next_due = now + self.interval
        total = 0
        for queue in self.queues:
            self._expire(queue)
        for queue in self.queues:
            total += self._move(queue)
        for queue in self.queues:
            total += self._tick(queue)
        return total

    def _expire(self, queue: Queue) -> int:
        """Expire one queue's waiting tasks past their ttl, in chunks; a queue whose keys
        are broken is logged and skipped."""
        total = 0
        while True:
            try:
                expired = queue.expire_due(limit=DUE_CHUNK)
            except ProtocolError as error:
                self.log(f"[{queue.pk.get()}] tasks past their ttl not expired: {error}",
                         logging.ERROR)
                return total
            total += len(expired)
            if expired:
                self.log(f"[{queue.pk.get()}] {len(expired)} task(s) expired: not started "
                         "within their ttl", logging.INFO)
            if len(expired) < DUE_CHUNK:
                return total

    def _tick(self, queue: Queue) -> int:
        """Tick one queue's due periodic tasks; a queue whose periodic keys are broken is
        logged and skipped."""
        try:
            return tick_due(queue.scripts(), queue.pk.get(), self.log)
        except ProtocolError as error:
            self.log(f"[{queue.pk.get()}] periodic tasks not ticked: {error}", logging.ERROR)
            return 0

    def _move(self, queue: Queue) -> int:
        """Move one queue's due tasks; a queue whose keys are broken is logged and skipped."""
        total = 0
        while True:  # in chunks: one script never holds Redis long
            try:
                moved = queue.enqueue_due(limit=DUE_CHUNK)
            except ProtocolError as error:
                self.log(f"[{queue.pk.get()}] due tasks not moved: {error}", logging.ERROR)
                return total
            total += len(moved)
            if moved:
                self.log(f"[{queue.pk.get()}] {len(moved)} scheduled task(s) now pending",
                         logging.DEBUG)
            if len(moved) < DUE_CHUNK:
                return total


class Followers:
    """Every `interval` seconds, tells the tasks waiting for finished tasks of some queues
    whose end was not followed yet (the process that finished them died first: see
    `models.dependencies`), and every `repair_interval` seconds checks a chunk of their
    long-waiting tasks (`dependencies.repair`)."""

    def __init__(self, queues: list[Queue], interval: float = 0.5,
                 repair_interval: float = 60.0, retention: Retention = DEFAULT_RETENTION,
                 log: Callable[..., None] | None = None) -> None:
        self.queues = queues
        self.interval = interval
        self.repair_interval = repair_interval
        self.retention = retention
        self.log = log or (lambda message, level=logging.INFO: logger.log(level, message))
        self.next_due = 0.0
        self.next_repair = time.monotonic() + repair_interval
        self.cursors: dict[str, int] = {}

    def follow(self) -> int:
        """Follow up if it is time; the number of finished tasks followed."""
        now = time.monotonic()
        if now < self.next_due or not self.queues:
            return 0
        self.next_due = now + self.interval
        scripts = self.queues[0].scripts()
        names = [queue.pk.get() for queue in self.queues]
        try:
            followed = dependencies.follow_up(scripts, names, self.retention)
            if now >= self.next_repair:
                self.next_repair = now + self.repair_interval
                for name in names:
                    self.cursors[name] = dependencies.repair(
                        scripts, name, self.cursors.get(name, 0), retention=self.retention)
        except (LimpydBluequeError, RedisError) as error:
            self.log(f"finished tasks not followed up: {error}", logging.ERROR)
            return 0
        return followed
