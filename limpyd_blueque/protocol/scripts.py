"""The atomic steps of the Blueque protocol: one Lua script per step, one call each.

Scripts live in `lua/*.lua`, each with a header naming its KEYS and ARGV. `Scripts`
registers them once per Redis client and gives each step a Python method that builds
the keys (from `keys.KeySpace`) and decodes the reply. Nothing else calls Lua.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from types import MappingProxyType
from typing import Any, Callable, Generic, NamedTuple, TypeVar

import redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..connection.errors import describe, reaching, translate
from ..exceptions import ProtocolError, QueueBusy, TaskExists
from .keys import KeySpace
from .options import DEFAULT_RETENTION, Retention, TaskOptions
from .statistics import DURATION_BOUNDS, THROUGHPUT_TTL, Tally

SCRIPT_NAMES = (
    "enqueue", "enqueue_options", "enqueue_due", "reserve", "start", "finish", "delete",
    "add_listener", "remove_listener", "materialize", "requeue", "renew", "recover",
    "tidy", "terms", "cancel", "retry", "tick", "bury", "touch", "kick", "expire_due", "empty",
    "report", "stall", "set_aside", "limit", "watch", "release", "depend", "add_parents",
    "reseal",
)

#: shared Lua functions, prepended to the scripts that use them, the last first (each
#: file may call what the files after it define)
SHARED = {
    # the holder check, letting a task go
    "_holder": ("start", "finish", "requeue", "bury", "touch", "report", "stall"),
    "_terms": ("reserve", "recover", "terms", "enqueue_options", "release"),  # lease terms, numbers
    # where a pending task waits, by its priority; the identifiers of waiting tasks
    "_line": ("enqueue_options", "enqueue_due", "reserve", "requeue", "recover", "cancel", "retry",
              "tidy", "kick", "expire_due", "delete", "empty", "finish", "bury", "release"),
    # the groups of a queue: their lines, fair turns, limits and slots
    "_groups": ("enqueue_options", "enqueue_due", "reserve", "requeue", "recover", "cancel",
                "retry", "tidy", "kick", "expire_due", "delete", "empty", "finish", "bury",
                "limit", "release"),
    # retention and throughput of finished tasks, cancel requests, filing a canceled task;
    # as _holder and _line call it
    "_finished": ("finish", "requeue", "bury", "recover", "cancel", "reserve", "expire_due",
                  "release"),
    # the type checks before a write
    "_types": ("enqueue", "enqueue_options", "enqueue_due", "reserve", "start", "finish", "delete",
               "add_listener", "remove_listener", "requeue", "renew", "recover", "tidy",
               "terms", "materialize", "cancel", "retry", "tick", "bury", "touch", "kick",
               "expire_due", "empty", "report", "stall", "limit", "watch", "release",
               "add_parents"),
}


def _load(name: str) -> str:
    """The source of script `name`: its file, after the shared definitions it uses (see
    `SHARED` and `_shaken`), with the bounds of `statistics` written in."""
    folder = resources.files(__package__).joinpath("lua")
    source = folder.joinpath(f"{name}.lua").read_text()
    shared = [folder.joinpath(f"{shared}.lua").read_text()
              for shared, users in reversed(SHARED.items()) if name in users]
    bounds = ", ".join(f"{bound:g}" for bound in DURATION_BOUNDS)
    return (_shaken(shared, source).replace("{DURATION_BOUNDS}", "{" + bounds + "}")
            .replace("{THROUGHPUT_TTL}", str(THROUGHPUT_TTL)))


#: a top-level definition of a shared file: `local function name(...)` or `local NAME = ...`
_DEFINITION = re.compile(r"local (?:function )?([A-Za-z_]\w*)")
_WORD = re.compile(r"[A-Za-z_]\w*")


def _shaken(shared: Sequence[str], body: str) -> str:
    """`body` after the definitions of the `shared` files (in their order) that it uses,
    directly or through another: Redis runs a script's whole text at every call, and
    making a function it never calls costs time at each one."""
    definitions: list[tuple[str, str]] = []  # (name, text with the comments above it)
    for text in shared:
        lines = text.splitlines(keepends=True)
        starts = []  # (line where a definition's text begins, its name)
        for number, line in enumerate(lines):
            match = _DEFINITION.match(line)
            if match:
                first = number
                while first > 0 and lines[first - 1].startswith("--"):
                    first -= 1
                starts.append((first, match[1]))
        ends = [first for first, _ in starts[1:]] + [len(lines)]
        definitions += [(defined, "".join(lines[first:end]))
                        for (first, defined), end in zip(starts, ends)]
    needed: set[str] = set()
    words = set(_WORD.findall(body))
    while True:
        more = {defined for defined, _ in definitions if defined in words} - needed
        if not more:
            break
        needed |= more
        for defined, text in definitions:
            if defined in more:
                words |= set(_WORD.findall(text))
    return "".join(text for defined, text in definitions if defined in needed) + body


def _quads(flat: Sequence[Any]) -> list[tuple[Any, ...]]:
    """A flat reply read four by four."""
    return [tuple(flat[index:index + 4]) for index in range(0, len(flat), 4)]


def _str(value: object) -> str:
    """Format a number or text for ARGV; None means 'not given'."""
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)


T = TypeVar("T")

#: a lease length meaning "no expiry, whatever the task or its queue say": for callers
#: that do not renew leases (the drop-in client's listener)
NEVER_EXPIRES = "never"


def _number(text: str | None) -> float | None:
    value = float(text) if text else None
    return value if value is not None and math.isfinite(value) else None


@dataclass(frozen=True)
class Reservation:
    """A task a listener holds, with the terms of its lease: the one shape of a task from
    its reservation to its outcome, and what a task process is handed.

    `fields` is the task hash right after the step (read-only). `ttr`, `max_run_time`
    and `max_attempts` are resolved once, by the step itself: the task's own field, else
    its queue's setting, else the worker's default (None: no limit).
    """

    task_id: str
    queue: str
    fields: Mapping[str, str]
    ttr: float | None = None
    max_run_time: float | None = None
    max_attempts: int | None = None
    #: seconds its progress may stay still before it is flagged stalled: its own, else
    #: its queue's (None: the worker's setting applies)
    stall_timeout: float | None = None
    #: the deadline of its lease as the step wrote it, in Redis's own text (None: not
    #: known); a beat that finds the lease still there knows it is the holder's own
    lease: str | None = None
    #: its queue's `result_ttl` and `failure_ttl` as the step read them ('-': unset), a
    #: term fixed when the task was taken, as the others; None when the step did not read
    #: them (the task has all its lease terms): the finish step reads them then
    queue_ttls: tuple[str, str] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", MappingProxyType(dict(self.fields)))

    @property
    def attempt(self) -> int:
        """The attempt that holds the task: its fencing token (0 when none)."""
        try:
            return int(self.fields.get("attempt") or 0)
        except ValueError:
            return 0

    @property
    def counted_attempts(self) -> int:
        """The attempts that count toward the task's maximum: those that were not a delay
        the task asked for (its `uncounted` field)."""
        try:
            return max(self.attempt - int(self.fields.get("uncounted") or 0), 0)
        except ValueError:
            return self.attempt

    @property
    def node(self) -> str | None:
        """The listener id holding the task."""
        return self.fields.get("node") or None

    def queue_ttl(self, status: str) -> str | None:
        """The queue's retention of a task finished with `status`, as the reserve step
        read it (None: not read)."""
        if self.queue_ttls is None:
            return None
        return self.queue_ttls[0] if status == "complete" else self.queue_ttls[1]

    @classmethod
    def from_reply(cls, task_id: str, queue: str, flat: Sequence[str],
                   terms: Sequence[str], lease: str | None = None,
                   queue_ttls: Sequence[str] = ()) -> Reservation:
        """From a script's reply: the task hash as a flat list, then its terms (ttr, max
        run time, max attempts, stall timeout), its lease's deadline as written, and its
        queue's retentions as read ('' when not read)."""
        ttr, max_run_time, max_attempts, stall_timeout = (
            _number(term) for term in [*terms, None, None, None][:4])
        ttls = tuple(str(ttl) for ttl in queue_ttls)
        return cls(task_id, queue, dict(zip(flat[::2], flat[1::2])), ttr, max_run_time,
                   int(max_attempts) if max_attempts else None, stall_timeout, lease or None,
                   (ttls[0], ttls[1]) if len(ttls) == 2 and all(ttls) else None)

    def to_payload(self) -> dict[str, Any]:
        """A JSON-able form, to hand the task to another process."""
        return {"task_id": self.task_id, "queue": self.queue, "fields": dict(self.fields),
                "ttr": self.ttr, "max_run_time": self.max_run_time,
                "max_attempts": self.max_attempts, "stall_timeout": self.stall_timeout,
                "lease": self.lease, "queue_ttls": self.queue_ttls}

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any]) -> Reservation:
        """The reservation `to_payload` described."""
        ttls = payload.get("queue_ttls")
        return cls(**{**payload, "queue_ttls": tuple(ttls) if ttls else None})


