"""`Workflow`: tasks on any queues, each waiting for the nodes it is added `after`, written
all at once and followed to its end.

`submit` writes every node as a task of status `waiting` (the workflow id in its
`workflow` field), then makes each node's parents tell it when they finish (see
`dependencies`), then marks the workflow `submitted` and releases the nodes that wait for
nothing: a submission refused half way deletes the nodes it wrote, and one dying half way
leaves nodes that never run, never a part of the graph running. The steps go by
pipelines: one round trip for the nodes, one for their links, one for the release,
whatever the number of nodes (each script call takes at most 1,000).

A node finishing is followed as a task others wait for (its `follow` field); once every
node finished, the workflow is done (`done_at`) and its nodes get their retention: no node
of a workflow that can still run is deleted, nor the results its dependents read.

A running node may grow its own workflow (`Job.workflow`, then `add` and `submit`): the
tasks waiting for that node then also wait for the nodes it added. Their ids are made from
the running node's id and their rank, so that a node run again (its worker died) adds the
same nodes, which exist already: nothing is added twice.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from redis.exceptions import RedisError

from ..connection.errors import reaching
from ..exceptions import ConfigurationError, LimpydBluequeError, WorkflowNotFound
from ..protocol.keys import check_queue_name
from ..protocol.options import DEFAULT_RETENTION, TaskOptions, check_after
from ..protocol.statuses import FINISHED, UNFINISHED, Status
from ..protocol.values import shown
from . import dependencies
from .producing import new_task_id, prepare_tasks
from .task import Task

#: seconds between two reads of a workflow's state while `wait` waits, at most
WAIT_POLL = 0.5
STATES = ("submitting", "submitted", "canceled")
#: the states of a workflow that is done once every node finished
DONE_STATES = ("submitted", "canceled")


@dataclass(frozen=True)
class Node:
    """A node of a workflow, as `Workflow.add` returns it: its task's id and queue (pass
    it in another node's `after`)."""

    task_id: str
    queue: str


@dataclass
class _Pending:
    node: Node
    text: str
    options: TaskOptions


class WorkflowStatus(dict[str, Any]):
    """A workflow's nodes counted per status (every status, 0 included), with `total`
    and `done` (True once no node can still run: every node finished, a node deleted
    counting as none). Read as a mapping, or `status.done`."""

    @property
    def done(self) -> bool:
        return bool(self["done"])


