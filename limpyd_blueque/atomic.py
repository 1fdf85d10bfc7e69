"""The atomic steps of the Blueque protocol: one Lua script per step, one call each.

Scripts live in `lua/*.lua`, each with a header naming its KEYS and ARGV. `Scripts`
registers them once per Redis client and gives each step a Python method that builds
the keys (from `keys.KeySpace`) and decodes the reply. Nothing else calls Lua.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from typing import Iterable, Sequence

import redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .connection import reaching
from .exceptions import TaskExists
from .keys import KeySpace

SCRIPT_NAMES = (
    "enqueue", "schedule", "enqueue_due", "reserve", "start", "finish", "delete",
    "add_listener", "remove_listener", "materialize", "requeue", "renew", "recover",
    "tidy",
)


#: scripts that act for a task's holder get the shared holder check prepended
HOLDER_SCRIPTS = ("start", "finish", "requeue")


def _load(name: str) -> str:
    folder = resources.files(__package__).joinpath("lua")
    source = folder.joinpath(f"{name}.lua").read_text()
    if name in HOLDER_SCRIPTS:
        source = folder.joinpath("_holder.lua").read_text() + source
    return source


def _str(value: object) -> str:
    """Format a number or text for ARGV; None means 'not given'."""
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)


#: a lease length meaning "no expiry, whatever the task or its queue say": for callers
#: that do not renew leases (the drop-in client's listener)
NEVER_EXPIRES = "never"


@dataclass(frozen=True)
class Reservation:
    """A task a listener has just taken: which queue, which id, its hash after the step."""

    queue: str
    task_id: str
    fields: dict
    dropped: list = field(default_factory=list)
    #: the lease length given to the task (None: no expiry)
    ttr: float | None = None
    #: its queue's maximum run time, if the queue has one
    queue_max_run_time: float | None = None

    @property
    def attempt(self) -> int:
        return int(self.fields.get("attempt") or 0)


@dataclass(frozen=True)
class Outcome:
    """What a guarded step did: `done`, or why not (`missing`, or the task's state)."""

    done: bool
    missing: bool = False
    status: str | None = None
    node: str | None = None
    attempt: str | None = None

    @classmethod
    def from_reply(cls, reply: list) -> "Outcome":
        code = int(reply[0])
        if code == 1:
            return cls(True)
        if code == -1:
            return cls(False, missing=True)
        return cls(False, status=reply[1], node=reply[2] or None, attempt=reply[3] or None)


class Scripts:
    """The protocol steps on one Redis client, for one key space."""

    def __init__(self, client: redis.Redis, keys: KeySpace) -> None:
        self.client = client
        self.keys = keys
        self._scripts = {name: client.register_script(_load(name)) for name in SCRIPT_NAMES}
        # Load them all in one round trip now, so that no step pays for a NOSCRIPT
        # retry later (redis-py still reloads them if the server forgets them).
        with reaching(client), client.pipeline(transaction=False) as pipe:
            for script in self._scripts.values():
                pipe.script_load(script.script)
            pipe.execute()

    def _run(self, name: str, keys: Sequence[str], args: Iterable[object]) -> object:
        try:
            return self._scripts[name](keys=list(keys), args=[_str(a) for a in args])
        except ResponseError as error:
            if "TASKEXISTS" in str(error):
                task_id = str(error).split("TASKEXISTS", 1)[1].strip()
                raise TaskExists(f"a task with id {task_id!r} exists already") from None
            raise
        except (RedisConnectionError, RedisTimeoutError):
            with reaching(self.client):  # the error again, naming the server
                raise

    def enqueue(self, queue: str, tasks: Sequence[tuple[str, str]], now: float) -> int:
        """Create pending tasks `(id, parameters)` and push them, all or none."""
        k = self.keys
        keys = [k.queues, k.pending(queue), *(k.task(task_id) for task_id, _ in tasks)]
        args: list[object] = [queue, now, k.wake_channel(queue)]
        for task_id, parameters in tasks:
            args += [task_id, parameters]
        return int(self._run("enqueue", keys, args))

    def schedule(self, queue: str, task_id: str, parameters: str, eta: float, now: float) -> None:
        """Create a scheduled task, due at `eta`."""
        k = self.keys
        self._run("schedule", [k.queues, k.scheduled(queue), k.task(task_id)],
                  [queue, now, eta, task_id, parameters])

    def enqueue_due(self, queue: str, now: float, limit: int = 0) -> list[str]:
        """Move the due scheduled tasks of a queue to its pending list; return their ids."""
        k = self.keys
        return list(self._run("enqueue_due", [k.scheduled(queue), k.pending(queue)],
                              [now, k.task_prefix, k.wake_channel(queue), limit]))

    def reserve(self, queues: Sequence[str], listener_id: str, now: float,
                pid: int | None = None, ttrs: Sequence[float | None] | None = None,
                pstart: str | None = None) -> tuple[Reservation | None, list[str]]:
        """Take the next pending task of the first queue that has one.

        With `pid`, the task is started by that pid (whose start time is `pstart`) in
        the same step. A task's lease length is its own `ttr`, else its queue's, else
        the one given here for its queue in `ttrs`. Returns the
        reservation (or None) and the ids dropped on the way (no hash, not pending).
        """
        k = self.keys
        keys: list[str] = []
        for queue in queues:
            keys += [k.pending(queue), k.reserved(queue, listener_id), k.leases(queue),
                     k.started(queue), k.queue_settings(queue)]
        ttrs = list(ttrs) if ttrs is not None else [None] * len(queues)
        index, task_id, flat, dropped, ttr, max_run_time = self._run(
            "reserve", keys, [k.task_prefix, listener_id, now, pid, pstart, *ttrs])
        dropped = list(dropped)
        if not int(index):
            return None, dropped
        fields = dict(zip(flat[::2], flat[1::2]))
        return Reservation(queues[int(index) - 1], task_id, fields, dropped,
                           float(ttr) if ttr else None,
                           float(max_run_time) if max_run_time else None), dropped

    def start(self, queue: str, task_id: str, listener_id: str, pid: int, now: float,
              attempt: int | str | None = None, pstart: str | None = None) -> Outcome:
        """Record that process `pid` (started at `pstart`) runs a reserved task."""
        k = self.keys
        reply = self._run("start", [k.task(task_id), k.started(queue)],
                          [task_id, listener_id, pid, now, attempt, pstart])
        return Outcome.from_reply(reply)

    def finish(self, queue: str, task_id: str, listener_id: str, status: str, value: str,
               now: float, pid: int | None = None, attempt: int | str | None = None) -> Outcome:
        """Complete or fail a task held by `listener_id` (and `attempt`, when given)."""
        k = self.keys
        keys = [k.task(task_id), k.reserved(queue, listener_id), k.started(queue),
                k.finished(queue, status), k.leases(queue)]
        reply = self._run("finish", keys,
                          [task_id, listener_id, pid, status, value, now, attempt])
        return Outcome.from_reply(reply)

    def delete(self, queue: str, task_id: str) -> Outcome:
        """Delete a complete or failed task of `queue`."""
        k = self.keys
        reply = self._run("delete", [k.task(task_id), k.complete(queue), k.failed(queue)],
                          [task_id, queue])
        if int(reply[0]) == 0:
            return Outcome(False, status=reply[1], node=None, attempt=None)
        return Outcome.from_reply(reply)

    def requeue(self, queue: str, task_id: str, listener_id: str, now: float, *,
                attempt: int | str | None = None, eta: float | None = None,
                error: str | None = None, front: bool = False,
                priority_delta: float | None = None) -> Outcome:
        """Put a task held by `listener_id` back: pending now, or scheduled at `eta`."""
        k = self.keys
        keys = [k.task(task_id), k.reserved(queue, listener_id), k.started(queue),
                k.pending(queue), k.scheduled(queue), k.leases(queue)]
        reply = self._run("requeue", keys, [
            task_id, listener_id, attempt, now, eta, error, k.wake_channel(queue),
            "front" if front else "back", priority_delta])
        return Outcome.from_reply(reply)

    def renew(self, leases: Sequence[tuple[str, str, int | str, float | None]],
              now: float) -> dict[str, str]:
        """Extend the leases `(queue, task id, attempt, ttr)`.

        Returns `{task id: status}` for the tasks whose lease is lost (status `''` when
        the task is gone).
        """
        if not leases:
            return {}
        k = self.keys
        keys: list[str] = []
        args: list[object] = [now]
        for queue, task_id, attempt, ttr in leases:
            keys += [k.task(task_id), k.leases(queue)]
            args += [task_id, attempt, ttr]
        flat = self._run("renew", keys, args)
        return dict(zip(flat[::2], flat[1::2]))

    def recover(self, tasks: Sequence[tuple[str, str, int | str | None, str | None]],
                now: float, *, expired_only: bool, max_attempts: int | None,
                why: str) -> dict[str, str]:
        """Take back held tasks `(queue, task id, attempt, holder)` whose holder is gone.

        A task whose attempt or holder (listener id) is not the one given (None: any) is
        skipped: it changed hands since the caller looked. With `expired_only`, a task is
        taken only if its lease ended (by the server's clock). Each goes back to pending
        (at the front), or fails once it used `max_attempts` (a task's or its queue's own
        maximum comes first). Returns `{task id: outcome}` with outcome 'pending',
        'failed' or 'skipped'.
        """
        if not tasks:
            return {}
        k = self.keys
        keys: list[str] = []
        args: list[object] = [now, "expired" if expired_only else "dead", max_attempts, why]
        for queue, task_id, attempt, holder in tasks:
            keys += [k.task(task_id), k.leases(queue), k.pending(queue), k.failed(queue),
                     k.started(queue), k.queue_settings(queue)]
            args += [task_id, k.reserved(queue, ""), k.wake_channel(queue), attempt, holder]
        flat = self._run("recover", keys, args)
        return dict(zip(flat[::2], flat[1::2]))

    def tidy(self, action: str, task_id: str, key: str, kind: str, statuses: str,
             member: object = "") -> bool:
        """One deep-clean fix, re-checked atomically: 'relist' or 'unlist' a task in `key`."""
        return bool(self._run("tidy", [self.keys.task(task_id), key],
                              [action, kind, task_id, member, statuses]))

    def add_listener(self, queue: str, listener_id: str) -> bool:
        k = self.keys
        return bool(self._run("add_listener", [k.listeners(queue), k.queues],
                              [listener_id, queue]))

    def remove_listener(self, queue: str, listener_id: str) -> bool:
        k = self.keys
        return bool(self._run("remove_listener", [k.listeners(queue), k.queues],
                              [listener_id, queue]))

    def materialize(self, destination: str, sources: Sequence[tuple[str, str, str]],
                    expire: int = 60) -> int:
        """Fill `destination` with ids from `(key, kind, status)` sources whose status matches."""
        keys = [destination, *(key for key, _, _ in sources)]
        args = [self.keys.task_prefix, expire, *(f"{kind} {status}" for _, kind, status in sources)]
        return int(self._run("materialize", keys, args))
