"""`blueque workflow ID`, run as users run it (a real process on the tests' Redis), on a
real workflow whose nodes are taken and finished by hand: the tree (each node under its
parents, a node of two parents shown once and referenced under the other), the `--json`
document (docs/admin.rst), and an unknown id's one error line. The tree of bad data (a
circle of parents, a chain deeper than the indentation) is checked in-process."""

from __future__ import annotations

import json
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest
from helpers import LISTENER, script, take

from limpyd_blueque import Workflow
from limpyd_blueque.cli.workflows import MAX_INDENT, tree_lines
from limpyd_blueque.operations.workflows import WorkflowNode, WorkflowView

pytestmark = pytest.mark.timeout(60)
ADMIN = script("blueque", "limpyd_blueque.admin")
STATUSES = ("waiting", "scheduled", "pending", "reserved", "started", "complete", "failed",
            "canceled", "buried", "expired")
PROGRESS = {"done", "total", "fraction", "message", "moved_at", "time_left", "attempt"}


def blueques(redis_url, *commands):
    """The results of several `blueque` commands, run at the same time."""
    def run(args):
        return subprocess.run([*ADMIN, f"--redis-url={redis_url}", *args],
                              capture_output=True, text=True, timeout=30)
    with ThreadPoolExecutor(max_workers=len(commands)) as pool:
        return list(pool.map(run, commands))


@pytest.fixture
def diamond(conn):
    """A submitted diamond: `top` complete, `left` running at 3 of 10, `right` complete,
    `bottom` waiting for both; the nodes by name, and the workflow's id."""
    wf = Workflow("nightly report")
    top = wf.add("wfcli-a", "top")
    left = wf.add("wfcli-b", "left", after=[top])
    right = wf.add("wfcli-a", "right", after=[top])
    bottom = wf.add("wfcli-b", "bottom", after=[left, right])
    workflow_id = wf.submit()
    assert take("wfcli-a").complete("T", listener_id=LISTENER)
    running = take("wfcli-b")
    assert running.task_id == left.task_id
    running.set_progress(3, 10, "three of ten")
    assert take("wfcli-a").complete("R", listener_id=LISTENER)
    nodes = {"top": top.task_id, "left": left.task_id, "right": right.task_id,
             "bottom": bottom.task_id}
    return workflow_id, nodes


def depth(line):
    """How deep a tree line is: its guides are four characters a level."""
    return (len(line) - len(line.lstrip("│├└─ "))) // 4


def test_the_tree_shows_each_node_under_its_parents_with_status_and_progress(redis_url,
                                                                              diamond):
    workflow_id, nodes = diamond
    (result,) = blueques(redis_url, ["workflow", workflow_id])
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"workflow nightly report ({workflow_id})"
    assert lines[1].startswith("state: submitted, not done; created ")
    assert lines[2] == "nodes: 4 (1 waiting, 1 reserved, 2 complete)"
    tree = lines[lines.index("") + 1:]
    shown = [(depth(line), line.lstrip("│├└─ ").split("  ")) for line in tree]
    assert shown[0] == (0, [nodes["top"], "wfcli-a", "complete"])
    middle = sorted([nodes["left"], nodes["right"]])  # the children in id order
    assert [(level, fields[0]) for level, fields in shown] == [
        (0, nodes["top"]), (1, middle[0]), (2, nodes["bottom"]), (1, middle[1]),
        (2, nodes["bottom"])]
    assert [nodes["left"], "wfcli-b", "reserved", "30% 3/10 three of ten"] in [
        fields for _, fields in shown]
    assert shown[2][1] == [nodes["bottom"], "wfcli-b", "waiting"]  # the first time in full
    assert shown[4][1] == [nodes["bottom"], "(see above)"]  # then referenced
    assert tree[1].startswith("├── ") and tree[3].startswith("└── ")
    assert tree[2].startswith("│   └── ") and tree[4].startswith("    └── ")


def test_json_gives_the_counts_and_each_node_with_its_parents_and_children(redis_url,
                                                                          diamond):
    workflow_id, nodes = diamond
    (result,) = blueques(redis_url, ["workflow", workflow_id, "--json"])
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert set(document) == {"id", "name", "state", "created", "done", "counts", "nodes"}
    assert (document["id"], document["name"], document["state"], document["done"]) == (
        workflow_id, "nightly report", "submitted", False)
    assert document["counts"] == {**dict.fromkeys(STATUSES, 0), "waiting": 1,
                                  "reserved": 1, "complete": 2, "total": 4}
    by_id = {node["id"]: node for node in document["nodes"]}
    assert set(by_id) == set(nodes.values())
    for node in document["nodes"]:
        assert set(node) == {"id", "queue", "status", "progress", "parents", "children"}
    top, left, right, bottom = (by_id[nodes[name]] for name in
                                ("top", "left", "right", "bottom"))
    assert (top["parents"], sorted(top["children"])) == ([], sorted([left["id"], right["id"]]))
    assert (left["parents"], left["children"]) == ([top["id"]], [bottom["id"]])
    assert sorted(bottom["parents"]) == sorted([left["id"], right["id"]])
    assert bottom["children"] == [] and bottom["status"] == "waiting"
    assert (left["queue"], left["status"]) == ("wfcli-b", "reserved")
    assert set(left["progress"]) == PROGRESS
    assert (left["progress"]["done"], left["progress"]["total"],
            left["progress"]["message"]) == (3, 10, "three of ten")
    assert top["progress"] is None


def test_an_unknown_or_malformed_id_is_one_error_line(redis_url, conn):
    unknown, malformed = blueques(redis_url, ["workflow", "no-such-workflow"],
                                  ["workflow", "two words"])
    assert unknown.returncode == 1 and unknown.stdout == ""
    assert unknown.stderr.strip() == "blueque: error: no workflow with id 'no-such-workflow'"
    assert malformed.returncode == 2
    assert "invalid workflow id 'two words'" in malformed.stderr
    assert "Traceback" not in unknown.stderr + malformed.stderr


def node(task_id, *parents, status="pending"):
    return WorkflowNode(task_id, "q", status, None, list(parents), [])


def view_of(*nodes):
    """A `WorkflowView` of `nodes`, their children found from their parents."""
    children = {one.id: [other.id for other in nodes if one.id in other.parents]
                for one in nodes}
    full = [WorkflowNode(one.id, one.queue, one.status, None, one.parents, children[one.id])
            for one in nodes]
    return WorkflowView("wf", None, "submitted", None, False, {"total": len(full)}, full)


def test_a_circle_of_parents_is_shown_once_each_and_a_deep_chain_stops_indenting():
    circle = list(tree_lines(view_of(node("a", "b"), node("b", "a"), node("c"))))
    assert circle == ["c  q  pending", "a  q  pending", "└── b  q  pending",
                      "    └── a  (see above)"]
    chain = [node("n0"), *(node(f"n{i}", f"n{i - 1}") for i in range(1, 3 * MAX_INDENT))]
    lines = list(tree_lines(view_of(*chain)))
    assert len(lines) == 3 * MAX_INDENT
    assert lines[MAX_INDENT].startswith(" " * 4 * (MAX_INDENT - 1) + "└── n40")
    deepest = lines[-1]
    assert deepest.startswith(" " * 4 * (MAX_INDENT - 1) + "└── (depth 119) n119")