#: most entries one reserve step passes over (ids that are not pending tasks) before it
#: returns, so that a long run of bad entries never holds Redis for long
PASS_OVER_BOUND = 100


@dataclass(frozen=True)
class PassedOver:
    """What a reserve step passed over: ids that were not pending tasks (`dropped`: no
    hash, or filed elsewhere by their status), tasks `quarantined` (id -> their queue and
    the problem),
    queues skipped as `broken` (name -> the key of another type), and whether it
    stopped at its bound with `more` to pass over."""

    dropped: list[str]
    quarantined: dict[str, tuple[str, str]]
    broken: dict[str, str]
    more: bool
    expired: list[str] = field(default_factory=list)  # past their ttl: expired, not run
    #: for each broken queue, its key of another type and the type it must hold
    misfits: dict[str, tuple[str, str]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.dropped or self.quarantined or self.broken or self.more
                    or self.expired)

    @classmethod
    def from_reply(cls, queues: Sequence[str], dropped: Sequence[str],
                   quarantined: Sequence[str], broken: Sequence[Any], more: Any,
                   expired: Sequence[str]) -> PassedOver:
        """What the reserve step of `queues` says it passed over (see lua/reserve.lua)."""
        return cls(list(dropped),
                   {task_id: (queue, why) for queue, task_id, why
                    in zip(quarantined[::3], quarantined[1::3], quarantined[2::3])},
                   {queues[int(i) - 1]: f"{key or '?'} holds a {found}"
                    for i, key, found, _ in _quads(broken)},
                   bool(int(more)), list(expired),
                   {queues[int(i) - 1]: (key, kind) for i, key, _, kind in _quads(broken)
                    if key})


@dataclass(frozen=True)
class Beat:
    """Who beats: a worker's listener id, its machine, and its identity (JSON)."""

    worker_id: str
    machine: str
    identity: str


@dataclass(frozen=True)
class Renewal:
    """What a beat learned: leases lost, the other workers of the machine, the workers
    whose record ran out, and the server's time."""

    lost: dict[str, str]
    siblings: dict[str, str]
    expired: list[str]
    now: float
    revived: bool = False  # the worker's record was missing: it had been taken for dead
    #: per task watched: its `progress` field ('' when unset)
    watched: dict[str, str] = field(default_factory=dict)
    #: per lease kept: its deadline now, as Redis keeps it (see `Lease.written`)
    renewed: dict[str, str] = field(default_factory=dict)
    #: the running tasks of the queues read whose cancel was asked
    canceling: frozenset[str] = frozenset()


class Lease(NamedTuple):
    """A lease to renew: its task, the attempt holding it, its length (None: endless),
    and its deadline as this holder last wrote it (Redis's text; '' when not known)."""

    queue: str
    task_id: str
    attempt: int | str
    ttr: float | None
    written: str = ""


@dataclass(frozen=True)
class StepResult:
    """What a guarded step did: `done`, or why not (`missing`, or the task's state).
    `canceled`: done, the task filed as canceled (its cancel was asked while it ran)."""

    done: bool
    missing: bool = False
    status: str | None = None
    node: str | None = None
    attempt: str | None = None
    canceled: bool = False
    #: done, and the task's end listed for the tasks waiting for it or its workflow
    #: (see models/dependencies.py): they are to be told
    followed: bool = False

    @classmethod
    def from_reply(cls, reply: list[Any]) -> StepResult:
        code = int(reply[0])
        followed = len(reply) > 3 and reply[3] == "1"
        if code == 1:
            return cls(True, followed=followed)
        if code == 2:
            return cls(True, canceled=True, followed=followed)
        if code == -1:
            return cls(False, missing=True)
        return cls(False, status=reply[1], node=reply[2] or None, attempt=reply[3] or None)


