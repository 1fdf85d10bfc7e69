"""limpyd-blueque and the reference `blueque==1.0.1` are interchangeable on one Redis.

Every scenario runs twice on the same server: once with the reference package alone,
then with some of its roles played by limpyd-blueque (through `limpyd_blueque.Client`,
or through the `Queue` and `Job` models). After each step the whole Redis state of the
mixed run must equal the state the reference alone left at that step, once ids and
timestamps are replaced by placeholders and limpyd-blueque's documented additions
(the `blueque:` keys, the `attempt` and `ttr` task fields) are set aside.

The few places where limpyd-blueque differs on purpose are tested as such at the end.
"""

from __future__ import annotations

import contextlib
import itertools
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any, Callable, Protocol

import pytest
from reference import Reference, ReferenceRaised, reference  # noqa: F401  (a fixture)

from limpyd_blueque import Client, InvalidTransition, Job, Queue, TaskNotFound
from limpyd_blueque.client import Listener
from limpyd_blueque.protocol.liveness import listener_id_for

QUEUE = "wire.compat"
PARAMETERS = '{"video": "a.mp4", "size": [1280, 720]}'
RESULT = '{"frames": 1800}'
ERROR = "ValueError: corrupt header"
PID = 4242
#: how far ahead a task that must become due during the test is scheduled
DUE_IN = 0.25
#: the task attributes the reference `Task` exposes
ATTRIBUTES = ("status", "queue", "parameters", "result", "error", "node", "pid",
              "created", "updated")

OWN_KEY_PREFIX = "blueque:"  # keys limpyd-blueque adds beside the Blueque ones
OWN_TASK_FIELDS = frozenset(Job.OWN_FIELDS)  # task fields limpyd-blueque adds
TIMESTAMP_FIELDS = frozenset({"created", "updated", "eta"})
TIMESTAMP_SCORED_PREFIX = "blueque_scheduled_tasks_"
TASK_KEY_PREFIX = "blueque_task_"
TIME = "<time>"
DECIMAL = re.compile(r"^[0-9]+(\.[0-9]+)?$")

Steps = Iterator[str]
Scenario = Callable[..., Steps]
State = dict[str, tuple[str, Any]]


# -- snapshots ----------------------------------------------------------------------------
class Ids:
    """The task and listener ids a run met, in order of first appearance."""

    def __init__(self) -> None:
        self._placeholders: dict[str, str] = {}
        self._counts = {"task": 0, "listener": 0}

    def _add(self, value: str | None, kind: str) -> str | None:
        if value is not None and value not in self._placeholders:
            self._counts[kind] += 1
            self._placeholders[value] = f"<{kind}{self._counts[kind]}>"
        return value

    def task(self, task_id: str | None) -> str | None:
        return self._add(task_id, "task")

    def listener(self, listener_id: str | None) -> str | None:
        return self._add(listener_id, "listener")

    def replace(self, text: str) -> str:
        """`text` with every known id replaced by its placeholder."""
        if not self._placeholders:
            return text
        ids = sorted(self._placeholders, key=len, reverse=True)
        pattern = re.compile("|".join(map(re.escape, ids)))
        return pattern.sub(lambda match: self._placeholders[match.group(0)], text)


def read_key(conn, key: str) -> tuple[str, Any]:
    """The type and whole content of one key: lists in order, sets sorted, scores kept."""
    kind = conn.type(key)
    if kind == "string":
        return kind, conn.get(key)
    if kind == "list":
        return kind, conn.lrange(key, 0, -1)
    if kind == "set":
        return kind, sorted(conn.smembers(key))
    if kind == "zset":
        return kind, conn.zrange(key, 0, -1, withscores=True)
    if kind == "hash":
        return kind, conn.hgetall(key)
    return kind, None


def raw_state(conn) -> State:
    """Every key of the database, exactly as stored."""
    return {key: read_key(conn, key) for key in sorted(conn.scan_iter("*"))}


def snapshot(conn, ids: Ids) -> State:
    """The Blueque state, comparable between runs.

    limpyd-blueque's own keys and task fields are left out, ids become placeholders,
    and timestamps (task `created`, `updated`, `eta`; scheduled scores) become `TIME`.
    """

    def value(text: str, timestamp: bool = False) -> str:
        return TIME if timestamp and DECIMAL.match(text) else ids.replace(text)

    state: State = {}
    for key, (kind, content) in raw_state(conn).items():
        if key.startswith(OWN_KEY_PREFIX):
            continue
        if kind == "string":
            content = value(content)
        elif kind in ("list", "set"):
            content = [value(member) for member in content]
            content = sorted(content) if kind == "set" else content
        elif kind == "zset":
            timed = key.startswith(TIMESTAMP_SCORED_PREFIX)
            content = [(value(member), TIME if timed else score) for member, score in content]
        elif kind == "hash":
            if key.startswith(TASK_KEY_PREFIX):
                content = {f: v for f, v in content.items() if f not in OWN_TASK_FIELDS}
            content = {f: value(v, f in TIMESTAMP_FIELDS) for f, v in content.items()}
        state[ids.replace(key)] = (kind, content)
    return dict(sorted(state.items()))


