"""The dashboard's workflow page and the dependencies on a task's page, through Flask's
test client on the tests' real Redis: the graph drawn as an SVG (one box per node, with
its status and a link to its task's page, a line per parent, the layers), the counts, the
lists of the tasks a task waits for and of those waiting for it, and bad data (ids of
any printable character, `parents` fields that are no list, a circle) shown escaped,
never a crash. The same page in a real browser: tests/operations/test_dashboard_browser.py."""

from __future__ import annotations

import html
import re

import pytest
from helpers import LISTENER, take
from markupsafe import escape

from limpyd_blueque import Queue, Workflow
from limpyd_blueque.operations.web import WebSettings, create_app, graph
from limpyd_blueque.operations.workflows import WorkflowNode, WorkflowView
from limpyd_blueque.protocol.keys import keyspace

pytestmark = pytest.mark.timeout(60)
K = keyspace()
SCRIPT = "<script>alert(1)</script>"
HOSTILE = "<b>\"it's&x</b>"  # a valid task id: printable, no whitespace
NODE = re.compile(r'<a class="node ([a-z]+)" href="([^"]+)" data-task="([^"]+)" '
                  r'data-status="([a-z]+)">.*?<rect x="([\d.]+)" y="([\d.]+)"', re.S)
EDGE = re.compile(r'<path class="edge" d="[^"]+" data-parent="([^"]+)" data-child="([^"]+)"')


@pytest.fixture
def web(conn):
    return create_app(WebSettings()).test_client()


def page(client, path, status=200):
    response = client.get(path)
    assert response.status_code == status, response.get_data(as_text=True)[:2000]
    return response.get_data(as_text=True)


def boxes(body):
    """{task id: (status, link, x, y)} of the graph's boxes."""
    return {html.unescape(task): (status, html.unescape(link), float(x), float(y))
            for status, link, task, data_status, x, y in NODE.findall(body)
            if status == data_status}


@pytest.fixture
def diamond(conn):
    """`top` complete, `left` and `right` after it (pending), `bottom` after both and
    `late` after `top` and `bottom` (its longest path is through `bottom`), waiting."""
    wf = Workflow("diamond")
    top = wf.add("wfp-a", "top")
    left = wf.add("wfp-b", "left", after=[top])
    right = wf.add("wfp-a", "right", after=[top])
    bottom = wf.add("wfp-b", "bottom", after=[left, right])
    late = wf.add("wfp-b", "late", after=[top, bottom])
    wf.submit()
    assert take("wfp-a").complete("T", listener_id=LISTENER)
    return wf.workflow_id, {"top": top.task_id, "left": left.task_id, "right": right.task_id,
                            "bottom": bottom.task_id, "late": late.task_id}


def test_the_page_draws_one_box_per_node_in_layers_with_its_status_and_link(web, diamond):
    workflow_id, nodes = diamond
    body = page(web, f"/workflows/{workflow_id}")
    assert '<span id="workflow-name">diamond</span>' in body
    assert '<span id="node-count">5</span>' in body
    drawn = boxes(body)
    assert set(drawn) == set(nodes.values())
    statuses = {name: drawn[task_id][0] for name, task_id in nodes.items()}
    assert statuses == {"top": "complete", "left": "pending", "right": "pending",
                        "bottom": "waiting", "late": "waiting"}
    assert all(link == f"/tasks/{task_id}" for task_id, (_, link, _, _) in drawn.items())
    rows = {name: drawn[task_id][3] for name, task_id in nodes.items()}
    assert rows["top"] < rows["left"] == rows["right"] < rows["bottom"] < rows["late"]
    assert drawn[nodes["left"]][2] != drawn[nodes["right"]][2]
    names = {task_id: name for name, task_id in nodes.items()}
    assert sorted((names[parent], names[child]) for parent, child in EDGE.findall(body)) == [
        ("bottom", "late"), ("left", "bottom"), ("right", "bottom"), ("top", "late"),
        ("top", "left"), ("top", "right")]
    counts = dict(re.findall(r'<span class="key" data-status="([a-z]+)">.*?'
                             r'<strong class="count">(\d+)</strong>', body, re.S))
    assert counts == {"waiting": "2", "pending": "2", "complete": "1"}


def test_a_task_page_lists_the_tasks_it_waits_for_and_those_waiting_for_it(web, diamond):
    workflow_id, nodes = diamond
    body = page(web, f"/tasks/{nodes['bottom']}")

    def listed(list_id):
        block = re.search(rf'<ul class="linked" id="{list_id}">(.*?)</ul>', body, re.S)
        return re.findall(r'<li data-task="([^"]+)"><a href="/tasks/([^"]+)">', block.group(1))

    assert sorted(listed("parents")) == sorted(
        (nodes[name], nodes[name]) for name in ("left", "right"))
    assert listed("children") == [(nodes["late"], nodes["late"])]
    assert f'<a id="workflow" href="/workflows/{workflow_id}">' in body
    top = page(web, f"/tasks/{nodes['top']}")
    assert '<p id="parents">none</p>' in top
    plain = Queue.named("wfp-c").enqueue("alone")
    assert 'id="links"' not in page(web, f"/tasks/{plain.task_id}")  # nothing to list