class ScriptRunner:
    """The scripts of `lua/` registered on one Redis client, for one key space; `_run`
    calls one and turns its refusals into this library's errors."""

    def __init__(self, client: redis.Redis, keys: KeySpace) -> None:
        self.client = client
        self.keys = keys
        self._scripts = {name: client.register_script(_load(name)) for name in SCRIPT_NAMES}
        # Load them all in one round trip now, so that no step pays for a NOSCRIPT
        # retry later (redis-py still reloads them if the server forgets them). A cluster
        # client loads each on every primary, one command per script (redis-py refuses a
        # pipelined SCRIPT LOAD there).
        with reaching(client):
            if keys.cluster:
                for script in self._scripts.values():
                    client.script_load(script.script)
                return
            with client.pipeline(transaction=False) as pipe:
                for script in self._scripts.values():
                    pipe.script_load(script.script)
                pipe.execute()

    def _run(self, name: str, keys: Sequence[str], args: Iterable[object]) -> Any:
        """Run script `name` and return its reply; its refusals as this library's errors.

        EVALSHA is called here rather than through redis-py's `Script.__call__`, which
        spends more on the client than the command itself (an import at each call); a
        server that forgot the script (NOSCRIPT) gets it again, as redis-py would do."""
        # Any: a script's reply is whatever its Lua returns (numbers, text, nested lists);
        # each step below reads it as its script's header describes
        script = self._scripts[name]
        argv = [_str(a) for a in args]
        try:
            try:
                return self.client.evalsha(script.sha, len(keys), *keys, *argv)
            except NoScriptError:
                script.sha = self.client.script_load(script.script)
                return self.client.evalsha(script.sha, len(keys), *keys, *argv)
        except ResponseError as error:
            raise script_refusal(name, error, describe(self.client)) from None
        except (RedisConnectionError, RedisTimeoutError):
            with reaching(self.client):  # the error again, naming the server
                raise

    def _execute(self, plan: Plan[T]) -> T:
        """Run a planned step (see `Planner`) and read its reply."""
        return plan.read(self._run(plan.name, plan.keys, plan.args))

    def _reply(self, plan: Plan[Any]) -> Any:
        """The raw reply of a planned step, or the error it raised (as a pipeline gives
        them)."""
        try:
            with reaching(self.client):
                return self.client.evalsha(self._scripts[plan.name].sha, len(plan.keys),
                                           *plan.keys, *[_str(a) for a in plan.args])
        except ResponseError as error:
            return error

    def run(self, plan: Plan[T]) -> T:
        """Run a planned step and read its reply (refusals as this library's errors)."""
        return self._execute(plan)

    def run_all(self, plans: Sequence[Plan[Any]]) -> list[Any]:
        """Run planned steps in one round trip (a pipeline, in order; on a cluster, one call
        each), and read each reply. A step refused raises its error once every step ran
        (each step is whole on its own: those before and after it were done)."""
        if not plans:
            return []
        if self.keys.cluster:  # redis-py pipelines no script on a cluster: one call each
            replies = [self._reply(plan) for plan in plans]
        else:
            with reaching(self.client), self.client.pipeline(transaction=False) as pipe:
                for plan in plans:
                    pipe.evalsha(self._scripts[plan.name].sha, len(plan.keys), *plan.keys,
                                 *[_str(a) for a in plan.args])
                replies = pipe.execute(raise_on_error=False)
        read, refusal = [], None
        for plan, reply in zip(plans, replies):
            if isinstance(reply, NoScriptError):  # forgotten by the server: one at a time
                reply = self._run(plan.name, plan.keys, plan.args)
            elif isinstance(reply, ResponseError):
                refusal = refusal or script_refusal(plan.name, reply, describe(self.client))
                continue
            elif isinstance(reply, Exception):
                refusal = refusal or reply
                continue
            read.append(plan.read(reply))
        if refusal is not None:
            raise refusal
        return read


def script_refusal(name: str, error: ResponseError, where: str) -> Exception:
    """The error of this library a script's refusal stands for (else `error` itself);
    `where` names the server (for a full one: `RedisFull`)."""
    text = str(error)
    if "TASKEXISTS" in text:
        task_id = text.split("TASKEXISTS", 1)[1].strip()
        return TaskExists(f"a task with id {task_id!r} exists already")
    if "BADKEY" in text or "WRONGTYPE" in text:
        detail = text.split("BADKEY", 1)[1].strip() if "BADKEY" in text else text
        return ProtocolError(f"the {name} step refused: {detail!a}")
    return translate(error, where) or error


@dataclass(frozen=True)
class Plan(Generic[T]):
    """One step planned: the script it runs, its keys and arguments, and how its reply
    reads. A plan needs no client: the synchronous `Scripts` and the asyncio producers
    (`limpyd_blueque.aio`) run the same plans."""

    name: str
    keys: list[str]
    args: list[object]
    read: Callable[[Any], T]


#: the most queues a `Planner` keeps the enqueue keys of
ENQUEUE_BASES = 1024