def assert_same_state(step: str, expected: State, actual: State) -> None:
    """`actual` holds the Blueque keys and fields of `expected`, no more and no fewer."""
    extra_keys = sorted(set(actual) - set(expected))
    assert not extra_keys, f"after {step!r}, keys the reference would not have: {extra_keys}"
    extra_fields = {
        key: sorted(set(content) - set(expected[key][1]))
        for key, (kind, content) in actual.items()
        if kind == "hash" == expected[key][0] and set(content) - set(expected[key][1])
    }
    assert not extra_fields, f"after {step!r}, fields the reference would not have: {extra_fields}"
    assert actual == expected, f"after {step!r}, the state differs from the reference's"


# -- the two libraries behind one interface ------------------------------------------------
class Side(Protocol):
    """One role in a scenario, played by either library; ids are returned and recorded."""

    def enqueue(self, queue: str, parameters: str) -> str: ...
    def enqueue_many(self, queue: str, parameters: list[str]) -> list[str]: ...
    def schedule(self, queue: str, parameters: str, eta: float) -> str: ...
    def enqueue_due(self, queue: str) -> None: ...
    def add_listener(self, queue: str) -> str: ...
    def remove_listener(self, queue: str, listener: str) -> None: ...
    def listen(self, queue: str) -> str | None: ...
    def listen_and_start(self, queue: str, pid: int) -> str | None: ...
    def start(self, task_id: str, pid: int) -> None: ...
    def complete(self, task_id: str, result: str) -> None: ...
    def fail(self, task_id: str, error: str) -> None: ...
    def delete(self, queue: str, task_id: str) -> None: ...
    def claim_orphan(self, queue: str) -> str | None: ...
    def die_holding_next_task(self, queue: str) -> str | None: ...


def dead_pid() -> int:
    """The pid of a process of this host that has exited."""
    child = subprocess.Popen([sys.executable, "-I", "-S", "-c", ""])
    child.wait()
    return child.pid


class BluequeSide:
    """The reference package, in the driver process `driver`."""

    def __init__(self, driver: Reference, ids: Ids) -> None:
        self.driver, self.ids = driver, ids

    def enqueue(self, queue: str, parameters: str) -> str:
        return self.ids.task(self.driver.enqueue(queue, parameters))

    def enqueue_many(self, queue: str, parameters: list[str]) -> list[str]:
        return [self.enqueue(queue, text) for text in parameters]

    def schedule(self, queue: str, parameters: str, eta: float) -> str:
        return self.ids.task(self.driver.schedule(queue, parameters, eta))

    def enqueue_due(self, queue: str) -> None:
        self.driver.enqueue_due_tasks(queue)

    def add_listener(self, queue: str) -> str:
        return self.ids.listener(self.driver.add_listener(queue))

    def remove_listener(self, queue: str, listener: str) -> None:
        self.driver.remove_listener(queue, listener)

    def _listened(self, listened: Any) -> str | None:
        self.ids.listener(listened.listener)
        return self.ids.task(listened.task and listened.task["id"])

    def listen(self, queue: str) -> str | None:
        return self._listened(self.driver.listen(queue))

    def listen_and_start(self, queue: str, pid: int) -> str | None:
        task = self.listen(queue)
        if task is not None:
            self.start(task, pid)
        return task

    def start(self, task_id: str, pid: int) -> None:
        self.driver.start(task_id, pid)

    def complete(self, task_id: str, result: str) -> None:
        self.driver.complete(task_id, result)

    def fail(self, task_id: str, error: str) -> None:
        self.driver.fail(task_id, error)

    def delete(self, queue: str, task_id: str) -> None:
        self.driver.delete_task(queue, task_id)

    def claim_orphan(self, queue: str) -> str | None:
        return self._listened(self.driver.claim_orphan(queue))

    def die_holding_next_task(self, queue: str) -> str | None:
        with self.driver.spawn() as doomed:
            return self._listened(doomed.listen(queue))


