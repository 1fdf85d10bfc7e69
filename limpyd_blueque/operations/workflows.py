"""What an operator sees of a workflow (`blueque workflow`, the dashboard's workflow page)
and of the tasks one task waits for, or that wait for it (the task page), as data.

A workflow's graph is what its nodes' `parents` fields say (see `models.workflow`): a
node's parents that are nodes of the same workflow are its edges, and its children are
the nodes that name it there. Those fields are read from Redis and not trusted: a field
that is no JSON array of ids reads as no parent, and a graph whose fields make a circle
is still laid out (`layers`), each node once.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ..exceptions import InvalidName
from ..models import Job
from ..models.dependencies import FINISHED_VALUES, children_of, parents_of
from ..models.workflow import Workflow
from ..protocol.keys import QUEUE_NAME_RE
from ..protocol.statuses import Status
from ..protocol.values import check_task_id, shown
from .overview import Result, pipelined, progress_of, text

#: the statuses' values, in the order of a task's life
STATUSES = tuple(status.value for status in Status)
#: the most tasks a task page lists of those it waits for, and of those waiting for it
MAX_LINKED = 200


@dataclass(frozen=True)
class WorkflowNode(Result):
    """One node: its task's id, queue, status and progress (as `Progress.as_dict` gives
    it), the ids its `parents` field names (nodes of the workflow or not), and the nodes
    of the workflow that wait for it (`children`)."""

    id: str
    queue: str | None
    status: str | None
    progress: dict[str, Any] | None
    parents: list[str]
    children: list[str]


@dataclass(frozen=True)
class WorkflowView(Result):
    """A workflow as read at once: its name, state, when it was created, its nodes
    counted per status (every status, and `total`), `done` once every node finished, and
    its nodes (sorted by id)."""

    TIMES: ClassVar[tuple[str, ...]] = ("created",)

    id: str
    name: str | None
    state: str | None
    created: float | None
    done: bool
    counts: dict[str, int]
    nodes: list[WorkflowNode]

    def edges(self) -> dict[str, list[str]]:
        """Each node's parents that are nodes of this workflow, each once (itself left
        out): the edges drawn to it."""
        known = {node.id for node in self.nodes}
        return {node.id: [parent for parent in dict.fromkeys(node.parents)
                          if parent in known and parent != node.id] for node in self.nodes}

    def roots(self) -> list[WorkflowNode]:
        """The nodes that wait for no node of the workflow (sorted by id)."""
        edges = self.edges()
        return [node for node in self.nodes if not edges[node.id]]

    def layers(self) -> dict[str, int]:
        """Each node's layer: the longest path to it from a root (0 for a root). A node
        on a circle of parents (only bad data makes one) is placed when no other can be,
        after the parents placed already: every node gets one layer."""
        parents = self.edges()
        children: dict[str, list[str]] = {task_id: [] for task_id in parents}
        for child, found in parents.items():
            for parent in found:
                children[parent].append(child)
        left = {task_id: len(found) for task_id, found in parents.items()}
        ready = deque(task_id for task_id, count in left.items() if not count)
        unplaced = iter(parents)  # in id order, for the circles
        placed: dict[str, int] = {}
        while len(placed) < len(parents):
            if not ready:  # a circle: the first node not placed is placed anyway
                ready.append(next(task_id for task_id in unplaced if task_id not in placed))
            task_id = ready.popleft()
            if task_id in placed:
                continue
            placed[task_id] = max((placed[parent] + 1 for parent in parents[task_id]
                                   if parent in placed), default=0)
            for child in children[task_id]:
                left[child] -= 1
                if not left[child] and child not in placed:
                    ready.append(child)
        return placed


@dataclass(frozen=True)
class LinkedTask(Result):
    """A task another waits for, or that waits for another: its id, queue and status
    (None when it is gone, or they are not what they should be)."""

    id: str
    queue: str | None
    status: str | None


@dataclass(frozen=True)
class TaskLinks(Result):
    """What a task waits for (the ids its `parents` field names), what waits (or waited)
    for it, each at most `MAX_LINKED` (`more_parents`, `more_children`: how many more),
    and its workflow's id (`workflow`: None without one; `workflow_valid`: False when
    the field holds no id)."""

    parents: list[LinkedTask]
    children: list[LinkedTask]
    more_parents: int
    more_children: int
    workflow: str | None
    workflow_valid: bool


#: the `Workflow` class of each job model besides `Job` (see `workflow_class`)
_WORKFLOW_CLASSES: dict[type[Job], type[Workflow]] = {}


def workflow_class(job_model: type[Job]) -> type[Workflow]:
    """`Workflow` reading through `job_model`'s database (the dashboard's models)."""
    if job_model is Job:
        return Workflow
    if job_model not in _WORKFLOW_CLASSES:
        _WORKFLOW_CLASSES[job_model] = type(f"{job_model.__name__}Workflow", (Workflow,),
                                            {"model": job_model})
    return _WORKFLOW_CLASSES[job_model]


def read_workflow(workflow_id: str, job_model: type[Job] = Job) -> WorkflowView:
    """The workflow `workflow_id` with every node (three round trips: its hash, its node
    set, then every node's hash in one pipeline); `WorkflowNotFound` when there is none."""
    workflow = workflow_class(job_model).load(workflow_id)
    hashes = workflow.nodes()
    parents = {task_id: parents_of(fields) for task_id, fields in hashes.items()}
    children: dict[str, list[str]] = {task_id: [] for task_id in hashes}
    for task_id, found in parents.items():
        for parent in dict.fromkeys(found):
            if parent in children and parent != task_id:
                children[parent].append(task_id)
    nodes = [node_of(task_id, fields, parents[task_id], children[task_id])
             for task_id, fields in hashes.items()]
    counts = status_counts(nodes)
    finished = sum(counts[value] for value in FINISHED_VALUES)
    return WorkflowView(id=workflow_id, name=workflow.name, state=workflow.state,
                        created=workflow.created, done=workflow.state == "submitted"
                        and finished == counts["total"], counts=counts, nodes=nodes)


def node_of(task_id: str, fields: Mapping[str, str], parents: list[str],
            children: list[str]) -> WorkflowNode:
    """A node from its task hash (a field that is not what it should be reads as None)."""
    queue = text(fields.get("queue"))
    status = text(fields.get("status"))
    return WorkflowNode(id=task_id, queue=queue if queue and QUEUE_NAME_RE.match(queue)
                        else None, status=status if status in STATUSES else None,
                        progress=progress_of(fields.get("progress")), parents=parents,
                        children=children)


def status_counts(nodes: Sequence[WorkflowNode]) -> dict[str, int]:
    """How many nodes have each status (every status, 0 included), and `total` (a node
    of no known status counts in `total` only)."""
    counts = dict.fromkeys(STATUSES, 0)
    for node in nodes:
        if node.status is not None:
            counts[node.status] += 1
    counts["total"] = len(nodes)
    return counts


def task_links(task_id: str, fields: Mapping[str, str],
               job_model: type[Job] = Job) -> TaskLinks:
    """The tasks `task_id` waits for, those waiting for it and its workflow, from its hash
    `fields` (two round trips: its children set, when its queue is a queue name, then the
    status and queue of each task listed)."""
    queue = fields.get("queue") or ""
    parents = list(dict.fromkeys(parents_of(fields)))
    children = [child for _, child in children_of(job_model.scripts(), queue, task_id)
                ] if QUEUE_NAME_RE.match(queue) else []
    listed = parents[:MAX_LINKED]
    linked = linked_tasks([*listed, *children[:MAX_LINKED]], job_model)
    workflow = fields.get("workflow") or None
    return TaskLinks(parents=linked[:len(listed)], children=linked[len(listed):],
                     more_parents=max(len(parents) - MAX_LINKED, 0),
                     more_children=max(len(children) - MAX_LINKED, 0), workflow=workflow,
                     workflow_valid=workflow is not None and is_task_id(workflow))


def linked_tasks(ids: Sequence[str], job_model: type[Job] = Job) -> list[LinkedTask]:
    """The queue and status of each task of `ids`, in one round trip."""
    keys = job_model.keys()
    replies = pipelined(job_model.client(), lambda pipe: [
        pipe.hmget(keys.task(task_id), "queue", "status") for task_id in ids])
    linked = []
    for task_id, reply in zip(ids, replies):
        queue, status = reply if isinstance(reply, list) else (None, None)
        linked.append(LinkedTask(task_id, queue if isinstance(queue, str)
                                 and QUEUE_NAME_RE.match(queue) else None,
                                 status if status in STATUSES else None))
    return linked


def is_task_id(value: str) -> bool:
    """True when `value` follows the task id rule (a workflow's id follows it too)."""
    try:
        check_task_id(value)
    except InvalidName:
        return False
    return True


def check_workflow_id(value: str) -> str:
    """`value` if it may be a workflow's id (the task id rule), else `InvalidName`."""
    if is_task_id(value):
        return value
    raise InvalidName(f"invalid workflow id {shown(value)}: use 1 to 200 printable "
                      "characters, without whitespace")
