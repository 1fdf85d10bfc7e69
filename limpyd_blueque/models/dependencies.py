"""Tasks that wait for other tasks (`Queue.enqueue(after=[...])`, the nodes of a
`Workflow`): who tells a waiting task that a task it waits for finished.

A waiting task has status `waiting`, an entry in its queue's waiting set and an `after`
set of the ids it still waits for (lua/enqueue_options.lua). Each task it waits for (a
parent) lists it in its children set and has a `follow` field naming its own queue's
ended list (`register`, through lua/depend.lua). When a parent finishes, however it
finishes, the step that files it pushes its id on that list (`retain` in
lua/_finished.lua); `follow_up` then tells each child (lua/release.lua, one call per
child queue), which is released once it waits for nothing more, or ended by its
`on_parent_failure`. A child ended so is followed in turn (a cascade).

Each step is idempotent and the ended list is kept until its entries were followed, so a
process dying between a parent's end and its follow-up loses nothing: the holder of the
finished task follows up at once, and every worker follows up its queues' ended lists
about twice a second (`worker/scheduling.py`). A child written, then registered with its
parents in another step (in the cluster key mode a parent may be in another slot), is
repaired by `repair` if its producer died in between.

A workflow's nodes are followed too: when every node of a submitted workflow finished, the
workflow is done (`done_at`), and its nodes get their retention then (until then none of
them is deleted: see `Workflow`)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

from redis.exceptions import RedisError

from ..connection.errors import reaching
from ..exceptions import ConfigurationError, LimpydBluequeError
from ..protocol.keys import QUEUE_NAME_RE
from ..protocol.options import DEFAULT_RETENTION, Retention, resolve_ttl
from ..protocol.scripts import Plan, Planner, Scripts
from ..protocol.statuses import FINISHED, Status

logger = logging.getLogger(__name__)

#: the finished statuses' values
FINISHED_VALUES = frozenset(status.value for status in FINISHED)
#: most ended tasks one follow-up round reads, and most items one script call takes
FOLLOW_CHUNK = 100
STEP_CHUNK = 1000
#: a waiting task is checked by `repair` once it waited this long (seconds), and most
#: waiting tasks one call checks
REPAIR_AFTER = 60.0
REPAIR_CHUNK = 1000

#: (waiting task's queue, its id, the ids of the tasks it waits for)
Waiting = tuple[str, str, Sequence[str]]
#: per queue of waiting tasks: (task id, parent id or '', the parent's status)
Releases = dict[str, list[tuple[str, str, str]]]
T = TypeVar("T")


def chunks_of(items: Sequence[T], size: int = STEP_CHUNK) -> list[Sequence[T]]:
    """`items` in parts of at most `size`."""
    return [items[start:start + size] for start in range(0, len(items), size)]


# -- registering -------------------------------------------------------------------------------
def parent_queues(scripts: Scripts, ids: Iterable[str]) -> dict[str, str]:
    """The queue of each task in `ids`; `ConfigurationError` naming the first that is no
    task (nothing was written yet: this is read before a waiting task is)."""
    wanted = list(dict.fromkeys(ids))
    client: Any = scripts.client  # (decoding: replies are str)
    keys = scripts.keys
    with reaching(client), client.pipeline(transaction=False) as pipe:
        for task_id in wanted:
            pipe.hget(keys.task(task_id), "queue")
        replies = pipe.execute(raise_on_error=False)
    return queues_read(wanted, replies)


def queues_read(ids: Sequence[str], replies: Sequence[Any]) -> dict[str, str]:
    """The queue of each task of `ids` from the `HGET queue` replies read for them."""
    queues = {}
    for task_id, reply in zip(ids, replies):
        if not isinstance(reply, str) or not QUEUE_NAME_RE.match(reply):
            raise ConfigurationError(f"after: there is no task {task_id!r} to wait for")
        queues[task_id] = reply
    return queues


def depend_plans(plans: Planner, waiting: Sequence[Waiting], queues: Mapping[str, str],
                 ) -> tuple[list[Plan[list[str]]], list[Sequence[tuple[str, str, str]]]]:
    """The depend steps making the parents of `waiting` tasks tell them (one per parent
    queue and `STEP_CHUNK` pairs), with the pairs `(parent, child queue, child)` of each."""
    by_queue: dict[str, list[tuple[str, str, str]]] = {}
    for child_queue, child, parents in waiting:
        for parent in parents:
            by_queue.setdefault(queues[parent], []).append((parent, child_queue, child))
    steps, pairs = [], []
    for queue, found in by_queue.items():
        for part in chunks_of(found):
            steps.append(plans.depend(queue, part))
            pairs.append(part)
    return steps, pairs


def finished_parents(pairs: Sequence[Sequence[tuple[str, str, str]]],
                     replies: Sequence[Sequence[str]]) -> Releases:
    """The releases due for the parents the depend steps found finished already."""
    due: Releases = {}
    for part, statuses in zip(pairs, replies):
        for (parent, child_queue, child), status in zip(part, statuses):
            if status:
                due.setdefault(child_queue, []).append((child, parent, status))
    return due


def release_plans(plans: Planner, due: Releases, now: float,
                  retention: Retention = DEFAULT_RETENTION,
                  ) -> tuple[list[Plan[tuple[int, int]]], list[str]]:
    """The release steps of `due` (one per queue and `STEP_CHUNK` items), with the queue
    of each."""
    parts = [(queue, part) for queue, items in due.items() for part in chunks_of(items)]
    return ([plans.release(queue, part, now, retention) for queue, part in parts],
            [queue for queue, _ in parts])


def ended_in(queues: Sequence[str], released: Sequence[tuple[int, int]]) -> list[str]:
    """The queues where release steps ended tasks (their followers are to be told)."""
    return list(dict.fromkeys(queue for queue, (_, ended) in zip(queues, released) if ended))


def release(scripts: Scripts, due: Releases,
            retention: Retention = DEFAULT_RETENTION) -> list[str]:
    """Run the release steps of `due`; the queues where tasks ended (see `ended_in`)."""
    steps, queues = release_plans(scripts.plans, due, time.time(), retention)
    return ended_in(queues, scripts.run_all(steps))


def register(scripts: Scripts, waiting: Sequence[Waiting], queues: Mapping[str, str],
             retention: Retention = DEFAULT_RETENTION) -> None:
    """Make the parents of `waiting` tasks (written already) tell them when they finish;
    those found finished already are told now. `queues`: the queue of each parent."""
    steps, pairs = depend_plans(scripts.plans, waiting, queues)
    due = finished_parents(pairs, scripts.run_all(steps))
    if due:
        ended = release(scripts, due, retention)
        if ended:
            follow_up(scripts, ended, retention)


# -- following up ended tasks ------------------------------------------------------------------
def follow_up(scripts: Scripts, queues: Iterable[str],
              retention: Retention = DEFAULT_RETENTION) -> int:
    """Tell the followers of the tasks listed in the ended lists of `queues` (see the
    module's text), and of the tasks that ends in turn; the number of ended tasks
    followed. A queue whose ended list holds another type is skipped (logged)."""
    todo = list(dict.fromkeys(queues))
    followed = 0
    while todo:
        queue = todo.pop(0)
        count, more = _follow_queue(scripts, queue, retention)
        followed += count
        for other in more:
            if other not in todo:
                todo.append(other)
    return followed


def _follow_queue(scripts: Scripts, queue: str, retention: Retention,
                  ) -> tuple[int, list[str]]:
    """Follow up to `FOLLOW_CHUNK` ended tasks of `queue` (the oldest first); how many, and
    the queues to follow next (those where a child ended, this one if more are listed).
    Each entry is taken off the list once followed, even when a step on a child's queue
    or its workflow was refused (logged): `repair` finds such a child later, and one bad
    key never holds up the others. (One function: read, tell, count, take off are one
    round of one list, each refusal logged where it happens.)"""
    client: Any = scripts.client  # (decoding: replies are str)
    keys = scripts.keys
    ended = keys.ended(queue)
    try:
        with reaching(client):
            entries = client.lrange(ended, -FOLLOW_CHUNK, -1)
            due, workflows, gone = _followers(scripts, queue, entries) if entries else (
                {}, {}, [])
    except (LimpydBluequeError, RedisError) as error:
        logger.error("[%s] the tasks waiting for its finished tasks were not told: %s",
                     queue, error)
        return 0, []
    if not entries:
        return 0, []
    next_queues = []
    for child_queue, items in due.items():
        try:
            next_queues += release(scripts, {child_queue: items}, retention)
        except (LimpydBluequeError, RedisError) as error:
            logger.error("[%s] tasks waiting for tasks of %s not told (checked again "
                         "later): %s", child_queue, queue, error)
    for workflow, nodes in workflows.items():
        try:
            node_finished(scripts, workflow, nodes, retention)
        except (LimpydBluequeError, RedisError) as error:
            logger.error("[%s] workflow %s not told of its finished nodes: %s", queue,
                         workflow, error)
    with reaching(client), client.pipeline(transaction=False) as pipe:
        for task_id in gone:  # deleted before they finished: their children told now
            pipe.delete(keys.children(queue, task_id))
        for entry in entries:
            pipe.lrem(ended, -1, entry)
        pipe.execute(raise_on_error=False)
    if len(entries) == FOLLOW_CHUNK and queue not in next_queues:
        next_queues.append(queue)
    return len(entries), list(dict.fromkeys(next_queues))


def _followers(scripts: Scripts, queue: str, entries: Sequence[str],
               ) -> tuple[Releases, dict[str, list[str]], list[str]]:
    """The releases due for the children of the ended tasks of `queue` (`entries`: `<id>`,
    or `<id> <workflow>` for a node deleted before it finished), the nodes among them of
    each workflow, and the ids of the tasks gone (deleted before they finished: counted
    as canceled)."""
    client: Any = scripts.client
    keys = scripts.keys
    ids = [entry.partition(" ")[0] for entry in entries]
    with client.pipeline(transaction=False) as pipe:
        for task_id in ids:
            pipe.hmget(keys.task(task_id), "status", "workflow")
            pipe.smembers(keys.children(queue, task_id))
        replies = pipe.execute(raise_on_error=False)
    due: Releases = {}
    workflows: dict[str, list[str]] = {}
    gone = []
    for index, (entry, task_id) in enumerate(zip(entries, ids)):
        fields, children = replies[2 * index], replies[2 * index + 1]
        status, workflow = fields if isinstance(fields, list) else (None, None)
        if status is None:  # no hash (or not a hash)
            status, workflow = "gone", entry.partition(" ")[2]
            gone.append(task_id)
        elif status not in FINISHED_VALUES:
            continue  # put back in line since it ended: its next end is followed
        if isinstance(workflow, str) and workflow:
            workflows.setdefault(workflow, []).append(task_id)
        for member in children if isinstance(children, set) else ():
            child_queue, _, child = member.partition(" ")
            if QUEUE_NAME_RE.match(child_queue) and child:
                due.setdefault(child_queue, []).append((child, task_id, status))
    return due, workflows, gone


def node_finished(scripts: Scripts, workflow: str, nodes: Sequence[str],
                  retention: Retention = DEFAULT_RETENTION) -> bool:
    """Count `nodes` of `workflow` as finished; when that makes the workflow done (every
    node of a submitted workflow finished), mark it `done_at` and give its nodes their
    retention. True when this call made it done."""
    client: Any = scripts.client  # (decoding: replies are str)
    keys = scripts.keys
    with reaching(client):
        with client.pipeline(transaction=False) as pipe:
            pipe.sadd(keys.workflow_finished(workflow), *nodes)
            pipe.scard(keys.workflow_finished(workflow))
            pipe.scard(keys.workflow_nodes(workflow))
            pipe.hget(keys.workflow(workflow), "state")
            _, finished, total, state = pipe.execute(raise_on_error=False)
        if (state not in ("submitted", "canceled") or not isinstance(finished, int)
                or not isinstance(total, int) or finished < total):
            return False
        if client.hexists(keys.workflow(workflow), "done_at"):
            return False  # another follower made it done
    # its nodes' retention first, then `done_at`: a follower dying in between leaves the
    # next one to file them again (the same entries)
    retain_nodes(scripts, workflow, retention)
    with reaching(client):
        return bool(client.hsetnx(keys.workflow(workflow), "done_at", repr(time.time())))


def reopen(scripts: Scripts, task_id: str) -> None:
    """A finished task put back in line by hand: if it is a node of a workflow, that
    workflow is not done any more (nor kept only until its retention) until it finishes
    again."""
    client: Any = scripts.client
    keys = scripts.keys
    with reaching(client):
        workflow = client.hget(keys.task(task_id), "workflow")
        if not isinstance(workflow, str) or not workflow:
            return
        with client.pipeline(transaction=False) as pipe:
            pipe.srem(keys.workflow_finished(workflow), task_id)
            pipe.hdel(keys.workflow(workflow), "done_at")
            for key in (keys.workflow(workflow), keys.workflow_nodes(workflow),
                        keys.workflow_finished(workflow)):
                pipe.persist(key)
            pipe.execute(raise_on_error=False)


def retain_nodes(scripts: Scripts, workflow: str,
                 retention: Retention = DEFAULT_RETENTION) -> None:
    """File the finished nodes of a done workflow in their queues' retention sets (as the
    finishing steps file a task of no workflow), and make the workflow's own keys expire
    with the last of them (none when a node is kept forever)."""
    client: Any = scripts.client  # (decoding: replies are str)
    keys = scripts.keys
    with reaching(client):
        ttls = _node_ttls(scripts, sorted(client.smembers(keys.workflow_nodes(workflow))),
                          retention)
        now = time.time()
        with client.pipeline(transaction=False) as pipe:
            for task_id, (queue, ttl) in ttls.items():
                if ttl >= 0:
                    pipe.zadd(keys.retention(queue), {task_id: now + ttl})
            if all(ttl >= 0 for _, ttl in ttls.values()):
                last = max((ttl for _, ttl in ttls.values()), default=0.0)
                for key in (keys.workflow(workflow), keys.workflow_nodes(workflow),
                            keys.workflow_finished(workflow)):
                    pipe.expire(key, max(int(last) + 1, 1))
            pipe.execute(raise_on_error=False)


def _node_ttls(scripts: Scripts, ids: Sequence[str],
               retention: Retention) -> dict[str, tuple[str, float]]:
    """The queue and retention of each finished task of `ids` (-1: kept forever): its own
    ttl of its status, else its queue's, else `retention`'s (as the finishing steps)."""
    client: Any = scripts.client
    keys = scripts.keys
    with client.pipeline(transaction=False) as pipe:
        for task_id in ids:
            pipe.hmget(keys.task(task_id), "status", "queue", "result_ttl", "failure_ttl")
        fields = pipe.execute(raise_on_error=False)
    finished = {task_id: reply for task_id, reply in zip(ids, fields)
                if isinstance(reply, list) and reply[0] in FINISHED_VALUES
                and reply[1] and QUEUE_NAME_RE.match(reply[1])}
    queues = sorted({reply[1] for reply in finished.values()})
    with client.pipeline(transaction=False) as pipe:
        for queue in queues:
            pipe.hmget(keys.queue_settings(queue), "result_ttl", "failure_ttl")
        settings = {queue: found if isinstance(found, list) else [None, None]
                    for queue, found in zip(queues, pipe.execute(raise_on_error=False))}
    ttls = {}
    for task_id, (status, queue, result_ttl, failure_ttl) in finished.items():
        complete = status == Status.COMPLETE.value
        ttls[task_id] = (queue, resolve_ttl(
            result_ttl if complete else failure_ttl, settings[queue][0 if complete else 1],
            retention.result_ttl if complete else retention.failure_ttl))
    return ttls


# -- repairing ---------------------------------------------------------------------------------
def repair(scripts: Scripts, queue: str, cursor: int = 0, count: int = REPAIR_CHUNK,
           retention: Retention = DEFAULT_RETENTION) -> int:
    """Check `count` tasks of `queue` waiting for longer than `REPAIR_AFTER`, from
    position `cursor` of its waiting set: a parent that finished without telling it (its
    producer died between writing it and registering it with its parents, or a Blueque
    1.0.1 client finished the parent) is counted now, and a task that waits for nothing
    more is released (a node of a workflow only once its workflow was submitted). The
    next cursor (0: start over)."""
    client: Any = scripts.client  # (decoding: replies are str)
    try:
        with reaching(client):
            entries = client.zrange(scripts.keys.waiting(queue), cursor, cursor + count - 1,
                                    withscores=True)
            old = [task_id for task_id, score in entries
                   if score <= time.time() - REPAIR_AFTER]
            items = _stale(scripts, queue, old) if old else []
        if items and release(scripts, {queue: items}, retention):
            follow_up(scripts, [queue], retention)
    except (LimpydBluequeError, RedisError) as error:
        logger.error("[%s] waiting tasks not checked: %s", queue, error)
        return 0
    return 0 if len(entries) < count else cursor + count


def _stale(scripts: Scripts, queue: str, ids: Sequence[str]) -> list[tuple[str, str, str]]:
    """The release items of the waiting tasks `ids` of `queue`: each finished parent of
    theirs, and the task itself (released if it waits for nothing more), but for the
    nodes of a workflow not submitted (yet, or ever: its producer died)."""
    client: Any = scripts.client
    keys = scripts.keys
    with client.pipeline(transaction=False) as pipe:
        for task_id in ids:
            pipe.smembers(keys.after(queue, task_id))
            pipe.hget(keys.task(task_id), "workflow")
        replies = pipe.execute(raise_on_error=False)
    parents, workflows = replies[::2], replies[1::2]
    wanted = sorted({parent for found in parents if isinstance(found, set) for parent in found})
    named = sorted({workflow for workflow in workflows if isinstance(workflow, str)})
    with client.pipeline(transaction=False) as pipe:
        for parent in wanted:
            pipe.hget(keys.task(parent), "status")
        for workflow in named:
            pipe.hget(keys.workflow(workflow), "state")
        found_states = pipe.execute(raise_on_error=False)
    statuses = dict(zip(wanted, found_states))
    submitted = {workflow for workflow, state in zip(named, found_states[len(wanted):])
                 if state == "submitted"}
    items = []
    for task_id, found, workflow in zip(ids, parents, workflows):
        if isinstance(workflow, str) and workflow not in submitted:
            continue
        items.append((task_id, "", ""))
        for parent in found if isinstance(found, set) else ():
            status = statuses.get(parent)
            if not isinstance(status, str):
                items.append((task_id, parent, "gone"))
            elif status in FINISHED_VALUES:
                items.append((task_id, parent, status))
    return items


# -- reading -----------------------------------------------------------------------------------
def parents_of(fields: Mapping[str, str]) -> list[str]:
    """The ids of the tasks a task waited for, from its `parents` field ([] when none or
    unreadable)."""
    try:
        parents = json.loads(fields.get("parents") or "[]")
    except ValueError:
        return []
    return [parent for parent in parents if isinstance(parent, str)] if isinstance(
        parents, list) else []


def results_of(scripts: Scripts, ids: Sequence[str]) -> dict[str, str]:
    """`{task_id: result}` of the tasks of `ids` that completed (the text they store)."""
    client: Any = scripts.client  # (decoding: replies are str)
    keys = scripts.keys
    with reaching(client), client.pipeline(transaction=False) as pipe:
        for task_id in ids:
            pipe.hmget(keys.task(task_id), "status", "result")
        replies = pipe.execute(raise_on_error=False)
    return {task_id: reply[1] or "" for task_id, reply in zip(ids, replies)
            if isinstance(reply, list) and reply[0] == Status.COMPLETE.value}


def children_of(scripts: Scripts, queue: str, task_id: str) -> list[tuple[str, str]]:
    """`(queue, task id)` of each task waiting for a task (or that waited for it)."""
    client: Any = scripts.client  # (decoding: replies are str)
    keys = scripts.keys
    with reaching(client):
        try:
            members = client.smembers(keys.children(queue, task_id))
        except RedisError:
            return []
    found = []
    for member in sorted(members):
        child_queue, _, child = member.partition(" ")
        if QUEUE_NAME_RE.match(child_queue) and child:
            found.append((child_queue, child))
    return found