class ClientSide:
    """limpyd-blueque through its drop-in `Client`, in this process."""

    def __init__(self, client: Client, ids: Ids) -> None:
        self.client, self.ids = client, ids
        self.listeners: dict[str, Listener] = {}

    def enqueue(self, queue: str, parameters: str) -> str:
        return self.ids.task(self.client.get_queue(queue).enqueue(parameters))

    def enqueue_many(self, queue: str, parameters: list[str]) -> list[str]:
        return [self.enqueue(queue, text) for text in parameters]

    def schedule(self, queue: str, parameters: str, eta: float) -> str:
        return self.ids.task(self.client.get_queue(queue).schedule(parameters, eta))

    def enqueue_due(self, queue: str) -> None:
        self.client.get_queue(queue).enqueue_due_tasks()

    def add_listener(self, queue: str) -> str:
        self.listeners[queue] = self.client.get_listener(queue)
        return self.ids.listener(self.listeners[queue].listener_id)

    def remove_listener(self, queue: str, listener: str) -> None:
        self.listeners.pop(queue, None)
        self.client.queue_model.named(queue).remove_listener(listener)

    def _listener(self, queue: str) -> Listener:
        if queue not in self.listeners:
            self.add_listener(queue)
        return self.listeners[queue]

    def _listen(self, queue: str, listener: Listener) -> str:
        # `Listener.listen` waits for a task: never call it on an empty queue
        pending = self.client.queue_model.named(queue).pending.llen()
        assert pending, "no pending task: Listener.listen would wait for one"
        self.ids.listener(listener.listener_id)
        return self.ids.task(listener.listen().id)

    def listen(self, queue: str) -> str | None:
        return self._listen(queue, self._listener(queue))

    def listen_and_start(self, queue: str, pid: int) -> str | None:
        task = self.listen(queue)
        self.start(task, pid)
        return task

    def _processor(self, task_id: str):
        return self.client.get_processor(self.client.get_task(task_id))

    def start(self, task_id: str, pid: int) -> None:
        self._processor(task_id).start(pid)

    def complete(self, task_id: str, result: str) -> None:
        assert self._processor(task_id).complete(result), f"completing {task_id} was refused"

    def fail(self, task_id: str, error: str) -> None:
        assert self._processor(task_id).fail(error), f"failing {task_id} was refused"

    def delete(self, queue: str, task_id: str) -> None:
        self.client.get_queue(queue).delete_task(self.client.get_task(task_id))

    def claim_orphan(self, queue: str) -> str | None:
        listener = self._listener(queue)
        self.ids.listener(listener.listener_id)
        task = listener.claim_orphan()
        return self.ids.task(task and task.id)

    def die_holding_next_task(self, queue: str) -> str | None:
        doomed = Listener(self.client, self.client.queue_model.named(queue),
                          listener_id_for(pid=dead_pid(), host=socket.getfqdn()))
        return self._listen(queue, doomed)


class ModelsSide:
    """limpyd-blueque through the `Queue` and `Job` models, as listener `listener_id`."""

    def __init__(self, ids: Ids, listener_id: str | None = None) -> None:
        self.ids = ids
        self.listener_id = listener_id or listener_id_for()
        self.listening: set[str] = set()

    def enqueue(self, queue: str, parameters: str) -> str:
        return self.ids.task(Queue.named(queue).enqueue(parameters).pk.get())

    def enqueue_many(self, queue: str, parameters: list[str]) -> list[str]:
        """All in one step, with `Queue.enqueue_many`."""
        return [self.ids.task(job.pk.get()) for job in Queue.named(queue).enqueue_many(parameters)]

    def schedule(self, queue: str, parameters: str, eta: float) -> str:
        return self.ids.task(Queue.named(queue).schedule(parameters, eta).pk.get())

    def enqueue_due(self, queue: str) -> None:
        Queue.named(queue).enqueue_due()

    def add_listener(self, queue: str) -> str:
        Queue.named(queue).add_listener(self.listener_id)
        self.listening.add(queue)
        return self.ids.listener(self.listener_id)

    def remove_listener(self, queue: str, listener: str) -> None:
        self.listening.discard(queue)
        Queue.named(queue).remove_listener(listener)

    def listen(self, queue: str, pid: int | None = None) -> str | None:
        if queue not in self.listening:
            self.add_listener(queue)
        self.ids.listener(self.listener_id)
        job = Queue.named(queue).reserve(self.listener_id, pid=pid)
        return self.ids.task(job and job.pk.get())

    def listen_and_start(self, queue: str, pid: int) -> str | None:
        """Reserve and start in one step, with `Queue.reserve(..., pid=pid)`."""
        return self.listen(queue, pid)

    def start(self, task_id: str, pid: int) -> None:
        job = Job.load(task_id)
        job.start(job.node.hget(), pid)  # as the process the task's listener runs it in

    def complete(self, task_id: str, result: str) -> None:
        assert Job.load(task_id).complete(result), f"completing {task_id} was refused"

    def fail(self, task_id: str, error: str) -> None:
        assert Job.load(task_id).fail(error), f"failing {task_id} was refused"

    def delete(self, queue: str, task_id: str) -> None:
        Queue.named(queue).delete_task(Job.load(task_id))

    def claim_orphan(self, queue: str) -> str | None:
        raise NotImplementedError("claiming orphans is a Client feature")

    def die_holding_next_task(self, queue: str) -> str | None:
        dead = listener_id_for(pid=dead_pid(), host=socket.getfqdn())
        return ModelsSide(self.ids, dead).listen(queue)


