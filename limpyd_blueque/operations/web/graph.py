"""The drawing of a workflow's graph on its page: its nodes in layers, top to bottom (a
node's layer is the longest path to it from a root, `WorkflowView.layers`), a box per
node coloured by its status, and a line from each parent down to each child.

In each layer the nodes go left to right in the order of their parents' places (the mean
of them), so that fewer lines cross; a layer wider than `ROW_BOXES` boxes (a fan-out)
takes several rows. The server computes every position and the template
draws the SVG, as `charts` does: the page's Content-Security-Policy allows no inline
script, and the dashboard may run where there is no network. A graph larger than
`MAX_NODES` nodes or `MAX_LINES` lines is not drawn (the page says so).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..workflows import STATUSES, WorkflowNode, WorkflowView

#: a box's size, the space between two boxes and around the drawing (CSS pixels)
BOX_WIDTH, BOX_HEIGHT = 280, 44
GAP_X, GAP_Y, MARGIN = 20, 46, 10
#: the most characters of a task id a box shows (a UUID's 36; the whole id is in its
#: tooltip)
LABEL_CHARS = 36
#: the most boxes side by side: a wider layer takes several rows
ROW_BOXES = 4
#: the largest graph drawn
MAX_NODES, MAX_LINES = 500, 5000


@dataclass(frozen=True)
class Box:
    """A node's box: its task id (`label`: cut to fit), the status class it is coloured
    by (`unknown` for a status that is none), what its second line says (`detail`), its
    tooltip, and where it stands (its top left corner)."""

    id: str
    label: str
    status: str
    detail: str
    tooltip: str
    x: float
    y: float


@dataclass(frozen=True)
class Line:
    """The line from a parent's box down to a child's, as SVG path data."""

    parent: str
    child: str
    path: str


@dataclass(frozen=True)
class Drawing:
    """The whole graph: its size, its boxes and lines, and a box's size."""

    width: float
    height: float
    boxes: list[Box]
    lines: list[Line]
    box_width: int = BOX_WIDTH
    box_height: int = BOX_HEIGHT


def draw(view: WorkflowView) -> Drawing | None:
    """The drawing of `view`'s graph; None when it is too large (see `MAX_NODES`)."""
    edges = view.edges()
    if len(view.nodes) > MAX_NODES or sum(map(len, edges.values())) > MAX_LINES:
        return None
    rows = [layer[start:start + ROW_BOXES] for layer in ordered_layers(view.layers(), edges)
            for start in range(0, len(layer), ROW_BOXES)]
    widest = max((len(row) for row in rows), default=0)
    places: dict[str, tuple[float, float]] = {}
    for depth, row in enumerate(rows):
        offset = (widest - len(row)) * (BOX_WIDTH + GAP_X) / 2
        for index, task_id in enumerate(row):
            places[task_id] = (MARGIN + offset + index * (BOX_WIDTH + GAP_X),
                               MARGIN + depth * (BOX_HEIGHT + GAP_Y))
    boxes = [box_of(node, *places[node.id]) for node in view.nodes]
    lines = [Line(parent, child, line_path(places[parent], places[child]))
             for child, parents in edges.items() for parent in parents]
    return Drawing(width=2 * MARGIN + max(widest * (BOX_WIDTH + GAP_X) - GAP_X, 0),
                   height=2 * MARGIN + max(len(rows) * (BOX_HEIGHT + GAP_Y) - GAP_Y, 0),
                   boxes=boxes, lines=lines)


def ordered_layers(layers: dict[str, int], edges: dict[str, list[str]]) -> list[list[str]]:
    """The ids of each layer, from the top: the first in id order, each next one in the
    order of the mean place of each node's parents in the layers above (ties by id)."""
    rows: list[list[str]] = [[] for _ in range(max(layers.values(), default=-1) + 1)]
    for task_id in sorted(layers):
        rows[layers[task_id]].append(task_id)
    place: dict[str, float] = {}
    for depth, row in enumerate(rows):
        if depth:
            row.sort(key=lambda task_id: (_mean_place(edges[task_id], place), task_id))
        for index, task_id in enumerate(row):
            place[task_id] = index - (len(row) - 1) / 2  # centred, as the rows are drawn
    return rows


def _mean_place(parents: list[str], place: dict[str, float]) -> float:
    known = [place[parent] for parent in parents if parent in place]
    return sum(known) / len(known) if known else 0.0


def line_path(parent: tuple[float, float], child: tuple[float, float]) -> str:
    """A curve from the middle of the parent box's bottom to the middle of the child
    box's top."""
    x1, y1 = parent[0] + BOX_WIDTH / 2, parent[1] + BOX_HEIGHT
    x2, y2 = child[0] + BOX_WIDTH / 2, child[1]
    middle = (y1 + y2) / 2
    return f"M{x1:g},{y1:g} C{x1:g},{middle:g} {x2:g},{middle:g} {x2:g},{y2:g}"


def box_of(node: WorkflowNode, x: float, y: float) -> Box:
    """A node's box at (`x`, `y`): its id cut to `LABEL_CHARS`, then its status, progress
    and queue."""
    status = node.status if node.status in STATUSES else "unknown"
    percent = percent_of(node.progress)
    state = " ".join(part for part in (node.status or "?", percent) if part)
    message = (node.progress or {}).get("message")
    tooltip = "\n".join([node.id, f"queue: {node.queue or '?'}", f"status: {state}",
                         *([f"progress: {message}"] if message else [])])
    return Box(node.id, cut(node.id), status, cut(f"{state} · {node.queue or '?'}"), tooltip,
               x, y)


def cut(text: str, size: int = LABEL_CHARS) -> str:
    """`text`, cut to `size` characters (the last one then `…`) to fit in a box."""
    return text if len(text) <= size else text[:size - 1] + "…"


def percent_of(progress: dict[str, Any] | None) -> str:
    """`42%` of a progress with a total; '' without one."""
    fraction = (progress or {}).get("fraction")
    if isinstance(fraction, (int, float)) and not isinstance(fraction, bool):
        return f"{fraction * 100:.0f}%"
    return ""