def test_a_task_waiting_outside_any_workflow_is_listed_both_ways(web, conn):
    parent = Queue.named("wfp-d").enqueue("first", task_id=HOSTILE)
    child = Queue.named("wfp-d").enqueue("second", after=[parent.task_id])
    body = page(web, f"/tasks/{child.task_id}")
    assert HOSTILE not in body and escape(HOSTILE) in body
    assert 'id="workflow"' not in body
    assert f'<li data-task="{escape(child.task_id)}">' in page(
        web, "/tasks/%3Cb%3E%22it%27s%26x%3C/b%3E")


def test_unknown_and_malformed_workflow_ids_get_a_page_naming_them(web, conn):
    assert "no workflow with id &#39;missing&#39;" in page(web, "/workflows/missing", 404)
    body = page(web, "/workflows/two%20words", 400)
    assert "invalid workflow id" in html.unescape(body) and "Traceback" not in body


def test_bad_data_is_drawn_escaped_never_a_crash(web, conn):
    """Nodes written by hand: an id of markup, `parents` fields that are no JSON, no list
    or a list of other things, a circle, a hash gone, a status and a `workflow` field
    that are not what they should be."""
    wf = Workflow(SCRIPT)
    wf.add("wfp-e", "x")
    workflow_id = wf.submit()
    members = [HOSTILE, "circle-a", "circle-b", "broken", "gone"]
    conn.sadd(K.workflow_nodes(workflow_id), *members)
    conn.hset(K.task(HOSTILE), mapping={"queue": "wfp-e", "status": SCRIPT,
                                        "parents": "not json", "workflow": "two words",
                                        "progress": "{"})
    conn.hset(K.task("circle-a"), mapping={"queue": "wfp-e", "status": "waiting",
                                           "parents": '["circle-b", 7, {"x": 1}]'})
    conn.hset(K.task("circle-b"), mapping={"queue": "no queue", "status": "waiting",
                                           "parents": '["circle-a", "circle-a"]'})
    conn.hset(K.task("broken"), mapping={"status": "pending", "parents": '{"a": 1}'})
    body = page(web, f"/workflows/{workflow_id}")
    assert SCRIPT not in body and HOSTILE not in body and "<b>" not in body
    drawn = boxes(body)
    assert set(drawn) == {*members, *wf.node_ids()}
    assert drawn[HOSTILE][0] == "unknown" and drawn["gone"][0] == "unknown"
    assert {(parent, child) for parent, child in EDGE.findall(body)} == {
        ("circle-b", "circle-a"), ("circle-a", "circle-b")}
    task = page(web, "/tasks/%3Cb%3E%22it%27s%26x%3C/b%3E")
    assert '<span id="workflow">two words</span> (not a workflow id)' in task
    assert SCRIPT not in task


def test_a_graph_too_large_is_not_drawn(web, diamond, monkeypatch):
    workflow_id, _ = diamond
    monkeypatch.setattr(graph, "MAX_NODES", 4)
    body = page(web, f"/workflows/{workflow_id}")
    assert 'id="not-drawn"' in body and "<svg" not in body
    assert '<span id="node-count">5</span>' in body


def chain(*links):
    """A `WorkflowView` of nodes named by `links` ("child:parent,parent")."""
    nodes = []
    for link in links:
        task_id, _, parents = link.partition(":")
        nodes.append(WorkflowNode(task_id, "q", "pending", None,
                                  [p for p in parents.split(",") if p], []))
    return WorkflowView("wf", None, "submitted", None, False, {}, sorted(
        nodes, key=lambda node: node.id))


def test_a_layer_is_the_longest_path_from_a_root_and_a_circle_still_gets_one():
    view = chain("a", "b:a", "c:b", "d:a,c", "e")
    assert view.layers() == {"a": 0, "b": 1, "c": 2, "d": 3, "e": 0}
    assert [node.id for node in view.roots()] == ["a", "e"]
    circle = chain("x:z", "y:x", "z:y", "w:y")
    assert circle.roots() == []
    # no node can be placed: the first (w) is, then x, and the circle from it
    assert circle.layers() == {"w": 0, "x": 0, "y": 1, "z": 2}
    drawing = graph.draw(circle)
    assert len(drawing.boxes) == 4 and len(drawing.lines) == 4


def test_a_wide_layer_takes_several_rows():
    fan = chain("root", *(f"part{i:02d}:root" for i in range(10)),
                "merge:" + ",".join(f"part{i:02d}" for i in range(10)))
    drawing = graph.draw(fan)
    rows = {}
    for box in drawing.boxes:
        rows.setdefault(box.y, []).append(box.id)
    parts = [min(graph.ROW_BOXES, 10 - start) for start in range(0, 10, graph.ROW_BOXES)]
    assert [len(ids) for _, ids in sorted(rows.items())] == [1, *parts, 1]
    assert drawing.width == 2 * graph.MARGIN + graph.ROW_BOXES * (
        graph.BOX_WIDTH + graph.GAP_X) - graph.GAP_X
    assert len(drawing.lines) == 20