# -- running a scenario twice --------------------------------------------------------------
class Comparison:
    """Runs a scenario with the reference alone, then mixed, comparing after each step."""

    def __init__(self, conn, driver: Reference, client: Client) -> None:
        self.conn, self.driver, self.client = conn, driver, client
        self._others: dict[str, Reference] = {}
        self._processes = contextlib.ExitStack()

    def _driver(self, name: str) -> Reference:
        """`blueque` is the session's driver; `blueque-2`... are other reference processes."""
        if name == "blueque":
            return self.driver
        if name not in self._others:
            self._others[name] = self._processes.enter_context(self.driver.spawn())
        return self._others[name]

    def _side(self, name: str, ids: Ids) -> Side:
        if name.startswith("blueque"):
            return BluequeSide(self._driver(name), ids)
        if name == "client":
            return ClientSide(self.client, ids)
        if name == "models":
            return ModelsSide(ids)
        raise ValueError(f"unknown side {name!r}")

    def _run(self, scenario: Scenario, roles: dict[str, str]) -> list[tuple[str, State]]:
        self.conn.flushdb()
        for name in {"blueque", *roles.values()}:
            if name.startswith("blueque"):
                self._driver(name).reset()
        ids = Ids()
        sides = {name: self._side(name, ids) for name in set(roles.values())}
        steps = scenario(**{role: sides[name] for role, name in roles.items()})
        return [(step, snapshot(self.conn, ids)) for step in steps]

    def __call__(self, scenario: Scenario, baseline: dict[str, str] | None = None,
                 **roles: str) -> None:
        """Compare `scenario` played by `roles` with it played by the reference alone.

        Each role is a side name: `blueque`, `client` or `models`. In the reference-only
        run every role is `blueque` unless `baseline` names another reference process
        (`blueque-2`) for it.
        """
        expected = self._run(scenario, {role: "blueque" for role in roles} | (baseline or {}))
        actual = self._run(scenario, roles)
        assert [step for step, _ in actual] == [step for step, _ in expected]
        for (step, want), (_, got) in zip(expected, actual):
            assert_same_state(step, want, got)

    def close(self) -> None:
        self._processes.close()


@pytest.fixture(scope="session")
def limpyd_client(redis_url: str) -> Iterator[Client]:
    client = Client(redis_url)
    yield client
    client.database.connection.close()


@pytest.fixture
def compare(conn, database, reference: Reference,  # noqa: F811
            limpyd_client: Client) -> Iterator[Comparison]:
    comparison = Comparison(conn, reference, limpyd_client)
    yield comparison
    comparison.close()


@pytest.fixture
def driver(reference: Reference) -> Reference:  # noqa: F811
    """The session's reference process, its listeners forgotten: the database is empty."""
    reference.reset()
    return reference


@pytest.fixture(params=["client", "models"])
def limpyd(request) -> str:
    """Which API of limpyd-blueque plays the limpyd roles: `Client`, or the models."""
    return request.param


# -- scenarios ----------------------------------------------------------------------------
def lifecycle(outcome: str) -> Scenario:
    """A task's whole life, each step by its own role, ending `complete` or `failed`."""

    def scenario(producer: Side, listener: Side, processor: Side, janitor: Side) -> Steps:
        task = producer.enqueue(QUEUE, PARAMETERS)
        yield "enqueue"
        listener_id = listener.add_listener(QUEUE)
        yield "add listener"
        assert listener.listen(QUEUE) == task
        yield "reserve"
        processor.start(task, PID)
        yield "start"
        if outcome == "complete":
            processor.complete(task, RESULT)
        else:
            processor.fail(task, ERROR)
        yield outcome
        janitor.delete(QUEUE, task)
        yield "delete finished task"
        listener.remove_listener(QUEUE, listener_id)
        yield "remove listener"

    return scenario


def scheduled(producer: Side, scheduler: Side, consumer: Side) -> Steps:
    """Tasks scheduled now, soon and later; the due ones run in order, the later one waits."""
    soon_eta = time.time() + DUE_IN
    soon = producer.schedule(QUEUE, '"soon"', soon_eta)
    producer.schedule(QUEUE, '"later"', time.time() + 3600)
    yield "schedule"
    past = producer.schedule(QUEUE, '"past"', time.time() - 60)
    yield "schedule with an eta already past"
    time.sleep(max(0.0, soon_eta - time.time()) + 0.01)
    scheduler.enqueue_due(QUEUE)
    yield "enqueue due tasks"
    for task in (past, soon):
        assert consumer.listen(QUEUE) == task
        yield "reserve"
        consumer.start(task, PID)
        yield "start"
        consumer.complete(task, RESULT)
        yield "complete"
        consumer.delete(QUEUE, task)
        yield "delete finished task"


def listener_comes_and_goes(producer: Side, registrar: Side, remover: Side) -> Steps:
    """A listener registered by one library is unregistered by the other."""
    producer.enqueue(QUEUE, PARAMETERS)
    yield "enqueue"
    listener = registrar.add_listener(QUEUE)
    yield "add listener"
    remover.remove_listener(QUEUE, listener)
    yield "remove listener"
    remover.remove_listener(QUEUE, listener)
    yield "remove a listener already gone"


def orphan_claimed(producer: Side, orphaner: Side, claimer: Side) -> Steps:
    """A listener dies holding a task; a listener of the same host claims and runs it."""
    task = producer.enqueue(QUEUE, PARAMETERS)
    yield "enqueue"
    assert orphaner.die_holding_next_task(QUEUE) == task
    yield "listener dies holding the task"
    assert claimer.claim_orphan(QUEUE) == task
    yield "claim orphan"
    claimer.start(task, PID)
    yield "start"
    claimer.complete(task, RESULT)
    yield "complete"


def interleaved(first_producer: Side, second_producer: Side, first_consumer: Side,
                second_consumer: Side) -> Steps:
    """Tasks from both producers are taken in submission order by both consumers."""
    one = first_producer.enqueue(QUEUE, '"one"')
    two = second_producer.enqueue(QUEUE, '"two"')
    three = first_producer.enqueue(QUEUE, '"three"')
    yield "enqueue"
    for consumer, task in ((first_consumer, one), (second_consumer, two), (first_consumer, three)):
        assert consumer.listen(QUEUE) == task
        yield "reserve"
    for consumer, task in ((second_consumer, two), (first_consumer, one)):
        consumer.start(task, PID)
        yield "start"
    first_consumer.fail(one, ERROR)
    yield "fail"
    second_consumer.complete(two, RESULT)
    yield "complete"


