"""`blueque workflow ID`: a workflow's nodes as a tree, each under the nodes it waits for,
with its queue, status and progress, below a header with the workflow's name, state and
counts; `--json` prints `WorkflowView.as_dict()` (docs/admin.rst).

The tree is printed as plain lines, not drawn by `rich`: rich cuts the lines of a deep
tree at the console's width, and a workflow may be a chain of thousands of nodes. Past
`MAX_INDENT` levels the lines stop moving right and say their depth instead.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterator
from typing import Any

from ..models import Job
from ..operations.overview import when
from ..operations.workflows import (
    WorkflowNode,
    WorkflowView,
    check_workflow_id,
    read_workflow,
)
from ..protocol.liveness import server_time
from ..protocol.statuses import RUNNING
from ..protocol.values import printable
from .tables import progress_text

Handler = Callable[[argparse.Namespace], int]
#: the deepest level the tree indents; deeper nodes say their depth
MAX_INDENT = 40
#: the running statuses' values (a progress's time left is shown for them only)
RUNNING_VALUES = frozenset(status.value for status in RUNNING)


def add_parsers(commands: Any, checked: Callable[[Callable[[str], str]], Any]) -> None:
    """Add `workflow` to `commands` (argparse subparsers)."""
    workflow = commands.add_parser(
        "workflow", help="one workflow's nodes as a tree, each under the nodes it waits "
        "for, with its queue, status and progress")
    workflow.add_argument("workflow_id", type=checked(check_workflow_id), metavar="ID",
                          help="the id Workflow.submit returned")
    workflow.add_argument("--json", action="store_true",
                          help="print one JSON document (its shape: docs/admin.rst)")


def workflow_command(options: argparse.Namespace) -> int:
    """Print the workflow's tree, or its JSON document; an unknown id is an error
    (`WorkflowNotFound`, printed in one line by `run_reporting`)."""
    view = read_workflow(options.workflow_id)
    if options.json:
        print(json.dumps(view.as_dict()))
        return 0
    for line in (*header_lines(view, server_time(Job.client())), *tree_lines(view)):
        print(printable(line))
    return 0


def header_lines(view: WorkflowView, now: float) -> list[str]:
    """The workflow's name and id, its state and creation, then its nodes counted."""
    finished = "done" if view.done else "not done"
    counted = ", ".join(f"{count} {status}" for status, count in view.counts.items()
                        if count and status != "total")
    return [f"workflow {view.name or '(no name)'} ({view.id})",
            f"state: {view.state}, {finished}; created {when(view.created, now)}",
            f"nodes: {view.counts['total']}" + (f" ({counted})" if counted else ""), ""]


def node_label(node: WorkflowNode) -> str:
    """A node's line: id, queue, status and progress (when it reported one)."""
    progress = progress_text(node.progress, node.status in RUNNING_VALUES)
    parts = [node.id, node.queue or "(no queue)", node.status or "(no status)"]
    return "  ".join(parts + ([progress] if progress else []))


def tree_lines(view: WorkflowView) -> Iterator[str]:
    """The nodes as a tree: the roots (nodes waiting for no node of the workflow) first,
    each node under the first of its parents shown, `(see above)` under the others; a
    node only a circle of parents reaches (bad data) is shown as a root."""
    by_id = {node.id: node for node in view.nodes}
    shown: set[str] = set()
    starts = [node.id for node in view.roots()]
    starts += [node.id for node in view.nodes]  # those left unshown: circles
    for start in starts:
        if start in shown:
            continue
        yield from _branch(by_id, start, shown)


def _branch(by_id: dict[str, WorkflowNode], start: str, shown: set[str]) -> Iterator[str]:
    """The lines of the node `start` and of the nodes under it (depth first, without
    recursion: a chain may be thousands of nodes long)."""
    # (node id, the guides of its ancestors: True where that ancestor was the last, depth)
    stack: list[tuple[str, tuple[bool, ...], int]] = [(start, (), 0)]
    while stack:
        task_id, guides, depth = stack.pop()
        node = by_id[task_id]
        prefix = "".join("    " if last else "│   " for last in guides[:-1])
        if guides:
            prefix += "└── " if guides[-1] else "├── "
        if depth > MAX_INDENT:
            prefix += f"(depth {depth}) "
        if task_id in shown:
            yield f"{prefix}{task_id}  (see above)"
            continue
        shown.add(task_id)
        yield prefix + node_label(node)
        children = [child for child in node.children if child in by_id]
        for index, child in reversed(list(enumerate(children))):
            last = index == len(children) - 1
            stack.append((child, (*guides, last)[-MAX_INDENT:], depth + 1))


HANDLERS: dict[str, Handler] = {"workflow": workflow_command}
