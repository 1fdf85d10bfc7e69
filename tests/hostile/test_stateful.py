"""A property-based stateful test: random sequences of protocol steps, worker deaths,
cleanings and corruptions of one record, run against a real Redis through the public API.

A model (`QueueMachine`) keeps what each task should be: its status, its holder and attempt,
and the place of each pending task in its queue's line. After every step the invariants
are checked against Redis, for every *good* task (one that no corruption touched, in a queue
none of whose structures was replaced):

* it is in exactly the structures its status says (docs/keys.rst) and in no other: the
  pending list, the scheduled sorted set, the lease set plus the holder's reserved list
  (plus the started set for a started task), the complete or failed list;
* its hash exists (nothing good is lost) and says that status, queue, holder and attempt;
* the good tasks of each pending list are in the order of the model (taken from the right;
  a task taken back from a dead holder goes to the front);
* a holder completes (or fails) an attempt at most once, and a stale holder's steps are
  refused and change nothing in Redis;
* a task whose own record was corrupted, when a reserve meets it, is quarantined (failed,
  with an `error` starting with "Quarantined:", in the failed list) and never reserved.

Stray entries (a finished task's id in its queue's schedule, a task's id in another queue's
pending list) are among the steps: the two tests at the end hold what the machine found
with them (a finished task run again, a sound task quarantined), now fixed.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis

if os.environ.get("LIMPYD_BLUEQUE_INNER_RUN"):
    # the oldest-versions run reuses a virtualenv cached in .cache/, which may predate
    # hypothesis in the `test` extra
    pytest.importorskip("hypothesis")

from hypothesis import HealthCheck, event, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from limpyd_blueque import InvalidTransition, Job, ProtocolError, Queue, TaskNotFound
from limpyd_blueque.protocol.keys import STATUS_STRUCTURES, keyspace
from limpyd_blueque.upkeep.cleaning import deep_clean, light_clean

QUEUES = ("q1", "q2", "q3")
LISTENERS = ("h1.test_11", "h2.test_22", "h3.test_33")
PIDS = {"h1.test_11": 1101, "h2.test_22": 2202, "h3.test_33": 3303}
#: this listener reserves with a lease that lapses at once (a worker that stopped renewing):
#: a light clean takes its tasks back; the others hold leases that never expire
LAPSING = "h3.test_33"
LAPSE = 1e-6
#: q3 fails a task taken back from a dead holder once it used this many attempts
MAX_ATTEMPTS = {"q3": 2}
HELD = ("reserved", "started")
FINISHED = ("complete", "failed")
#: where a task of each status is filed, as docs/keys.rst says (structures of its queue)
WHERE = {
    "waiting": {"waiting"},
    "scheduled": {"scheduled"},
    "pending": {"pending", "prioritized", "utube_waiting", "grouped"},
    "reserved": {"leases", "reserved"},
    "started": {"leases", "reserved", "started"},
    "complete": {"complete"},
    "failed": {"failed"},
    "canceled": {"canceled"},
    "buried": {"buried"},
    "expired": {"expired"},
    "deleted": set(),
}
STRUCTURES = ("scheduled", "pending", "leases", "reserved", "started", "complete", "failed")
GARBAGE_STATUSES = ("weird", "", "PENDING", "pending ")
#: corruptions of one task's own record, and of one queue's structures
TASK_CORRUPTIONS = ("status", "no_queue", "attempt", "no_hash", "string")
QUEUE_CORRUPTIONS = ("nonutf8_pending", "nonutf8_lease", "pending_string", "leases_string",
                     "started_string")
#: an extra entry of a good task: in its own queue's pending list or schedule (a finished
#: task), or in another queue's pending list (a task of any status)
STRAYS = ("pending", "scheduled", "other_queue")
#: stray entries that meet a known bug of the package (the xfail tests at the end show
#: each): left out unless BLUEQUE_STATEFUL_KNOWN_BUGS is set, until the package is fixed
KNOWN_BUGS: tuple[str, ...] = ()
if not os.environ.get("BLUEQUE_STATEFUL_KNOWN_BUGS"):
    STRAYS = tuple(kind for kind in STRAYS if kind not in KNOWN_BUGS)
MAX_CORRUPTIONS = 6
KEYS = keyspace()

ENV: dict[str, Any] = {}
# a failure is shrunk for up to 5 minutes after the run: more than pytest.ini's timeout
pytestmark = [pytest.mark.timeout(600), pytest.mark.hostile]


@pytest.fixture(autouse=True)
def _redis(redis_url, database, conn):
    """The machine runs as a unittest case: it finds its clients here."""
    raw = redis.Redis.from_url(redis_url)
    ENV.update(conn=conn, raw=raw)
    yield
    ENV.clear()
    raw.close()


def test_the_structures_of_each_status_are_the_documented_ones():
    """The model's table agrees with the package's (`keys.STATUS_STRUCTURES`)."""
    for status, structures in STATUS_STRUCTURES.items():
        for method, _ in structures:
            assert method in WHERE[status.value], status


@dataclass
class Task:
    id: str
    queue: str
    status: str  # a status, or "deleted"
    attempt: int = 0
    holder: str | None = None
    pid: int | None = None
    job: Job | None = None  # the Job its current (or last) reservation gave
    lapses: bool = False  # held with a lease that lapsed at once
    seq: int = 0  # when it was reserved (a light clean takes back in lease order)
    eta: float | None = None
    error: str | None = None  # what the error field starts with, when failed
    bad: str | None = None  # the corruption its record got: not checked any more
    quarantined: bool = False  # failed by a reserve that met its corrupt record
    holds: list[tuple[str, int, Job]] = field(default_factory=list)  # (listener, attempt, job)


def pick(candidates: list, index: int):
    return candidates[index % len(candidates)]


class QueueMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.conn = ENV["conn"]
        self.raw = ENV["raw"]
        self.raw.flushdb()
        self.tasks: dict[str, Task] = {}
        self.pending: dict[str, list[str]] = {q: [] for q in QUEUES}  # left to right
        self.broken: dict[str, str] = {}  # queue -> the structure replaced by a string
        self.finished: Counter[tuple[str, int]] = Counter()
        self.counter = 0
        self.seq = 0
        self.corruptions = 0
        # extra entries of good tasks written in a structure: (queue, structure, id) -> count
        self.strays: Counter[tuple[str, str, str]] = Counter()

    @initialize()
    def configure(self) -> None:
        for name, count in MAX_ATTEMPTS.items():
            Queue.named(name).configure(max_attempts=count)

    # -- model helpers ----------------------------------------------------------------
    def good(self, task: Task) -> bool:
        return task.bad is None and task.queue not in self.broken

    def good_ids(self) -> set[str]:
        return {t.id for t in self.tasks.values() if self.good(t)}

    def live(self, *statuses: str) -> list[Task]:
        return [t for t in self.tasks.values() if self.good(t) and t.status in statuses]

    def new_id(self) -> str:
        self.counter += 1
        return f"t{self.counter}"

    def next_pending(self, queues: list[str]) -> tuple[int, str, str] | None:
        for index, name in enumerate(queues):
            if name in self.broken:
                continue
            line = [i for i in self.pending[name] if self.good(self.tasks[i])]
            if line:
                return index, name, line[-1]
        return None

    def taken_back(self, task: Task, outcome: str) -> None:
        """A task its holder lost, taken back by recovery (`outcome` checked)."""
        limit = MAX_ATTEMPTS.get(task.queue)
        expected = "failed" if limit is not None and task.attempt >= limit else "pending"
        assert outcome == expected, (task, outcome)
        event(f"a lost task taken back: {expected}")
        task.holder, task.pid, task.lapses = None, None, False
        task.status = expected
        if expected == "pending":
            self.pending[task.queue].append(task.id)  # the front of the line
        else:
            task.error = "LeaseExpired:"

    def dump(self) -> dict:
        """Everything in the database, to tell that a step changed nothing."""
        state = {}
        for key in self.raw.scan_iter(count=1000):
            kind = self.raw.type(key).decode()
            if kind == "string":
                value: Any = self.raw.get(key)
            elif kind == "hash":
                value = self.raw.hgetall(key)
            elif kind == "list":
                value = self.raw.lrange(key, 0, -1)
            elif kind == "set":
                value = self.raw.smembers(key)
            elif kind == "zset":
                value = self.raw.zrange(key, 0, -1, withscores=True)
            else:
                value = kind
            state[key] = (kind, value)
        return state

    # -- producers ----------------------------------------------------------------------
    @rule(name=st.sampled_from(QUEUES), parameters=st.one_of(st.integers(), st.text(max_size=4)))
    def enqueue(self, name: str, parameters: Any) -> None:
        task_id = self.new_id()
        if self.broken.get(name) == "pending":
            with pytest.raises(ProtocolError):
                Queue.named(name).enqueue(parameters, task_id=task_id)
            assert not self.raw.exists(KEYS.task(task_id)), "a refused enqueue wrote the task"
            return
        job = Queue.named(name).enqueue(parameters, task_id=task_id)
        assert job.task_id == task_id
        self.tasks[task_id] = Task(task_id, name, "pending")
        self.pending[name].insert(0, task_id)

    @rule(name=st.sampled_from(QUEUES), delay=st.sampled_from([-50.0, 30.0, 60.0, 90.0]))
    def schedule(self, name: str, delay: float) -> None:
        if name in self.broken:
            return
        task_id = self.new_id()
        eta = time.time() + delay
        Queue.named(name).schedule("later", eta, task_id=task_id)
        if delay < 0:  # already due: enqueued at once
            self.tasks[task_id] = Task(task_id, name, "pending")
            self.pending[name].insert(0, task_id)
        else:
            self.tasks[task_id] = Task(task_id, name, "scheduled", eta=eta)

    @rule(name=st.sampled_from(QUEUES), advance=st.sampled_from([0.0, 45.0, 75.0, 120.0]))
    def enqueue_due(self, name: str, advance: float) -> None:
        if name in self.broken:
            return
        now = time.time() + advance
        due = sorted((t.eta, t.id) for t in self.live("scheduled")
                     if t.queue == name and t.eta is not None and t.eta <= now)
        moved = Queue.named(name).enqueue_due(now=now)
        note(f"enqueue_due({name}) moved {moved}")
        good = self.good_ids()
        assert [i for i in moved if i in good] == [i for _, i in due]
        for task_id in moved:
            task = self.tasks.get(task_id)
            if task is None:
                continue
            if task.bad is not None:
                # a scheduled task whose status was garbage is made pending by the move, as
                # the reference client does: a well-formed pending task again
                data = self.conn.hgetall(KEYS.task(task_id)) if self.conn.type(
                    KEYS.task(task_id)) == "hash" else {}
                if task.bad != "status" or data.get("status") != "pending" \
                        or data.get("queue") != name:
                    continue
                note(f"{task_id} ({task.bad}) is a well-formed pending task again")
                event("a corrupt scheduled task made pending again")
                task.bad = None
            task.status, task.eta = "pending", None
            self.pending[name].insert(0, task_id)

    @rule(name=st.sampled_from(QUEUES))
    def foreign_task(self, name: str) -> None:
        """Another Blueque client submits a task whose id is not UTF-8."""
        if name in self.broken:
            return
        self.counter += 1
        raw_id = b"u\xff%d" % self.counter
        task_id = raw_id.decode("utf-8", "surrogateescape")
        now = repr(time.time())
        self.raw.hset(b"blueque_task_" + raw_id, mapping={
            "status": "pending", "queue": name, "parameters": "{}", "created": now,
            "updated": now})
        self.raw.zincrby("blueque_queues", 0, name)
        self.raw.lpush(KEYS.pending(name), raw_id)
        self.tasks[task_id] = Task(task_id, name, "pending")
        self.pending[name].insert(0, task_id)

    # -- listeners ----------------------------------------------------------------------
    @rule(queues=st.lists(st.sampled_from(QUEUES), min_size=1, max_size=3, unique=True),
          listener=st.sampled_from(LISTENERS), start=st.booleans())
    def reserve(self, queues: list[str], listener: str, start: bool) -> None:
        expected = self.next_pending(queues)
        passed: list = []
        job, reservation = Queue.reserve_from(
            queues, listener, pid=PIDS[listener] if start else None,
            ttr=LAPSE if listener == LAPSING else None, report=passed.append)
        got = job.task_id if job is not None else None
        note(f"reserve({queues}, {listener}) -> {got!a}; passed over {passed}")
        # every queue is looked at, for the highest priority among them
        broken = {name for name in queues if name in self.broken}
        good = self.good_ids()
        for over in passed:
            assert set(over.broken) <= broken
            broken -= set(over.broken)
            for task_id in over.dropped:
                assert task_id not in good or self.stray(task_id, "pending"), \
                    f"good task {task_id} dropped"
            for task_id, (name, why) in over.quarantined.items():
                assert task_id not in good, f"good task {task_id} quarantined: {why}"
                self.check_quarantined(task_id, name)
                event("reserve quarantined a task")
        assert not broken, f"broken queues not reported: {broken}"
        if expected is None:
            assert job is None, f"reserved {got!a}, no good task was pending"
            return
        _, name, task_id = expected
        event("reserve took a task" + (" with an id that is not UTF-8" if task_id.startswith("u")
                                       else ""))
        assert got == task_id, f"reserved {got!a}, expected {task_id} of {name}"
        assert reservation is not None and reservation.queue == name
        task = self.tasks[task_id]
        task.attempt += 1
        assert reservation.attempt == task.attempt
        assert reservation.node == listener
        assert reservation.fields["status"] == ("started" if start else "reserved")
        self.pending[name].remove(task_id)
        self.seq += 1
        task.status = "started" if start else "reserved"
        task.holder, task.pid = listener, PIDS[listener] if start else None
        task.job, task.lapses, task.seq = job, listener == LAPSING, self.seq
        task.holds.append((listener, task.attempt, job))

    def stray(self, task_id: str, structure: str) -> bool:
        return any(i == task_id and s == structure and count
                   for (_, s, i), count in self.strays.items())

    def check_quarantined(self, task_id: str, name: str) -> None:
        """A task a reserve quarantined: failed, in the failed list of `name`, never run."""
        task = self.tasks.get(task_id)
        assert task is not None, f"unknown task {task_id!a} quarantined"
        key = KEYS.task(task_id)
        if self.conn.type(key) != "hash":
            return  # a key of another type: only taken out of the lines
        data = self.conn.hgetall(key)
        assert data.get("status") == "failed", data
        assert data.get("error", "").startswith("Quarantined:"), data
        assert data.get("queue") == name, data
        assert self.conn.lrange(KEYS.failed(name), 0, -1).count(task_id) == 1
        if task.queue != name or task.queue in self.broken:
            return  # entries elsewhere may be left: not checked any more
        # from now on an ordinary failed task, checked as such
        task.bad, task.status, task.error = None, "failed", "Quarantined:"
        task.quarantined = True
        task.holder, task.pid = None, None

    @precondition(lambda self: self.live("reserved"))
    @rule(index=st.integers(0, 1000))
    def start(self, index: int) -> None:
        task = pick(self.live("reserved"), index)
        note(f"start {task.id!a}")
        assert task.job is not None and task.holder is not None
        task.job.start(task.holder, PIDS[task.holder], attempt=task.attempt)
        task.status, task.pid = "started", PIDS[task.holder]

    @precondition(lambda self: self.live(*HELD))
    @rule(index=st.integers(0, 1000), success=st.booleans())
    def finish(self, index: int, success: bool) -> None:
        task = pick(self.live(*HELD), index)
        note(f"{'complete' if success else 'fail'} {task.id!a} by its holder")
        assert task.job is not None
        if success:
            done = task.job.complete("done", listener_id=task.holder, attempt=task.attempt)
        else:
            done = task.job.fail("Boom: no", listener_id=task.holder, attempt=task.attempt)
        assert done is True
        self.finished[(task.id, task.attempt)] += 1
        assert self.finished[(task.id, task.attempt)] == 1
        task.status = "complete" if success else "failed"
        task.error = None if success else "Boom: no"
        task.holder, task.pid, task.lapses = None, None, False

    @precondition(lambda self: self.live(*HELD))
    @rule(index=st.integers(0, 1000), front=st.booleans(), later=st.booleans())
    def requeue(self, index: int, front: bool, later: bool) -> None:
        task = pick(self.live(*HELD), index)
        note(f"requeue {task.id!a} (front={front}, later={later})")
        assert task.job is not None
        assert task.job.requeue(listener_id=task.holder, attempt=task.attempt, front=front,
                                delay=60.0 if later else None) is True
        task.holder, task.pid, task.lapses = None, None, False
        if later:
            task.status = "scheduled"
            task.eta = float(self.conn.hget(KEYS.task(task.id), "eta"))
        else:
            task.status = "pending"
            if front:
                self.pending[task.queue].append(task.id)
            else:
                self.pending[task.queue].insert(0, task.id)

    def stale_holds(self) -> list[tuple[Task, str, int, Job]]:
        """(task, listener, attempt, job): holds that are not, or are no longer, the task's."""
        holds = []
        for task in self.tasks.values():
            if task.bad is not None or task.queue in self.broken:
                continue
            for listener, attempt, job in task.holds:
                if task.status not in HELD or (listener, attempt) != (task.holder, task.attempt):
                    holds.append((task, listener, attempt, job))
            if task.status in HELD and task.job is not None:
                holds += [(task, other, task.attempt, task.job)
                          for other in LISTENERS if other != task.holder]
        return holds

    @precondition(lambda self: self.stale_holds())
    @rule(index=st.integers(0, 1000),
          action=st.sampled_from(["complete", "fail", "requeue", "start"]))
    def stale_step(self, index: int, action: str) -> None:
        task, listener, attempt, job = pick(self.stale_holds(), index)
        note(f"{action} {task.id!a} by {listener} attempt {attempt} (stale)")
        event(f"stale {action} of a {task.status} task")
        before = self.dump()
        gone = task.status == "deleted"
        if action == "start" or gone:
            with pytest.raises(TaskNotFound if gone else InvalidTransition):
                self.stale_call(job, action, listener, attempt)
        else:
            assert self.stale_call(job, action, listener, attempt) is False
        assert self.dump() == before, f"a refused {action} changed Redis"

    @staticmethod
    def stale_call(job: Job, action: str, listener: str, attempt: int) -> Any:
        if action == "complete":
            return job.complete("stale", listener_id=listener, attempt=attempt)
        if action == "fail":
            return job.fail("Stale: no", listener_id=listener, attempt=attempt)
        if action == "requeue":
            return job.requeue(listener_id=listener, attempt=attempt)
        return job.start(listener, PIDS[listener], attempt=attempt)

    @precondition(lambda self: self.live(*FINISHED))
    @rule(index=st.integers(0, 1000))
    def delete(self, index: int) -> None:
        task = pick(self.live(*FINISHED), index)
        note(f"delete {task.id!a}")
        Job.lazy_connect(task.id).delete()
        task.status = "deleted"

    @precondition(lambda self: self.live("scheduled", "pending", *HELD))
    @rule(index=st.integers(0, 1000))
    def delete_unfinished(self, index: int) -> None:
        task = pick(self.live("scheduled", "pending", *HELD), index)
        note(f"delete {task.id!a} ({task.status}) as Blueque does: refused")
        before = self.dump()
        with pytest.raises(InvalidTransition):
            Job.lazy_connect(task.id).delete(finished_only=True)
        assert self.dump() == before, "a refused delete changed Redis"

    # -- a worker dies; cleaning --------------------------------------------------------
    @rule(listener=st.sampled_from(LISTENERS))
    def worker_killed(self, listener: str) -> None:
        """Its tasks are abandoned; recovery takes back what its reserved lists hold."""
        abandoned = []
        for name in QUEUES:
            for task_id in self.conn.lrange(KEYS.reserved(name, listener), 0, -1):
                abandoned.append((name, task_id, None, listener))
        outcomes = Queue.scripts().upkeep.recover(abandoned, time.time(), expired_only=False,
                                           max_attempts=None, why="its worker was killed")
        note(f"{listener} killed: {outcomes}")
        mine = {t.id for t in self.live(*HELD) if t.holder == listener}
        assert mine <= {task_id for _, task_id, _, _ in abandoned}
        for _, task_id, _, _ in abandoned:
            if task_id in mine:
                self.taken_back(self.tasks[task_id], outcomes.get(task_id, "missing"))

    @rule(deep=st.booleans())
    def clean(self, deep: bool) -> None:
        event(f"{'deep' if deep else 'light'} clean"
              + (" beside corrupt records" if self.corruptions else ""))
        if deep:
            report = deep_clean(Queue)
            note(f"deep clean: {report}")
            good = self.good_ids()
            strays = {(getattr(KEYS, s)(q), i) for (q, s, i), count in self.strays.items()
                      if count}
            touched = ({i for i, _ in report.relisted} | set(report.indexed)
                       | set(report.recovered) | {i for i, _ in report.unknown_status}
                       | {member.rpartition(" ")[2] for key, member in report.dropped
                          if (key, member) not in strays})
            assert not touched & good, f"the deep clean changed good tasks {touched & good}"
            assert not {key for key, _ in report.broken} & {KEYS.task(i) for i in good}
            return
        expected = sorted((t for t in self.live(*HELD) if t.lapses), key=lambda t: t.seq)
        outcomes = light_clean(Queue, now=time.time() + 10**6)
        note(f"light clean: {outcomes}")
        good = self.good_ids()
        assert {i for i in outcomes if i in good} == {t.id for t in expected}
        for task in expected:
            self.taken_back(task, outcomes[task.id])

    # -- corruption of one record ---------------------------------------------------------
    @precondition(lambda self: self.corruptions < MAX_CORRUPTIONS)
    @rule(kind=st.sampled_from(TASK_CORRUPTIONS), index=st.integers(0, 1000),
          garbage=st.sampled_from(GARBAGE_STATUSES))
    def corrupt_task(self, kind: str, index: int, garbage: str) -> None:
        # one corruption per task: not one that has stray entries already
        strayed = {i for (_, _, i), count in self.strays.items() if count}
        candidates = [t for t in self.tasks.values()
                      if self.good(t) and t.status != "deleted" and t.id not in strayed]
        if not candidates:
            return
        self.corruptions += 1
        task = pick(candidates, index)
        note(f"corrupt {task.id!a} ({task.status}): {kind}")
        key = KEYS.task(task.id)
        if kind == "status":
            self.conn.hset(key, "status", garbage)
        elif kind == "no_queue":
            self.conn.hdel(key, "queue")
        elif kind == "attempt":
            self.conn.hset(key, "attempt", "many")
        elif kind == "no_hash":
            self.conn.delete(key)
        else:
            self.conn.delete(key)
            self.conn.set(key, "not a hash")
        task.bad = kind
        if task.id in self.pending[task.queue]:
            self.pending[task.queue].remove(task.id)

    @precondition(lambda self: self.corruptions < MAX_CORRUPTIONS and len(self.broken) < 2)
    @rule(kind=st.sampled_from(QUEUE_CORRUPTIONS), name=st.sampled_from(QUEUES))
    def corrupt_queue(self, kind: str, name: str) -> None:
        if name in self.broken:
            return
        self.corruptions += 1
        note(f"corrupt queue {name}: {kind}")
        raw_id = b"z\xff%d" % self.corruptions
        if kind == "nonutf8_pending":  # an id that is not UTF-8, with no task behind it
            self.raw.lpush(KEYS.pending(name), raw_id)
        elif kind == "nonutf8_lease":  # the same, with a lease that expired long ago
            self.raw.zadd(KEYS.leases(name), {raw_id: 1})
        else:  # a structure of the queue replaced by a string: the queue is broken
            structure = kind.split("_")[0]
            key = getattr(KEYS, structure)(name)
            self.raw.delete(key)
            self.raw.set(key, "x")
            self.broken[name] = structure

    @precondition(lambda self: self.corruptions < MAX_CORRUPTIONS)
    @rule(kind=st.sampled_from(STRAYS), index=st.integers(0, 1000))
    def stray_entry(self, kind: str, index: int) -> None:
        """The id of a good task written where it does not belong: the task must not change
        (the entry is dropped, or left for the deep clean), nor run again."""
        if kind == "other_queue":
            candidates = [t for t in self.tasks.values() if self.good(t)
                          and t.status != "deleted" and self.elsewhere(t.queue) is not None]
        else:
            candidates = self.live(*FINISHED)
        if not candidates:
            return
        self.corruptions += 1
        task = pick(candidates, index)
        name = self.elsewhere(task.queue) if kind == "other_queue" else task.queue
        assert name is not None
        note(f"stray entry of {task.id!a} ({task.status}, {task.queue}): {kind} in {name}")
        if kind == "scheduled":
            self.conn.zadd(KEYS.scheduled(name), {task.id: 1})
        else:
            self.conn.lpush(KEYS.pending(name), task.id)
        self.strays[(name, "scheduled" if kind == "scheduled" else "pending", task.id)] += 1

    def elsewhere(self, name: str) -> str | None:
        """A sound queue other than `name`."""
        for other in QUEUES[QUEUES.index(name) + 1:] + QUEUES[:QUEUES.index(name)]:
            if other not in self.broken:
                return other
        return None

    # -- invariants ---------------------------------------------------------------------
    @invariant()
    def every_good_task_is_where_its_status_says(self) -> None:
        structures, hashes = self.read()
        # the stray entries of the tasks checked here are counted again below
        strays = Counter({key: count for key, count in self.strays.items()
                          if key[0] in self.broken or not self.good(self.tasks[key[2]])})
        for task in self.tasks.values():
            if not self.good(task):
                continue
            self.check_task(task, structures, hashes.get(task.id), strays)
        self.strays = strays  # those still there
        for name in QUEUES:
            if name in self.broken:
                continue
            line = [i for i in structures[name]["pending"] if i in self.tasks
                    and self.good(self.tasks[i]) and self.tasks[i].status == "pending"
                    and self.tasks[i].queue == name]
            model = [i for i in self.pending[name] if self.good(self.tasks[i])]
            assert line == model, f"pending line of {name}: {line} in Redis, {model} expected"

    def read(self) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
        """Each structure of each sound queue, and each task hash, in one round trip."""
        ids = list(self.tasks)
        with self.conn.pipeline(transaction=False) as pipe:
            for name in QUEUES:
                pipe.lrange(KEYS.pending(name), 0, -1)
                pipe.zrange(KEYS.scheduled(name), 0, -1, withscores=True)
                pipe.zrange(KEYS.leases(name), 0, -1, withscores=True)
                pipe.smembers(KEYS.started(name))
                pipe.lrange(KEYS.complete(name), 0, -1)
                pipe.lrange(KEYS.failed(name), 0, -1)
                for listener in LISTENERS:
                    pipe.lrange(KEYS.reserved(name, listener), 0, -1)
            for task_id in ids:
                pipe.type(KEYS.task(task_id))
                pipe.hgetall(KEYS.task(task_id))
            replies = iter(pipe.execute(raise_on_error=False))
        structures: dict[str, dict[str, Any]] = {}
        for name in QUEUES:
            read = {s: next(replies) for s in
                    ("pending", "scheduled", "leases", "started", "complete", "failed")}
            read["reserved"] = {listener: next(replies) for listener in LISTENERS}
            if name not in self.broken:
                for value in (*read.values(), *read["reserved"].values()):
                    assert not isinstance(value, Exception), (name, value)
                read["scheduled"], read["leases"] = dict(read["scheduled"]), dict(read["leases"])
                structures[name] = read
        hashes = {}
        for task_id in ids:
            kind, data = next(replies), next(replies)
            hashes[task_id] = data if kind == "hash" else kind
        return structures, hashes

    def check_task(self, task: Task, structures: dict[str, dict[str, Any]], data: Any,
                   strays: Counter[tuple[str, str, str]]) -> None:
        where = f"task {task.id!a} ({task.status}, queue {task.queue}, holder {task.holder})"
        if task.status == "deleted":
            assert data == "none", f"{where}: its hash is still there"
        else:
            assert isinstance(data, dict), f"{where}: lost (its key holds {data!r})"
            assert data.get("status") == task.status, f"{where}: hash says {data}"
            assert data.get("queue") == task.queue, f"{where}: hash says {data}"
            if not task.quarantined:  # else the attempt field may be the corrupt value
                assert int(data.get("attempt") or 0) == task.attempt, \
                    f"{where}: hash says {data}"
            if task.status in HELD:
                assert data.get("node") == task.holder, f"{where}: hash says {data}"
            if task.status == "started":
                assert data.get("pid") == str(task.pid), f"{where}: hash says {data}"
            if task.status == "complete":
                assert data.get("result") == "done", f"{where}: hash says {data}"
            if task.status == "failed":
                assert (data.get("error") or "").startswith(task.error or ""), \
                    f"{where}: hash says {data}"
            if task.status == "scheduled":
                assert float(data["eta"]) == task.eta, f"{where}: hash says {data}"
        expected = WHERE[task.status]
        for name, read in structures.items():
            found = {
                "pending": read["pending"].count(task.id),
                "scheduled": int(task.id in read["scheduled"]),
                "leases": int(task.id in read["leases"]),
                "reserved": sum(ids.count(task.id) for ids in read["reserved"].values()),
                "started": sum(m.rpartition(" ")[2] == task.id for m in read["started"]),
                "complete": read["complete"].count(task.id),
                "failed": read["failed"].count(task.id),
            }
            want = {s: int(name == task.queue and s in expected) for s in STRUCTURES}
            for structure in ("pending", "scheduled"):  # less the stray entries left
                extra = found[structure] - want[structure]
                if 0 < extra <= self.strays[(name, structure, task.id)]:
                    found[structure] -= extra
                    strays[(name, structure, task.id)] = extra
            assert found == want, f"{where}: in {name}'s structures {found}, expected {want}"
            if name != task.queue:
                continue
            if task.status in HELD:
                assert read["reserved"][task.holder].count(task.id) == 1, \
                    f"{where}: not in its holder's reserved list"
                deadline = read["leases"][task.id]
                assert (deadline != float("inf")) == task.lapses, f"{where}: lease {deadline}"
            if task.status == "started":
                member = f"{task.holder} {task.pid} {task.id}"
                assert member in read["started"], f"{where}: {read['started']}"
            if task.status == "scheduled":
                assert read["scheduled"][task.id] == task.eta, f"{where}: eta"