def bulk_taken_and_started(producer: Side, worker: Side) -> Steps:
    """Tasks submitted together are each taken and started by one call, in order."""
    tasks = producer.enqueue_many(QUEUE, ['"one"', '"two"', '"three"'])
    yield "enqueue three tasks"
    for task in tasks:
        assert worker.listen_and_start(QUEUE, PID) == task
        yield "reserve and start"
    for task in tasks:
        worker.complete(task, RESULT)
        yield "complete"


# -- blueque produces, limpyd-blueque consumes, and the reverse -----------------------------
def test_task_enqueued_by_blueque_is_completed_by_limpyd_blueque(compare, limpyd):
    """A reference task is reserved, started, completed and deleted by limpyd-blueque."""
    compare(lifecycle("complete"), producer="blueque", listener=limpyd, processor=limpyd,
            janitor=limpyd)


def test_task_enqueued_by_blueque_is_failed_by_limpyd_blueque(compare, limpyd):
    """A reference task is reserved, started, failed and deleted by limpyd-blueque."""
    compare(lifecycle("failed"), producer="blueque", listener=limpyd, processor=limpyd,
            janitor=limpyd)


def test_task_enqueued_by_limpyd_blueque_is_completed_by_blueque(compare, limpyd):
    """A limpyd-blueque task is reserved, started, completed and deleted by the reference."""
    compare(lifecycle("complete"), producer=limpyd, listener="blueque", processor="blueque",
            janitor="blueque")


def test_task_enqueued_by_limpyd_blueque_is_failed_by_blueque(compare, limpyd):
    """A limpyd-blueque task is reserved, started, failed and deleted by the reference."""
    compare(lifecycle("failed"), producer=limpyd, listener="blueque", processor="blueque",
            janitor="blueque")


def test_task_reserved_by_blueque_is_run_by_a_limpyd_blueque_processor(compare, limpyd):
    """A processor of limpyd-blueque starts and completes what a reference listener took."""
    compare(lifecycle("complete"), producer="blueque", listener="blueque", processor=limpyd,
            janitor="blueque")


def test_task_reserved_by_limpyd_blueque_is_run_by_a_blueque_processor(compare, limpyd):
    """A reference processor starts and fails what a limpyd-blueque listener took."""
    compare(lifecycle("failed"), producer=limpyd, listener=limpyd, processor="blueque",
            janitor=limpyd)


def test_task_finished_by_blueque_is_deleted_by_limpyd_blueque(compare, limpyd):
    """limpyd-blueque deletes a task the reference completed, as the reference would."""
    compare(lifecycle("complete"), producer="blueque", listener="blueque",
            processor="blueque", janitor=limpyd)


def test_task_finished_by_limpyd_blueque_is_deleted_by_blueque(compare, limpyd):
    """The reference deletes a task limpyd-blueque failed, as limpyd-blueque would."""
    compare(lifecycle("failed"), producer=limpyd, listener=limpyd, processor=limpyd,
            janitor="blueque")


ROLES = ("producer", "listener", "processor", "janitor")
MIXES = [mix for mix in itertools.product((True, False), repeat=len(ROLES)) if any(mix)]


@pytest.mark.parametrize("outcome", ["complete", "failed"])
@pytest.mark.parametrize("mix", MIXES, ids=lambda mix: "-".join(
    role for role, limpyd_plays in zip(ROLES, mix) if limpyd_plays))
def test_any_role_played_by_limpyd_blueque_leaves_the_reference_state(compare, limpyd, mix,
                                                                     outcome):
    """Whichever roles limpyd-blueque plays (named in the test id), every step leaves the
    state the reference alone leaves."""
    roles = {role: limpyd if limpyd_plays else "blueque" for role, limpyd_plays in zip(ROLES, mix)}
    compare(lifecycle(outcome), **roles)


def test_task_scheduled_by_blueque_is_enqueued_when_due_and_run_by_limpyd_blueque(compare,
                                                                                limpyd):
    """limpyd-blueque moves the reference's due tasks to pending, and runs them in order."""
    compare(scheduled, producer="blueque", scheduler=limpyd, consumer=limpyd)


def test_task_scheduled_by_limpyd_blueque_is_enqueued_when_due_and_run_by_blueque(compare,
                                                                                limpyd):
    """The reference moves limpyd-blueque's due tasks to pending, and runs them in order."""
    compare(scheduled, producer=limpyd, scheduler="blueque", consumer="blueque")


def test_task_scheduled_by_blueque_is_made_due_by_blueque_and_run_by_limpyd_blueque(compare,
                                                                                   limpyd):
    """Tasks the reference scheduled and made due are taken by limpyd-blueque in order."""
    compare(scheduled, producer="blueque", scheduler="blueque", consumer=limpyd)


def test_listener_added_by_blueque_is_removed_by_limpyd_blueque(compare, limpyd):
    """limpyd-blueque unregisters a reference listener and updates its queue's count."""
    compare(listener_comes_and_goes, producer="blueque", registrar="blueque", remover=limpyd)