class Planner:
    """The plans of the steps a producer takes (enqueue, cancel), for one key space."""

    def __init__(self, keys: KeySpace) -> None:
        self.keys = keys
        # the keys and wake-up channel of the enqueue step, by queue (see `_enqueue_base`)
        self._enqueue_bases: dict[str, tuple[tuple[str, ...], str]] = {}

    def _enqueue_base(self, queue: str) -> tuple[tuple[str, ...], str]:
        """The keys every enqueue on `queue` takes, and its wake-up channel: built once per
        queue (for the most recent queues: a producer sends to few), since a producer
        sending tasks one at a time would build them for each."""
        base = self._enqueue_bases.get(queue)
        if base is None:
            k = self.keys
            base = ((k.queue_index(queue), k.pending(queue), k.queue_settings(queue),
                     k.expiry(queue), k.statistics(queue)), k.wake_channel(queue))
            if len(self._enqueue_bases) >= ENQUEUE_BASES:
                self._enqueue_bases.clear()
            self._enqueue_bases[queue] = base
        return base

    def plain_enqueue(self, queue: str, tasks: Sequence[tuple[str, str, TaskOptions]],
                      now: float) -> tuple[list[str], list[str]] | None:
        """The keys and arguments of the enqueue script (lua/enqueue.lua) making `tasks`,
        when none has options (the common case, its own lighter script); else None."""
        for _, _, options in tasks:
            if options.packed:
                return None
        base, channel = self._enqueue_base(queue)
        task = self.keys.task
        keys = [*base, *[task(task_id) for task_id, _, _ in tasks]]
        args = [queue, _str(now), channel]
        for task_id, parameters, _ in tasks:
            args += (task_id, parameters)
        return keys, args

    def enqueue(self, queue: str, tasks: Sequence[tuple[str, str, TaskOptions]],
                now: float) -> Plan[list[tuple[str, bool]]]:
        """Create tasks `(id, parameters, options)`, pending or scheduled, all or none.

        Its reply reads, per task, as the id of its task and whether it was created: a
        task whose identifier maps to a waiting task of the queue gives that task's id.
        """
        plain = self.plain_enqueue(queue, tasks, now)
        if plain is not None:
            created = [(task_id, True) for task_id, _, _ in tasks]
            return Plan("enqueue", plain[0], [*plain[1]], lambda reply: created)
        k = self.keys
        packed = [options.packed for _, _, options in tasks]
        base, channel = self._enqueue_base(queue)
        keys = list(base)
        args: list[object] = [queue, now, channel]
        keys += [k.prioritized(queue), k.scheduled(queue), k.identifiers(queue),
                 k.utubes(queue), k.utube_waiting(queue)]
        args += ["1", k.task_prefix, k.utube_lists(queue), k.group_layout(queue),
                 k.dependency_layout(queue)]
        keys += [k.task(task_id) for task_id, _, _ in tasks]
        for (task_id, parameters, _), options in zip(tasks, packed):
            args += [task_id, parameters, options]
        return Plan("enqueue_options", keys, args, lambda flat: [
            (task_id, bool(int(done))) for task_id, done in zip(flat[::2], flat[1::2])])

    def watch(self, task_id: str) -> Plan[Watched | None]:
        """Mark a task as waited for (the step that finishes it then publishes its status
        on `KeySpace.outcome_channel`) and read its outcome; None when there is no such
        task."""
        return Plan("watch", [self.keys.task(task_id)], [self.keys.outcome_channel(task_id)],
                    _watched)

    def cancel(self, queue: str, task_id: str, now: float,
               retention: Retention = DEFAULT_RETENTION) -> Plan[StepResult]:
        """Cancel a waiting (pending or scheduled) task of `queue` at once (`done`), or
        ask its holder to stop a running one (`status` 'requested', `node` its holder)."""
        k = self.keys
        keys = [k.task(task_id), k.pending(queue), k.prioritized(queue), k.scheduled(queue),
                k.identifiers(queue), k.canceled(queue), k.expiry(queue), k.statistics(queue),
                k.utubes(queue), k.utube_waiting(queue), k.queue_settings(queue),
                k.retention(queue), k.throughput(queue, int(now // 60)), k.canceling(queue),
                k.waiting(queue), k.after(queue, task_id)]
        return Plan("cancel", keys, [task_id, queue, now, k.utube_lists(queue), k.task_prefix,
                                     k.wake_channel(queue), retention.result_ttl,
                                     retention.failure_ttl, k.group_layout(queue)],
                    _cancel_result)


    # -- dependencies (see models/dependencies.py) ---------------------------------------
    def depend(self, queue: str, pairs: Sequence[tuple[str, str, str]]) -> Plan[list[str]]:
        """Make tasks of `queue` tell waiting tasks when they finish: `pairs` of (parent
        id, waiting task's queue, its id). Its reply reads, per pair, as '' when the
        parent now tells it, else the parent's finished status ('gone': deleted)."""
        k = self.keys
        args: list[object] = [k.children_sets(queue), k.ended(queue)]
        for parent, child_queue, child in pairs:
            args += [parent, f"{child_queue} {child}"]
        return Plan("depend", [k.task(parent) for parent, _, _ in pairs], args,
                    lambda reply: [str(status) for status in reply])

    def release(self, queue: str, items: Sequence[tuple[str, str, str]], now: float,
                retention: Retention = DEFAULT_RETENTION) -> Plan[tuple[int, int]]:
        """Tell waiting tasks of `queue` that a parent finished, `items` of (task id,
        parent id or '' for none, the parent's status), and release those that wait for
        nothing more (see lua/release.lua). Its reply reads as (released, ended)."""
        k = self.keys
        keys = [k.pending(queue), k.prioritized(queue), k.scheduled(queue), k.expiry(queue),
                k.statistics(queue), k.utubes(queue), k.utube_waiting(queue),
                k.canceled(queue), k.failed(queue), k.queue_settings(queue),
                k.retention(queue), k.throughput(queue, int(now // 60))]
        args: list[object] = [queue, now, k.wake_channel(queue), k.utube_lists(queue),
                              k.task_prefix, k.group_layout(queue),
                              k.dependency_layout(queue), retention.result_ttl,
                              retention.failure_ttl]
        for item in items:
            args += item
        return Plan("release", keys, args, lambda reply: (int(reply[0]), int(reply[1])))

    def add_parents(self, queue: str, task_id: str, parents: Sequence[str]) -> Plan[bool]:
        """Make a waiting task of `queue` also wait for `parents`; False when it is not
        waiting (nothing changed)."""
        return Plan("add_parents", [self.keys.task(task_id), self.keys.after(queue, task_id)],
                    list(parents), lambda reply: bool(int(reply)))


@dataclass(frozen=True)
class Watched:
    """A task's outcome as a waiting producer reads it (see `Planner.watch`): its status,
    its stored result and error, its attempt, and the codec and the encryption its result
    is stored with ('' when unset)."""

    status: str
    result: str
    error: str
    attempt: str
    codec: str = ""
    encrypted: str = ""


def _watched(reply: list[Any]) -> Watched | None:
    return Watched(*reply) if reply else None


def _cancel_result(reply: list[Any]) -> StepResult:
    if int(reply[0]) == 0:
        return StepResult(False, status=reply[1])
    if int(reply[0]) == 2:
        return StepResult(False, status="requested", node=reply[1] or None)
    return StepResult.from_reply(reply)


class Upkeep:
    """The steps that keep the queues healthy rather than move one task along: leases and
    liveness (`renew`), taking back (`recover`, `terms`), the deep clean (`tidy`, `unmap`,
    `reline`), collection filtering (`materialize`) and the periodic tasks' ticks (`tick`)."""

    def __init__(self, runner: ScriptRunner) -> None:
        self._run = runner._run
        self.keys = runner.keys
        self.client = runner.client

    def terms(self, queue: str, task_id: str, ttr: float | None,
              max_run_time: float | None, max_attempts: int | None) -> Reservation | None:
        """A task held by another listener, read with its lease terms resolved as
        `reserve` resolves them (for adoption); None when the task is gone."""
        k = self.keys
        flat, *terms = self._run("terms", [k.task(task_id), k.queue_settings(queue)],
                                 [ttr, max_run_time, max_attempts])
        if not flat:
            return None
        return Reservation.from_reply(task_id, queue, flat, terms)

    def renew(self, leases: Sequence[Lease], *, beat: Beat | None = None,
              liveness_timeout: float = 0.0, alive_for: Mapping[str, float] | None = None,
              watched: Sequence[str] = (), canceling: Sequence[str] = ()) -> Renewal:
        """Extend `leases` and, for a worker's `beat`, record that it is alive for
        `liveness_timeout` seconds, in one step.

        A task of `alive_for` is marked alive that many more seconds (its `alive_until`
        field): its own process speaks for it, whatever becomes of its worker's record.
        For each task id of `watched`, the renewal tells how far its progress is; for
        the queues of `canceling`, which of their running tasks were asked to cancel
        (see `Renewal`). The commands it runs grow with the queues, not with the leases,
        but for one read of each lease not renewed since its reservation (see
        lua/renew.lua).
        """
        if self.keys.cluster:
            return self._renew_by_slot(leases, beat, liveness_timeout, alive_for or {},
                                       watched, canceling)
        return self._renew(leases, beat, liveness_timeout, alive_for, watched, canceling)

    def _renew(self, leases: Sequence[Lease], beat: Beat | None, liveness_timeout: float,
               alive_for: Mapping[str, float] | None, watched: Sequence[str],
               canceling: Sequence[str], stand_in: str | None = None) -> Renewal:
        """`renew` in one step. Without a `beat`, the worker's record keys are not touched:
        `stand_in`, a key of the leases' slot, is named in their place (the cluster key
        mode, where they are in another slot)."""
        k = self.keys
        machine = beat.machine if beat is not None else ""
        queues = list(dict.fromkeys([lease.queue for lease in leases] + list(canceling)))
        index = {queue: number for number, queue in enumerate(queues, 1)}
        keys: list[str] = ([stand_in] * 3 if stand_in is not None and beat is None else
                           [k.workers, k.workers_info, k.machine_workers(machine)])
        for queue in queues:
            keys += [k.leases(queue), k.canceling(queue)]
        keys += [k.task(lease.task_id) for lease in leases]
        keys += [k.task(task_id) for task_id in watched]
        args: list[object] = [beat.worker_id if beat else "", liveness_timeout,
                              beat.identity if beat else "", len(queues), len(leases),
                              k.task_prefix, "1" if canceling else ""]
        alive_for = alive_for or {}
        for lease in leases:
            args += [index[lease.queue], lease.task_id, lease.attempt, lease.ttr,
                     alive_for.get(lease.task_id), lease.written]
        args += list(watched)
        lost, siblings, expired, now, revived, progress, renewed, canceled = self._run(
            "renew", keys, args)
        return Renewal(dict(zip(lost[::2], lost[1::2])),
                       dict(zip(siblings[::2], siblings[1::2])), list(expired), float(now),
                       bool(int(revived)), dict(zip(progress[::2], progress[1::2])),
                       dict(zip(renewed[::2], renewed[1::2])), frozenset(canceled))

    def forget_worker(self, worker_id: str, machine: str | None) -> None:
        """Drop a worker's record, identity and machine membership."""
        k = self.keys
        with reaching(self.client), self.client.pipeline(transaction=True) as pipe:
            pipe.zrem(k.workers, worker_id)
            pipe.hdel(k.workers_info, worker_id)
            pipe.hdel(k.worker_orders, worker_id)
            if machine is not None:
                pipe.srem(k.machine_workers(machine), worker_id)
            pipe.execute(raise_on_error=False)  # a record key of another type: left alone

    def _renew_by_slot(self, leases: Sequence[Lease], beat: Beat | None,
                       liveness_timeout: float, alive_for: Mapping[str, float],
                       watched: Sequence[str], canceling: Sequence[str]) -> Renewal:
        """`renew` in the cluster key mode: the worker's record in one step (its slot),
        then one step per queue for its leases, cancels and watched tasks."""
        k = self.keys
        parts = [self._renew([], beat, liveness_timeout, None, (), ())] if beat else []
        queues = dict.fromkeys([lease.queue for lease in leases] + list(canceling)
                               + [k.queue_of(task_id) for task_id in watched])
        for queue in queues:
            parts.append(self._renew(
                [lease for lease in leases if lease.queue == queue], None, liveness_timeout,
                alive_for, [task_id for task_id in watched if k.queue_of(task_id) == queue],
                [queue] if queue in canceling else [], stand_in=k.queue_index(queue)))
        if not parts:
            return self._renew([], None, liveness_timeout, None, (), ())
        record = parts[0]
        return Renewal(
            {task: status for part in parts for task, status in part.lost.items()},
            record.siblings, record.expired, max(part.now for part in parts),
            record.revived, {task: value for part in parts for task, value in part.watched.items()},
            {task: value for part in parts for task, value in part.renewed.items()},
            frozenset().union(*(part.canceling for part in parts)))

    def recover(self, tasks: Sequence[tuple[str, str, int | str | None, str | None]],
                now: float, *, expired_only: bool, max_attempts: int | None,
                why: str, process_gone: bool = False,
                retention: Retention = DEFAULT_RETENTION) -> dict[str, str]:
        """Take back held tasks `(queue, task id, attempt, holder)` whose holder is gone.

        A task whose attempt or holder (listener id) is not the one given (None: any) is
        skipped: it changed hands since the caller looked. With `expired_only`, a task is
        taken only if its lease ended (by the server's clock); else it is taken unless its
        own process says it still lives (`alive_until`), or always when the caller knows
        that process is gone (`process_gone`). Each goes back to pending (at the front of
        its priority), or fails once it used `max_attempts` (a task's or its queue's own
        maximum comes first; attempts it did not fail do not count); one whose cancel was
        asked is canceled. Returns `{task id: outcome}` with outcome 'pending', 'failed',
        'canceled' or 'skipped'.
        """
        if not tasks:
            return {}
        k = self.keys
        if k.cluster and len({queue for queue, *_ in tasks}) > 1:  # a step per queue's slot
            return {task_id: outcome for queue in dict.fromkeys(task[0] for task in tasks)
                    for task_id, outcome in self.recover(
                        [task for task in tasks if task[0] == queue], now,
                        expired_only=expired_only, max_attempts=max_attempts, why=why,
                        process_gone=process_gone, retention=retention).items()}
        keys: list[str] = []
        mode = "expired" if expired_only else "gone" if process_gone else "dead"
        args: list[object] = [now, mode, max_attempts, why, k.task_prefix,
                              retention.result_ttl, retention.failure_ttl]
        minute = int(now // 60)
        for queue, task_id, attempt, holder in tasks:
            keys += [k.task(task_id), k.leases(queue), k.pending(queue), k.failed(queue),
                     k.started(queue), k.queue_settings(queue), k.prioritized(queue),
                     k.identifiers(queue), k.utubes(queue), k.utube_waiting(queue),
                     k.canceled(queue), k.retention(queue), k.stalled(queue),
                     k.throughput(queue, minute), k.statistics(queue)]
            args += [task_id, k.reserved(queue, ""), k.wake_channel(queue), attempt, holder,
                     queue, k.utube_lists(queue), k.group_layout(queue)]
        flat = self._run("recover", keys, args)
        return dict(zip(flat[::2], flat[1::2]))

    def tick(self, queue: str, name: str, *, seen: str, due: float, next_due: float,
             task_id: str, parameters: str, tick: float, after: str, now: float,
             last_task: str | None = None, still_runs: Iterable[str] = ()) -> tuple[str, str]:
        """One tick of the periodic task `name` of `queue`, in one step (see `periodic`).

        A compare-and-set on what the caller read: the definition text `seen` ('' for
        none) and the due time `due`. When either changed, another worker ticked (or the
        task was declared again, or removed): nothing is written, 'raced'. Else, when the
        task of the previous tick (`last_task`, given only if runs must not overlap) has
        one of the `still_runs` statuses, the tick is skipped: 'overlap'. Else a pending
        task `task_id` is created for the tick at time `tick` (fields `periodic` and
        `periodic_tick`), and the definition becomes `after`: 'ticked'. Both set the next
        tick at `next_due`. A due entry without definition is dropped: 'gone'.

        Returns `(outcome, detail)`, the detail being the new task id for 'ticked' and
        the status of the previous run for 'overlap'.
        """
        k = self.keys
        keys = [k.periodic(queue), k.periodic_due(queue), k.queues, k.pending(queue),
                k.task(task_id)]
        if last_task is not None:
            keys.append(k.task(last_task))
        outcome, detail = self._run("tick", keys, [
            name, seen, due, next_due, now, queue, task_id, parameters, tick, after,
            k.wake_channel(queue), *still_runs])
        return str(outcome), str(detail)

    def tidy(self, action: str, task_id: str, key: str, kind: str, statuses: str,
             member: object = "") -> bool:
        """One deep-clean fix, re-checked atomically: 'relist' or 'unlist' a task in `key`."""
        return bool(self._run("tidy", [self.keys.task(task_id), key],
                              [action, kind, task_id, member, statuses]))

    def unmap(self, queue: str, identifier: str, task_id: str) -> bool:
        """Deep clean: drop an identifier's entry whose task no longer waits with it."""
        k = self.keys
        return bool(self._run("tidy", [k.task(task_id), k.identifiers(queue)],
                              ["unmap", "hash", task_id, identifier, ""]))

    def reline(self, queue: str, task_id: str) -> bool:
        """Deep clean: put a pending task found in no line back in line, by its priority."""
        k = self.keys
        return bool(self._run("tidy", [k.task(task_id), k.pending(queue), k.prioritized(queue),
                                       k.utube_waiting(queue)],
                              ["reline", "list", task_id, "", "pending",
                               k.group_layout(queue)]))

    def materialize(self, destination: str, sources: Sequence[tuple[str, str, str]],
                    expire: int = 60) -> int:
        """Fill `destination` with ids from `(key, kind, status)` sources whose status matches."""
        keys = [destination, *(key for key, _, _ in sources)]
        args = [self.keys.task_prefix, expire, *(f"{kind} {status}" for _, kind, status in sources)]
        return int(self._run("materialize", keys, args))


class Reports:
    """The steps a running task takes about itself: its progress and checkpoint (`report`)
    and its stalled flag (`stall`), each fenced by its attempt; and the values of an
    encrypted task sealed again (`reseal`), each only if unchanged since read."""

    def __init__(self, runner: ScriptRunner) -> None:
        self._run = runner._run
        self.keys = runner.keys

    def report(self, queue: str, task_id: str, listener_id: str, attempt: int | str | None,
               *, progress: str | None = None, checkpoint: str | None = None,
               ) -> tuple[StepResult, str]:
        """Store the task's `progress` and/or `checkpoint` (JSON texts) for its holder;
        with the outcome, when its cancel was asked ('' when not)."""
        k = self.keys
        reply = self._run("report", [k.task(task_id), k.stalled(queue)],
                          [task_id, listener_id, attempt, progress, checkpoint])
        if int(reply[0]) != 1:
            return StepResult.from_reply(reply), ""
        return StepResult(True), str(reply[1])

    def reseal(self, task_id: str, changes: list[tuple[str, str, str]]) -> int:
        """Write each `(field, value read, value resealed)` whose field still holds the
        value read; how many were written."""
        args = [part for change in changes for part in change]
        return int(self._run("reseal", [self.keys.task(task_id)], args))

    def stall(self, queue: str, task_id: str, listener_id: str, attempt: int | str | None,
              since: float | None) -> StepResult:
        """Flag the held task stalled `since` then (None: clear the flag)."""
        k = self.keys
        return StepResult.from_reply(self._run("stall", [k.task(task_id), k.stalled(queue)],
                                            [task_id, listener_id, attempt, since]))


class Scripts(ScriptRunner):
    """The protocol steps on one Redis client, for one key space: a task's life, from its
    enqueue to its outcome; `upkeep` holds the steps that keep the queues healthy, and
    `reports` those a running task takes about itself."""

    def __init__(self, client: redis.Redis, keys: KeySpace) -> None:
        super().__init__(client, keys)
        self.plans = Planner(keys)
        self.upkeep = Upkeep(self)
        self.reports = Reports(self)

    def _utube_keys(self, queue: str) -> list[str]:
        """The keys a step needs to hand a utube key to the next task (see _line.lua)."""
        k = self.keys
        return [k.utubes(queue), k.utube_waiting(queue), k.pending(queue), k.prioritized(queue)]

    def _utube_args(self, queue: str) -> list[object]:
        k = self.keys
        return [k.utube_lists(queue), k.task_prefix, queue, k.wake_channel(queue)]

    def enqueue(self, queue: str, tasks: Sequence[tuple[str, str, TaskOptions]],
                now: float) -> list[tuple[str, bool]]:
        """`Planner.enqueue`, run."""
        plain = self.plans.plain_enqueue(queue, tasks, now)
        if plain is None:
            return self._execute(self.plans.enqueue(queue, tasks, now))
        self._run("enqueue", *plain)
        return [(task_id, True) for task_id, _, _ in tasks]

    def enqueue_due(self, queue: str, now: float, limit: int = 0) -> list[str]:
        """Move the due scheduled tasks of a queue to its pending list; return their ids.

        A due id whose key holds no task hash (gone, or a value of another type) leaves the
        schedule without being pushed."""
        k = self.keys
        moved, _ = self._run("enqueue_due",
                             [k.scheduled(queue), k.pending(queue), k.prioritized(queue),
                              k.utubes(queue), k.utube_waiting(queue)],
                             [now, k.task_prefix, k.wake_channel(queue), limit,
                              k.utube_lists(queue), queue, k.group_layout(queue)])
        return list(moved)

    def reserve(self, queues: Sequence[str], listener_id: str, now: float, *,
                pid: int | None = None, pstart: str | None = None,
                ttrs: Sequence[float | str | None] | None = None,
                max_run_time: float | None = None, max_attempts: int | None = None,
                retention: Retention = DEFAULT_RETENTION, tally: Tally | None = None,
                unlimited: Collection[str] = (),
                ) -> tuple[Reservation | None, PassedOver]:
        """Take the next pending task: the first in line of the highest priority found in
        the queues, from the first queue that has it; when none has one without a group,
        the next task of their groups in their fair turns (see lua/_groups.lua).

        With `pid`, the task is started by that pid (whose start mark is `pstart`) in
        the same step. `ttrs` (one per queue), `max_run_time` and `max_attempts` are the
        defaults of the lease terms (see `Reservation`). The take is counted in `tally`
        when given, else by the step in its queue's counters. `unlimited` names the
        queues the caller knows have no limit (a worker reads them twice a second): their
        limits are not read. Returns the reservation (or None) and what was passed over
        on the way (see `PassedOver`).
        """
        k, ttrs = self.keys, list(ttrs) if ttrs is not None else [None] * len(queues)
        if k.cluster and len(queues) > 1:  # one slot per queue: one step per queue
            return self._reserve_each(queues, listener_id, now, ttrs, pid=pid, pstart=pstart,
                max_run_time=max_run_time, max_attempts=max_attempts, retention=retention,
                tally=tally, unlimited=unlimited)
        keys: list[str] = []
        args: list[object] = [k.task_prefix, listener_id, now, pid, pstart, max_run_time,
                              max_attempts, PASS_OVER_BOUND, retention.failure_ttl,
                              1 if tally is not None else None]
        for queue, ttr in zip(queues, ttrs):
            queue_keys, queue_args = self._reserve_queue(queue, listener_id, ttr,
                                                         queue in unlimited)
            keys += queue_keys
            args += queue_args
        reply = self._run("reserve", keys, args)
        index, task_id, flat = reply[:3]
        passed = PassedOver.from_reply(queues, *reply[6:11])
        if not int(index):
            return None, passed
        queue = queues[int(index) - 1]
        if tally is not None:
            tally.taken(queue, reply[13], now)
        return Reservation.from_reply(task_id, queue, flat, [*reply[3:6], reply[11]],
                                      reply[12], reply[14:16]), passed

    def _reserve_queue(self, queue: str, listener_id: str, ttr: float | str | None,
                       unlimited: bool) -> tuple[list[str], list[object]]:
        """The fourteen keys and five arguments of one queue in the reserve step (see
        lua/reserve.lua)."""
        k = self.keys
        return ([k.pending(queue), k.reserved(queue, listener_id), k.leases(queue),
                 k.started(queue), k.queue_settings(queue), k.failed(queue),
                 k.prioritized(queue), k.identifiers(queue), k.expiry(queue),
                 k.expired(queue), k.statistics(queue), k.utubes(queue),
                 k.utube_waiting(queue), k.retention(queue)],
                [ttr, queue, k.utube_lists(queue), k.group_layout(queue),
                 0 if unlimited else None])

    def _reserve_each(self, queues: Sequence[str], listener_id: str, now: float,
                      ttrs: Sequence[float | str | None], **terms: Any,
                      ) -> tuple[Reservation | None, PassedOver]:
        """`reserve` in the cluster key mode, where queues are in slots of their own: one
        step per queue, in their order of preference, until one gives a task. Priorities
        then order the tasks of each queue, not of all the queues together."""
        passed = PassedOver([], {}, {}, False, [])
        for queue, ttr in zip(queues, ttrs):
            reservation, more = self.reserve([queue], listener_id, now, ttrs=[ttr], **terms)
            passed = PassedOver(passed.dropped + more.dropped,
                                {**passed.quarantined, **more.quarantined},
                                {**passed.broken, **more.broken}, passed.more or more.more,
                                passed.expired + more.expired,
                                {**passed.misfits, **more.misfits})
            if reservation is not None:
                return reservation, passed
        return None, passed

    def start(self, queue: str, task_id: str, listener_id: str, pid: int, now: float,
              attempt: int | str | None = None, pstart: str | None = None) -> StepResult:
        """Record that process `pid` (started at `pstart`) runs a reserved task."""
        k = self.keys
        reply = self._run("start", [k.task(task_id), k.started(queue)],
                          [task_id, listener_id, pid, now, attempt, pstart])
        return StepResult.from_reply(reply)

    def set_aside(self, key: str, kind: str, now: float) -> tuple[str, str] | None:
        """Move `key`, found holding another type than `kind`, aside (see
        lua/set_aside.lua): `(the type it held, its new name)`, or None when it is missing
        or of its type by now."""
        aside = self.keys.set_aside(key, now)
        found = self._run("set_aside", [key, aside], [kind])
        return (found, aside) if found else None

    def _finishing_keys(self, queue: str, now: float) -> list[str]:
        """The keys a step needs to file a task as canceled, kept for its retention."""
        k = self.keys
        return [k.canceled(queue), k.queue_settings(queue), k.retention(queue),
                k.throughput(queue, int(now // 60))]

    def finish(self, queue: str, task_id: str, listener_id: str, status: str, value: str,
               now: float, pid: int | None = None, attempt: int | str | None = None,
               retention: Retention = DEFAULT_RETENTION,
               tally: Tally | None = None, queue_ttl: str | None = None,
               peak_rss: int | None = None) -> StepResult:
        """Complete, fail or cancel a task held by `listener_id` (and `attempt`, when
        given); one whose cancel was asked is filed as canceled (`StepResult.canceled`).
        The step is counted in `tally` when given, else by the step itself. `queue_ttl`:
        the queue's retention of `status` as the reserve step read it (None: read here).
        `peak_rss`: the peak memory of the process that ran the attempt (bytes), noted."""
        k = self.keys
        canceled, settings, kept, throughput = self._finishing_keys(queue, now)
        keys = [k.task(task_id), k.reserved(queue, listener_id), k.started(queue),
                k.finished(queue, status), k.leases(queue), k.statistics(queue),
                *self._utube_keys(queue), canceled, settings, kept, k.stalled(queue),
                throughput]
        reply = self._run("finish", keys,
                          [task_id, listener_id, pid, status, value, now, attempt,
                           *self._utube_args(queue), retention.result_ttl,
                           retention.failure_ttl, 1 if tally is not None else None,
                           queue_ttl, k.group_layout(queue), peak_rss])
        result = StepResult.from_reply(reply)
        if tally is not None and result.done:
            tally.finished(queue, "canceled" if result.canceled else status, reply[2] or None,
                           now)
        return result

    def delete(self, queue: str, task_id: str, *, finished_only: bool = False) -> StepResult:
        """Delete a task of `queue` that is not running (with `finished_only`: complete,
        failed, canceled or expired, as Blueque's "Delete Finished Task")."""
        k = self.keys
        keys = [k.task(task_id), k.complete(queue), k.failed(queue), k.canceled(queue),
                k.expired(queue), k.buried(queue), k.pending(queue), k.prioritized(queue),
                k.scheduled(queue), k.identifiers(queue), k.expiry(queue), k.statistics(queue),
                k.utubes(queue), k.utube_waiting(queue), k.retention(queue),
                k.waiting(queue), k.after(queue, task_id), k.children(queue, task_id),
                k.ended(queue)]
        reply = self._run("delete", keys,
                          [task_id, queue, "finished" if finished_only else "any",
                           k.utube_lists(queue), k.task_prefix, k.wake_channel(queue),
                           k.group_layout(queue)])
        if int(reply[0]) == 0:
            return StepResult(False, status=reply[1], node=None, attempt=None)
        return StepResult.from_reply(reply)

    def requeue(self, queue: str, task_id: str, listener_id: str, now: float, *,
                attempt: int | str | None = None, eta: float | None = None,
                error: str | None = None, front: bool = False,
                priority_delta: int | None = None, uncounted: bool = False,
                retention: Retention = DEFAULT_RETENTION,
                peak_rss: int | None = None) -> StepResult:
        """Put a task held by `listener_id` back: pending now, or scheduled at `eta`; one
        whose cancel was asked is filed as canceled instead (`StepResult.canceled`).

        With `uncounted`, this attempt does not count toward the task's maximum (it was
        not a failure: the task delayed itself)."""
        k = self.keys
        keys = [k.task(task_id), k.reserved(queue, listener_id), k.started(queue),
                k.pending(queue), k.scheduled(queue), k.leases(queue), k.prioritized(queue),
                k.identifiers(queue), k.statistics(queue), k.stalled(queue),
                *self._finishing_keys(queue, now), k.utubes(queue), k.utube_waiting(queue)]
        reply = self._run("requeue", keys, [
            task_id, listener_id, attempt, now, eta, error, k.wake_channel(queue),
            "front" if front else "back", priority_delta, "1" if uncounted else "",
            k.task_prefix, queue, retention.result_ttl, retention.failure_ttl,
            k.utube_lists(queue), k.group_layout(queue), peak_rss])
        return StepResult.from_reply(reply)

    def bury(self, queue: str, task_id: str, listener_id: str, now: float, *,
             attempt: int | str | None = None, why: str | None = None,
             retention: Retention = DEFAULT_RETENTION) -> StepResult:
        """Bury a task held by `listener_id` (and `attempt`): out of line until kicked; one
        whose cancel was asked is filed as canceled instead (`StepResult.canceled`)."""
        k = self.keys
        keys = [k.task(task_id), k.reserved(queue, listener_id), k.started(queue),
                k.leases(queue), k.buried(queue), k.statistics(queue), *self._utube_keys(queue),
                k.stalled(queue), *self._finishing_keys(queue, now)]
        return StepResult.from_reply(self._run("bury", keys, [
            task_id, listener_id, attempt, now, why, *self._utube_args(queue),
            retention.result_ttl, retention.failure_ttl, k.group_layout(queue)]))

    def touch(self, queue: str, task_id: str, listener_id: str, seconds: float, *,
              attempt: int | str | None = None) -> tuple[StepResult, float | None]:
        """Extend the lease of a task held by `listener_id` by `seconds`; its new end
        (None: it has no expiry)."""
        k = self.keys
        reply = self._run("touch", [k.task(task_id), k.leases(queue), k.statistics(queue)],
                          [task_id, listener_id, attempt, seconds])
        if int(reply[0]) != 1:
            return StepResult.from_reply(reply), None
        return StepResult(True), _number(reply[1])

    def kick(self, queue: str, count: int, now: float) -> list[str]:
        """Put up to `count` buried tasks of `queue` back in line, oldest first."""
        k = self.keys
        keys = [k.buried(queue), k.pending(queue), k.prioritized(queue), k.identifiers(queue),
                k.statistics(queue), k.utubes(queue), k.utube_waiting(queue)]
        return list(self._run("kick", keys, [count, now, k.wake_channel(queue), k.task_prefix,
                                             queue, k.utube_lists(queue),
                                             k.group_layout(queue)]))

    def expire_due(self, queue: str, now: float, limit: int,
                   retention: Retention = DEFAULT_RETENTION) -> list[str]:
        """Expire up to `limit` waiting tasks of `queue` past their ttl; their ids."""
        k = self.keys
        keys = [k.expiry(queue), k.pending(queue), k.prioritized(queue), k.scheduled(queue),
                k.identifiers(queue), k.expired(queue), k.statistics(queue), k.utubes(queue),
                k.utube_waiting(queue), k.retention(queue), k.queue_settings(queue)]
        return list(self._run("expire_due", keys, [now, k.task_prefix, limit,
                                                   k.utube_lists(queue), queue,
                                                   k.wake_channel(queue),
                                                   retention.failure_ttl,
                                                   k.group_layout(queue)]))

    def empty(self, queue: str, mode: str, limit: int) -> tuple[int, bool]:
        """One chunk of a 'truncate' (delete the waiting tasks) or a 'drop' (every task,
        then the queue); `(tasks deleted, done)`. A drop of a queue with listeners or
        running tasks raises `QueueBusy`."""
        k = self.keys
        keys = [k.pending(queue), k.prioritized(queue), k.scheduled(queue), k.identifiers(queue),
                k.expiry(queue), k.statistics(queue), k.listeners(queue), k.leases(queue),
                k.started(queue), k.complete(queue), k.failed(queue), k.canceled(queue),
                k.expired(queue), k.buried(queue), k.queue_settings(queue), k.queues,
                k.periodic(queue), k.periodic_due(queue), k.utubes(queue),
                k.utube_waiting(queue), k.retention(queue), k.stalled(queue),
                k.canceling(queue), k.paused(queue), k.waiting(queue)]
        try:
            deleted, done = self._run("empty", keys, [mode, k.task_prefix, queue, limit,
                                                      k.utube_lists(queue),
                                                      k.group_layout(queue),
                                                      k.dependency_layout(queue)])
        except ResponseError as error:
            if "QUEUEBUSY" not in str(error):
                raise
            raise QueueBusy(f"queue {queue!r} has listeners or running tasks: stop its "
                            "workers first") from None
        if mode == "drop" and int(done):  # its throughput hashes still kept go too
            minute, kept = int(time.time() // 60), THROUGHPUT_TTL // 60
            # a minute earlier and one later: this clock and the counting workers' may differ
            self.client.delete(*(k.throughput(queue, m)
                                 for m in range(minute - kept - 1, minute + 2)))
        return int(deleted), bool(int(done))

    def watch(self, task_id: str) -> Watched | None:
        """`Planner.watch`, run."""
        return self._execute(self.plans.watch(task_id))

    def cancel(self, queue: str, task_id: str, now: float,
               retention: Retention = DEFAULT_RETENTION) -> StepResult:
        """`Planner.cancel`, run."""
        return self._execute(self.plans.cancel(queue, task_id, now, retention))

    def retry(self, queue: str, task_id: str, status: str, now: float, *,
              eta: float | None = None, front: bool = False,
              priority: int | None = None) -> StepResult:
        """Put a failed, canceled, expired or buried task (its `status` as the caller found
        it) back in line."""
        k = self.keys
        keys = [k.task(task_id), k.status_structure(queue, status)[0], k.pending(queue),
                k.prioritized(queue), k.scheduled(queue), k.identifiers(queue), k.utubes(queue),
                k.utube_waiting(queue), k.retention(queue)]
        reply = self._run("retry", keys, [task_id, queue, status, now, eta, "1" if front else "",
                                          priority, k.wake_channel(queue), k.task_prefix,
                                          k.utube_lists(queue), k.group_layout(queue)])
        if int(reply[0]) == 0:
            return StepResult(False, status=reply[1])
        return StepResult.from_reply(reply)

    def limit(self, queue: str, field: str, stored: str | None) -> bool:
        """Set the limit of `field` (see `limits.limit_field`) to its `stored` text, or
        remove it (None); the groups held back by a limit look again at their next turn.
        True when something changed."""
        k = self.keys
        keys = [k.limits(queue), k.groups_held(queue), k.groups(queue), k.fair_turns(queue),
                k.leases(queue)]
        return bool(self._run("limit", keys, ["remove" if stored is None else "set", field,
                                              stored, k.group_layout(queue), k.task_prefix]))

    def add_listener(self, queue: str, listener_id: str) -> bool:
        """Blueque listener registration. In the cluster key mode, the listener is counted
        in the queue's own index entry, and the queue is added to the cluster-wide index
        by a command of its own (see `KeySpace.queue_index`)."""
        k = self.keys
        added = bool(self._run("add_listener", [k.listeners(queue), k.queue_index(queue)],
                               [listener_id, queue]))
        if k.cluster:
            with reaching(self.client):
                self.client.zadd(k.queues, {queue: 0}, nx=True)
        return added

    def remove_listener(self, queue: str, listener_id: str) -> bool:
        k = self.keys
        return bool(self._run("remove_listener", [k.listeners(queue), k.queue_index(queue)],
                              [listener_id, queue]))