QueueMachine.TestCase.settings = settings(
    max_examples=12 if os.environ.get("LIMPYD_BLUEQUE_INNER_RUN") else 300,
    stateful_step_count=50, deadline=None, database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
TestCase = QueueMachine.TestCase


# -- known bugs: a stray entry of a good task makes it run again, or fails it -------------
def test_a_stray_schedule_entry_never_runs_a_finished_task_again(conn):
    queue = Queue.named("q1")
    queue.enqueue("x", task_id="t1")
    job, _ = Queue.reserve_from(["q1"], LISTENERS[0])
    assert job is not None and job.fail("Boom: no", listener_id=LISTENERS[0], attempt=1)
    conn.zadd(KEYS.scheduled("q1"), {"t1": 1})  # another client's stray entry, long due
    assert queue.enqueue_due() == []
    assert conn.hget(KEYS.task("t1"), "status") == "failed"
    assert Queue.reserve_from(["q1"], LISTENERS[1]) == (None, None)


def test_a_stray_entry_in_another_queue_never_fails_a_good_task(conn):
    Queue.named("q3").enqueue("x", task_id="t1")
    conn.lpush(KEYS.pending("q1"), "t1")  # another client's stray entry
    assert Queue.reserve_from(["q1"], LISTENERS[0]) == (None, None)
    task = conn.hgetall(KEYS.task("t1"))
    assert (task["status"], task["queue"]) == ("pending", "q3")
    job, _ = Queue.reserve_from(["q3"], LISTENERS[0])
    assert job is not None and job.task_id == "t1"