def test_listener_added_by_limpyd_blueque_is_removed_by_blueque(compare, limpyd):
    """The reference unregisters a limpyd-blueque listener and updates its queue's count."""
    compare(listener_comes_and_goes, producer=limpyd, registrar=limpyd, remover="blueque")


def test_task_orphaned_by_a_dead_blueque_listener_is_claimed_by_limpyd_blueque(compare):
    """`Client.get_listener(...).claim_orphan()` takes over what a dead reference listener
    of this host held, and runs it, as the reference does."""
    compare(orphan_claimed, producer="blueque", orphaner="blueque", claimer="client")


def test_task_orphaned_by_a_dead_limpyd_blueque_listener_is_claimed_by_blueque(compare, limpyd):
    """The reference claims and runs what a dead limpyd-blueque listener of this host held."""
    compare(orphan_claimed, producer=limpyd, orphaner=limpyd, claimer="blueque")


def test_tasks_of_both_libraries_are_taken_in_submission_order_by_both(compare, limpyd):
    """Producers and listeners of both libraries share one queue in FIFO order."""
    compare(interleaved, baseline={"first_consumer": "blueque-2"}, first_producer="blueque",
            second_producer=limpyd, first_consumer=limpyd, second_consumer="blueque")


def test_tasks_enqueued_in_bulk_by_limpyd_blueque_are_taken_in_order_by_blueque(compare, limpyd):
    """`Queue.enqueue_many` leaves what one reference `enqueue` per task leaves."""
    compare(bulk_taken_and_started, producer=limpyd, worker="blueque")


def test_task_reserved_and_started_in_one_step_by_limpyd_blueque_looks_as_with_blueque(
        compare, limpyd):
    """`Queue.reserve(listener, pid=...)` leaves what the reference's reserve then start
    leave."""
    compare(bulk_taken_and_started, producer="blueque", worker=limpyd)


def test_each_library_reads_the_tasks_of_the_other_with_the_same_attributes(
        driver: Reference, limpyd_client: Client, database):
    """At every status, `Client.get_task` and `Job.data()` read what the reference reads."""

    def assert_read_alike(task_id: str) -> None:
        expected = driver.get_task(task_id)
        for data in (limpyd_client.get_task(task_id), Job.load(task_id).data()):
            assert {name: getattr(data, name) for name in ATTRIBUTES} == {
                name: expected[name] for name in ATTRIBUTES}
        assert limpyd_client.get_task(task_id).eta == (
            float(expected["fields"]["eta"]) if "eta" in expected["fields"] else None)

    by_reference = driver.enqueue(QUEUE, PARAMETERS)
    by_limpyd = limpyd_client.get_queue(QUEUE).enqueue(PARAMETERS)
    for task_id in (by_reference, by_limpyd):
        assert_read_alike(task_id)
    assert driver.listen(QUEUE).task["id"] == by_reference
    assert Queue.named(QUEUE).reserve(listener_id_for()).pk.get() == by_limpyd
    driver.start(by_reference, PID)
    limpyd_client.get_processor(limpyd_client.get_task(by_limpyd)).start(PID)
    for task_id in (by_reference, by_limpyd):
        assert_read_alike(task_id)
    driver.fail(by_reference, ERROR)
    limpyd_client.get_processor(limpyd_client.get_task(by_limpyd)).complete(RESULT)
    for task_id in (by_reference, by_limpyd):
        assert_read_alike(task_id)
    eta = time.time() + 3600
    for task_id in (driver.schedule(QUEUE, PARAMETERS, eta),
                    limpyd_client.get_queue(QUEUE).schedule(PARAMETERS, eta)):
        assert_read_alike(task_id)


# -- deliberate differences -----------------------------------------------------------------
def test_limpyd_blueque_refuses_to_finish_a_task_it_does_not_hold_where_blueque_overwrites(
        driver: Reference, limpyd_client: Client, database, conn):
    """Only the listener holding a reserved or started task may complete or fail it: other
    listeners, and everyone once it is finished, get False and change nothing, where the
    reference overwrites the result and files the task a second time."""
    task = driver.enqueue(QUEUE, PARAMETERS)
    holder = driver.listen(QUEUE).listener
    driver.start(task, PID)
    waiting = driver.enqueue(QUEUE, '"waiting"')
    before = raw_state(conn)
    stranger = listener_id_for(host="elsewhere.example.com", pid=7)
    assert Job.load(task).complete(RESULT, listener_id=stranger) is False
    assert Job.load(task).fail(ERROR, listener_id=stranger) is False
    assert Job.load(waiting).complete(RESULT, listener_id=holder) is False
    assert Job.load(waiting).fail(ERROR, listener_id=holder) is False
    assert raw_state(conn) == before

    driver.complete(task, RESULT)
    before = raw_state(conn)
    assert limpyd_client.get_processor(limpyd_client.get_task(task)).complete("again") is False
    assert limpyd_client.get_processor(limpyd_client.get_task(task)).fail(ERROR) is False
    assert Job.load(task).complete("again") is False
    assert raw_state(conn) == before

    driver.complete(task, "again")
    assert conn.hget(f"blueque_task_{task}", "result") == "again"
    assert conn.lrange(f"blueque_complete_tasks_{QUEUE}", 0, -1) == [task, task]