class Workflow:
    """Tasks that wait for one another, on any queues, submitted at once (see the
    module's text): `add` nodes, `submit`, then `Workflow.load(id)` to follow it.

    One class, though long: its submission's steps (open, write, record, link, commit)
    and its reads share the workflow's id, its state and its handle on the models; each
    step is a short method."""

    model: type[Task] = Task

    def __init__(self, name: str | None = None) -> None:
        if name is not None and (not isinstance(name, str) or not 0 < len(name) <= 200):
            raise ConfigurationError(f"a workflow's name is a str of 1 to 200 characters, "
                                     f"not {shown(name)}")
        self.workflow_id = new_task_id()
        self.name = name
        self.created: float | None = None
        self.state: str | None = None
        #: the running node that grows this workflow (see `Job.workflow`), if any, and the
        #: ranks of the nodes it adds (shared by the workflows of one run of that node)
        self.inside: str | None = None
        self.ranks: Iterator[int] = itertools.count(1)
        self._added: list[_Pending] = []
        self._ids: set[str] = set()  # of the nodes added

    def __repr__(self) -> str:
        return f"Workflow({self.workflow_id!r}, name={self.name!r})"

    # -- building --------------------------------------------------------------------------
    def add(self, queue_name: str, parameters: Any = "", *, after: Sequence[Any] = (),
            **options: Any) -> Node:
        """A node: a task of `queue_name` with `parameters`, waiting for the nodes (or
        task ids) in `after`, with the options of `Queue.enqueue` (`priority`, `group`,
        `delay`, `ttl`, `on_parent_failure`, ...), checked now. Its handle, with the
        `task_id` the task will have."""
        queue = check_queue_name(queue_name)
        keys = self.model.keys()
        # grown from a running node: the same ids at each of its runs
        task_id = (new_task_id() if self.inside is None
                   else f"{self.inside}.{next(self.ranks)}")
        common = dict(options)
        if after:
            common["after"] = list(check_after(list(after)) or ())
        ready = prepare_tasks(self.model, keys, queue, [parameters], task_ids=[task_id],
                              common=common)
        (written_id, text, checked), = ready.tasks
        if checked.identifier is not None:
            raise ConfigurationError("a workflow's node takes no identifier: an identifier "
                                     "maps to a task in line")
        for parent in checked.after or ():
            if parent not in self._ids and self.state is None:
                raise ConfigurationError(f"after: {parent!r} is no node of this workflow "
                                         "(add it first)")
        node = Node(written_id, queue)
        self._ids.add(written_id)
        self._added.append(_Pending(node, text, dataclasses.replace(
            checked, after=checked.after or (), workflow=self.workflow_id)))
        return node

    # -- submitting ------------------------------------------------------------------------
    def submit(self) -> str:
        """Write every node added (see the module's text); the workflow's id."""
        if not self._added:
            raise ConfigurationError("a workflow needs at least one node: add() them first")
        scripts = self.model.scripts()
        added, self._added = self._added, []
        ids = [pending.node.task_id for pending in added]
        known = set(ids)
        outside = {parent for pending in added for parent in pending.options.after or ()
                   if parent not in known}
        queues = {pending.node.task_id: pending.node.queue for pending in added}
        queues.update(dependencies.parent_queues(scripts, outside) if outside else {})
        growing = ([] if self.inside is None else
                   dependencies.children_of(scripts, self._queue_of(self.inside), self.inside))
        self._open()
        fresh = self._unwritten(added)
        self._write(fresh)
        self._record(ids)
        try:
            due = self._link(added, growing, queues)
        except (LimpydBluequeError, RedisError):
            self._undo(fresh)
            raise
        for pending in added:  # the nodes that wait for nothing are released now
            due.setdefault(pending.node.queue, []).append((pending.node.task_id, "", ""))
        if not self._commit():  # canceled meanwhile (a node grew it while it was canceled)
            self.cancel()
            return self.workflow_id
        ended = dependencies.release(scripts, due)
        if ended:
            dependencies.follow_up(scripts, ended)
        return self.workflow_id

    def _unwritten(self, added: Sequence[_Pending]) -> list[_Pending]:
        """The nodes of `added` to write: all of them, but those a former run of the node
        growing this workflow wrote already (linked and released again: both idempotent,
        should that run have died half way)."""
        if self.inside is None:
            return list(added)
        keys = self.model.keys()
        client: Any = self.model.client()
        with reaching(client), client.pipeline(transaction=False) as pipe:
            for pending in added:
                pipe.exists(keys.task(pending.node.task_id))
            there = pipe.execute()
        return [pending for pending, found in zip(added, there) if not found]

    def _open(self) -> None:
        """The workflow's hash, when new: `submitting`."""
        if self.state is not None:
            return
        client: Any = self.model.client()
        with reaching(client):
            client.hset(self.model.keys().workflow(self.workflow_id), mapping={
                "name": self.name or "", "created": repr(time.time()), "state": "submitting"})

    def _record(self, ids: Sequence[str]) -> None:
        """The nodes `ids`, written, in the workflow's set of nodes (only once written: a
        node that is no task never holds its workflow back)."""
        client: Any = self.model.client()
        with reaching(client), client.pipeline(transaction=False) as pipe:
            for part in dependencies.chunks_of(ids):
                pipe.sadd(self.model.keys().workflow_nodes(self.workflow_id), *part)
            pipe.execute()

    def _commit(self) -> bool:
        """Mark the workflow `submitted` (its nodes may run), unless it was canceled: then
        False."""
        client: Any = self.model.client()
        key = self.model.keys().workflow(self.workflow_id)
        with reaching(client):
            state = client.hget(key, "state")
            if state == "canceled":
                self.state = state
                return False
            if state != "submitted":
                client.hset(key, mapping={"state": "submitted",
                                          "submitted_at": repr(time.time())})
        self.state = "submitted"
        return True

    def _write(self, nodes: Sequence[_Pending]) -> None:
        """Write `nodes` as waiting tasks, one enqueue step per queue and 1,000 nodes, in
        one round trip; a step refused deletes what the others wrote, and raises."""
        scripts, now = self.model.scripts(), time.time()
        by_queue: dict[str, list[_Pending]] = {}
        for pending in nodes:
            by_queue.setdefault(pending.node.queue, []).append(pending)
        steps = [scripts.plans.enqueue(queue, [(p.node.task_id, p.text, p.options)
                                              for p in batch], now)
                 for queue, found in by_queue.items() for batch in dependencies.chunks_of(found)]
        try:
            scripts.run_all(steps)
        except Exception:
            self._undo(nodes)
            raise

    def _link(self, added: Sequence[_Pending], growing: Sequence[tuple[str, str]],
              queues: dict[str, str]) -> dependencies.Releases:
        """Make the parents of the nodes of `added` tell them when they finish, and the
        tasks waiting for the node growing the workflow (`growing`) also wait for every
        node added: one round trip. The releases due for parents finished already."""
        scripts = self.model.scripts()
        waiting: list[dependencies.Waiting] = [
            (p.node.queue, p.node.task_id, p.options.after or ()) for p in added
            if p.options.after]
        new_ids = [pending.node.task_id for pending in added]
        waiting += [(child_queue, child, new_ids) for child_queue, child in growing]
        depend, pairs = dependencies.depend_plans(scripts.plans, waiting, queues)
        grow = [scripts.plans.add_parents(child_queue, child, part)
                for child_queue, child in growing for part in dependencies.chunks_of(new_ids)]
        replies = scripts.run_all([*grow, *depend])
        return dependencies.finished_parents(pairs, replies[len(grow):])

    def _undo(self, added: Sequence[_Pending]) -> None:
        """Delete what a submission that failed half way wrote (best effort: its nodes wait
        for a submission that never comes, and never run)."""
        keys = self.model.keys()
        client: Any = self.model.client()
        with client.pipeline(transaction=False) as pipe:
            for pending in added:
                node = pending.node
                pipe.zrem(keys.waiting(node.queue), node.task_id)
                pipe.delete(keys.after(node.queue, node.task_id))
                pipe.srem(keys.workflow_nodes(self.workflow_id), node.task_id)
            pipe.execute(raise_on_error=False)
        with client.pipeline(transaction=False) as pipe:  # only the nodes written here
            for pending in added:
                pipe.hget(keys.task(pending.node.task_id), "workflow")
            owners = pipe.execute(raise_on_error=False)
        mine = [pending.node.task_id for pending, owner in zip(added, owners)
                if owner == self.workflow_id]
        if mine:
            client.delete(*[keys.task(task_id) for task_id in mine])
        if self.state is None:
            client.delete(keys.workflow(self.workflow_id))

    def _queue_of(self, task_id: str) -> str:
        found = self.model.client().hget(self.model.keys().task(task_id), "queue")
        if not isinstance(found, str):
            raise ConfigurationError(f"there is no task {task_id!r} to grow the workflow from")
        return found

    # -- following -------------------------------------------------------------------------
    @classmethod
    def load(cls, workflow_id: str) -> Workflow:
        """The workflow submitted as `workflow_id`; `WorkflowNotFound` when there is none
        (or it expired with its nodes)."""
        if not isinstance(workflow_id, str) or not workflow_id:
            raise WorkflowNotFound(workflow_id)
        client: Any = cls.model.client()
        with reaching(client):
            found = client.hgetall(cls.model.keys().workflow(workflow_id))
        if not isinstance(found, Mapping) or found.get("state") not in STATES:
            raise WorkflowNotFound(workflow_id)
        workflow = cls.__new__(cls)
        workflow.workflow_id = workflow_id
        workflow.name = found.get("name") or None
        try:
            workflow.created = float(found.get("created") or "")
        except ValueError:
            workflow.created = None
        workflow.state = found["state"]
        workflow.inside = None
        workflow.ranks = itertools.count(1)
        workflow._added = []
        workflow._ids = set()
        return workflow

    def node_ids(self) -> list[str]:
        """The task ids of every node submitted (sorted)."""
        client: Any = self.model.client()
        with reaching(client):
            return sorted(client.smembers(self.model.keys().workflow_nodes(self.workflow_id)))

    def _fields(self, *names: str) -> dict[str, list[Any]]:
        ids = self.node_ids()
        client: Any = self.model.client()
        keys = self.model.keys()
        with reaching(client), client.pipeline(transaction=False) as pipe:
            for task_id in ids:
                pipe.hmget(keys.task(task_id), *names)
            replies = pipe.execute(raise_on_error=False)
        return {task_id: reply if isinstance(reply, list) else [None] * len(names)
                for task_id, reply in zip(ids, replies)}

    def nodes(self) -> dict[str, dict[str, str]]:
        """Each node's task hash as Redis holds it (`{task_id: fields}`, sorted by id; a
        node whose hash is gone or of another type maps to {}). The tasks each node waited
        for are in its `parents` field (a JSON array of ids, see `dependencies.parents_of`):
        the edges of the workflow's graph."""
        ids = self.node_ids()
        client: Any = self.model.client()
        keys = self.model.keys()
        with reaching(client), client.pipeline(transaction=False) as pipe:
            for task_id in ids:
                pipe.hgetall(keys.task(task_id))
            replies = pipe.execute(raise_on_error=False)
        return {task_id: reply if isinstance(reply, dict) else {}
                for task_id, reply in zip(ids, replies)}

    def status(self) -> WorkflowStatus:
        """Its nodes counted per status, with `total` and `done` (see `WorkflowStatus`)."""
        counts = Counter(fields[0] for fields in self._fields("status").values()
                         if isinstance(fields[0], str))  # (a node deleted is none)
        status = WorkflowStatus({state.value: counts.get(state.value, 0) for state in Status})
        status["total"] = sum(counts.values())
        finished = sum(counts.get(state.value, 0) for state in FINISHED)
        client: Any = self.model.client()
        with reaching(client):
            self.state = client.hget(self.model.keys().workflow(self.workflow_id), "state")
        status["done"] = self.state in DONE_STATES and finished == status["total"]
        return status

    def results(self) -> dict[str, str]:
        """`{task_id: result}` of its completed nodes (the text each stores)."""
        return {task_id: fields[1] or "" for task_id, fields in
                self._fields("status", "result").items()
                if fields[0] == Status.COMPLETE.value}

    def cancel(self) -> int:
        """Cancel every node that can still run: waiting, pending and scheduled ones at
        once, running ones asked to stop (as `Job.cancel`). The workflow is marked
        `canceled` first: a running node that grows it from then on cancels the nodes it
        adds. How many nodes were canceled or asked."""
        client: Any = self.model.client()
        with reaching(client):
            client.hset(self.model.keys().workflow(self.workflow_id), "state", "canceled")
        self.state = "canceled"
        total, asked = 0, set[str]()
        while True:  # again while a node added meanwhile is found
            count, newly = self._cancel_unfinished(asked)
            total += count
            if not newly:
                return total
            asked |= newly

    def _cancel_unfinished(self, asked: set[str]) -> tuple[int, set[str]]:
        """Cancel the nodes that can still run, but those in `asked` (asked to stop
        already): how many were canceled or asked, and their ids."""
        scripts = self.model.scripts()
        unfinished = {state.value for state in UNFINISHED}
        plans = []
        for task_id, (status, queue) in self._fields("status", "queue").items():
            if status in unfinished and isinstance(queue, str) and task_id not in asked:
                plans.append((queue, task_id, scripts.plans.cancel(
                    queue, task_id, time.time(), DEFAULT_RETENTION)))
        # all in one round trip: no waiting node is released by a parent canceled first
        outcomes = scripts.run_all([plan for _, _, plan in plans])
        followed = [queue for (queue, _, _), outcome in zip(plans, outcomes)
                    if outcome.followed]
        if followed:
            dependencies.follow_up(scripts, followed)
        done = {task_id for (_, task_id, _), outcome in zip(plans, outcomes)
                if outcome.done or outcome.status == "requested"}
        return len(done), done

    def wait(self, timeout: float | None = None) -> dict[str, str]:
        """Block until the workflow is done; its `results()` then. `TimeoutError` after
        `timeout` seconds (None: no limit)."""
        if timeout is not None and (not isinstance(timeout, (int, float))
                                    or isinstance(timeout, bool) or timeout < 0):
            raise ConfigurationError(f"timeout must be a number of seconds at least 0, not "
                                     f"{shown(timeout)}")
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = 0.05
        while not self.status().done:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise TimeoutError(f"workflow {self.workflow_id} not done after {timeout} s")
            time.sleep(pause if left is None else min(pause, left))
            pause = min(pause * 2, WAIT_POLL)
        return self.results()