def test_get_task_of_an_unknown_id_is_an_empty_task_as_in_blueque_and_the_models_raise(
        driver: Reference, limpyd_client: Client, database):
    """`Client.get_task` gives, as the reference does, a task whose every attribute is None
    for an id with no hash; the models' `Job.load` raises `TaskNotFound`."""
    unknown = "00000000-0000-4000-8000-000000000000"
    assert driver.get_task(unknown) == {"id": unknown, "fields": {},
                                        **{name: None for name in ATTRIBUTES}}
    task = limpyd_client.get_task(unknown)
    assert {"id": task.id, **{name: getattr(task, name) for name in ATTRIBUTES}} == {
        "id": unknown, **{name: None for name in ATTRIBUTES}}
    with pytest.raises(TaskNotFound):
        Job.load(unknown)


def test_a_listener_added_twice_is_counted_once_where_blueque_counts_it_twice(
        driver: Reference, limpyd_client: Client, database, conn):
    """`blueque_queues` counts the listeners in the listener set with limpyd-blueque; the
    reference adds one per registration, so its count drifts above the set's size."""
    listener = driver.add_listener("twice.blueque")
    assert driver.add_listener("twice.blueque") == listener
    assert conn.smembers("blueque_listeners_twice.blueque") == {listener}
    assert conn.zscore("blueque_queues", "twice.blueque") == 2
    driver.remove_listener("twice.blueque", listener)
    assert conn.zscore("blueque_queues", "twice.blueque") == 1

    queue = Queue.named("twice.limpyd")
    own = listener_id_for(host=socket.getfqdn())  # how the drop-in client names itself
    assert queue.add_listener(own) is True
    assert queue.add_listener(own) is False
    limpyd_client.get_listener("twice.limpyd")
    assert conn.smembers("blueque_listeners_twice.limpyd") == {own}
    assert conn.zscore("blueque_queues", "twice.limpyd") == 1
    assert queue.remove_listener(own) is True
    assert conn.zscore("blueque_queues", "twice.limpyd") == 0


def test_limpyd_blueque_refuses_to_start_a_task_not_reserved_by_that_listener(
        driver: Reference, limpyd_client: Client, database, conn):
    """Starting a task that is not reserved (here: already started) raises
    `InvalidTransition` and changes nothing; the reference files it as started again."""
    task = driver.enqueue(QUEUE, PARAMETERS)
    driver.listen(QUEUE)
    driver.start(task, PID)
    before = raw_state(conn)
    with pytest.raises(InvalidTransition):
        limpyd_client.get_processor(limpyd_client.get_task(task)).start(PID + 1)
    with pytest.raises(InvalidTransition):
        Job.load(task).start(listener_id_for(host="elsewhere.example.com", pid=7), PID + 1)
    assert raw_state(conn) == before

    driver.start(task, PID + 1)
    assert len(conn.smembers(f"blueque_started_tasks_{QUEUE}")) == 2


def test_deleting_an_unfinished_task_raises_invalid_transition_where_blueque_raises_value_error(
        driver: Reference, limpyd_client: Client, database, conn):
    """Neither library deletes a pending task; each refuses with its own exception."""
    task = driver.enqueue(QUEUE, PARAMETERS)
    before = raw_state(conn)
    with pytest.raises(ReferenceRaised, match=r"^ValueError: Cannot delete task with status"):
        driver.delete_task(QUEUE, task)
    with pytest.raises(InvalidTransition):
        limpyd_client.get_queue(QUEUE).delete_task(limpyd_client.get_task(task))
    assert raw_state(conn) == before


def test_parameters_that_are_not_text_are_stored_as_json_where_blueque_refuses_them(
        driver: Reference, limpyd_client: Client, database, conn):
    """A dict is stored as compact JSON by limpyd-blueque, which the reference reads back
    as the text its own users pass; the reference cannot store it at all."""
    with pytest.raises(ReferenceRaised, match=r"^DataError"):
        driver.enqueue(QUEUE, {"video": "a.mp4"})
    assert conn.keys("*") == []
    task = limpyd_client.get_queue(QUEUE).enqueue({"video": "a.mp4"})
    assert driver.get_task(task)["parameters"] == '{"video":"a.mp4"}'


def test_priority_0_tasks_are_shared_and_other_priorities_run_only_on_limpyd_blueque(
        driver: Reference, database, conn):
    """A task of priority 0 (the default) waits in the Blueque pending list, where the
    reference takes it; a task of another priority waits in this library's prioritized
    set, which the reference never reads. limpyd-blueque's reserve takes the highest
    priority first, the reference's tasks counting as priority 0."""
    queue = Queue.named(QUEUE)
    ours = queue.enqueue(PARAMETERS)
    urgent = queue.enqueue(PARAMETERS, priority=5)
    background = queue.enqueue(PARAMETERS, priority=-1)
    theirs = driver.enqueue(QUEUE, PARAMETERS)
    assert driver.listen(QUEUE).task["id"] == ours.task_id
    assert driver.get_task(ours.task_id)["status"] == "reserved"
    listener = listener_id_for()
    assert queue.reserve(listener).task_id == urgent.task_id
    assert queue.reserve(listener).task_id == theirs
    assert driver.listen(QUEUE).task is None  # the priority -1 task is not in its list
    assert queue.reserve(listener).task_id == background.task_id
    assert driver.get_task(background.task_id)["status"] == "reserved"


def test_tasks_of_a_group_run_only_on_limpyd_blueque(driver: Reference, database, conn):
    """A task of a group waits in its group's line, which the reference never reads; the
    reference's own tasks (no group) are taken by both, and first by limpyd-blueque."""
    queue = Queue.named(QUEUE)
    grouped = queue.enqueue(PARAMETERS, group="customer:1")
    assert driver.listen(QUEUE).task is None
    theirs = driver.enqueue(QUEUE, PARAMETERS)
    listener = listener_id_for()
    assert queue.reserve(listener).task_id == theirs
    assert queue.reserve(listener).task_id == grouped.task_id
    assert driver.listen(QUEUE).task is None


def test_a_task_scheduled_with_a_priority_joins_its_priority_when_limpyd_blueque_moves_it(
        driver: Reference, database, conn):
    """Due tasks moved by limpyd-blueque's workers join the line of their priority; the
    reference's own `enqueue_due_tasks` would push them to the shared priority-0 list
    (documented in docs/compatibility.rst)."""
    queue = Queue.named(QUEUE)
    job = queue.enqueue(PARAMETERS, priority=3, eta=time.time() + DUE_IN)
    time.sleep(DUE_IN + 0.05)
    assert queue.enqueue_due() == [job.task_id]
    assert conn.llen(f"blueque_pending_tasks_{QUEUE}") == 0
    assert driver.listen(QUEUE).task is None
    assert queue.reserve(listener_id_for()).task_id == job.task_id


def test_statistics_equal_a_full_scan_after_a_mixed_run(
        driver: Reference, database, conn):
    """Tasks enqueued, run, failed, buried, released, expired and taken back by both
    libraries, a holder lost and a deep clean: the O(1) statistics equal a count of every
    task hash by status."""
    from limpyd_blueque.upkeep.cleaning import deep_clean

    queue = Queue.named(QUEUE)
    ours = [queue.enqueue(PARAMETERS, priority=n % 3, utube=f"k{n % 4}" if n % 2 else None)
            for n in range(20)]
    theirs = [driver.enqueue(QUEUE, PARAMETERS) for _ in range(10)]
    queue.enqueue(PARAMETERS, delay=3600)
    queue.enqueue(PARAMETERS, ttl=0.01)
    for _ in range(3):  # the reference's worker takes Blueque-line tasks and runs them
        task = driver.listen(QUEUE).task
        driver.start(task["id"], PID)
        driver.complete(task["id"], RESULT)
    listener = listener_id_for()
    for n in range(8):
        job = queue.reserve(listener)
        [job.complete, job.fail, job.bury, job.release][n % 4]("x" if n % 4 < 3 else None)
    lost = queue.reserve(listener)  # its holder dies: its lease ends, a light clean takes it
    conn.zadd(f"blueque:leases:{QUEUE}", {lost.task_id: 0})
    Queue.scripts().upkeep.recover([(QUEUE, lost.task_id, None, None)], time.time(),
                                   expired_only=True, max_attempts=None, why="test")
    ours[-1].cancel() if ours[-1].status.hget() == "pending" else None
    queue.kick(1)
    time.sleep(0.02)
    queue.expire_due()
    deep_clean(Queue)
    scanned: dict[str, int] = {}
    for key in conn.scan_iter("blueque_task_*"):
        if conn.hget(key, "queue") == QUEUE:
            status = conn.hget(key, "status")
            scanned[status] = scanned.get(status, 0) + 1
    tasks = queue.statistics()["tasks"]
    held = scanned.pop("reserved", 0) + scanned.pop("started", 0)
    assert tasks["taken"] == held
    assert {status: tasks[status] for status in scanned} == scanned
    assert tasks["total"] == sum(scanned.values()) + held == 32
    assert len(theirs) == 10


def test_a_waiting_task_is_never_taken_by_the_reference(driver: Reference, database, conn,
                                                        monkeypatch):
    """A task enqueued `after` another waits in this library's waiting set, which the
    reference never reads; its parent may be run by the reference, whose finish does not
    tell the waiting task: the repair (a minute later) counts that parent, and the task
    joins the line both libraries read."""
    from limpyd_blueque import Job
    from limpyd_blueque.models import dependencies

    queue = Queue.named(QUEUE)
    parent = queue.enqueue(PARAMETERS)
    child = queue.enqueue(PARAMETERS, after=[parent])
    taken = driver.listen(QUEUE).task["id"]
    assert taken == parent.task_id  # the reference takes the parent, never the child
    assert driver.listen(QUEUE).task is None
    driver.start(taken, 4242)
    driver.complete(taken, RESULT)
    assert child.status.hget() == "waiting"
    monkeypatch.setattr(dependencies, "REPAIR_AFTER", 0.0)
    dependencies.repair(Job.scripts(), QUEUE)
    assert child.status.hget() == "pending"
    assert driver.listen(QUEUE).task["id"] == child.task_id
