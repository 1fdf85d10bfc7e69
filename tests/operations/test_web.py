"""The web dashboard (issue 14) through Flask's test client, on the tests' real Redis:
what each page shows, what the actions do and what they refuse (no token, a wrong token,
no CSRF token, read-only), escaping, trusted hosts and bad input. The same pages in a
real browser: tests/operations/test_dashboard_browser.py."""

from __future__ import annotations

import html
import json
import re
import time

import pytest

from limpyd_blueque import Job, Queue, Worker
from limpyd_blueque.operations.web import WebSettings, create_app

TOKEN = "s3cret-token"
SCRIPT = "<script>alert(1)</script>"


@pytest.fixture
def web(conn):
    """A test client of a dashboard that offers actions."""
    return create_app(WebSettings(token=TOKEN)).test_client()


def page(client, path, status=200):
    response = client.get(path)
    assert response.status_code == status, response.get_data(as_text=True)[:2000]
    return response.get_data(as_text=True)


def csrf(body):
    return re.search(r'name="csrf" value="([^"]+)"', body).group(1)


def act(client, name, token=TOKEN, **fields):
    """Open the confirmation page of an action, then post its form (with the token when
    the page asks for it)."""
    query = "&".join(f"{key}={value}" for key, value in fields.items())
    body = page(client, f"/confirm/{name}?{query}")
    form = {**{key: str(value) for key, value in fields.items()}, "csrf": csrf(body),
            "next": "/"}
    if 'name="token"' in body:
        form["token"] = token
    return client.post(f"/act/{name}", data=form)


def failing(job, queue):
    raise KeyError("missing thing")


def test_the_overview_counts_each_queues_tasks_by_status(web, conn):
    for _ in range(3):
        Queue.named("alpha").enqueue({})
    Queue.named("beta").schedule({}, eta=time.time() + 3600)
    body = page(web, "/")
    row = re.search(r'<tr data-queue="alpha">(.*?)</tr>', body, re.S).group(1)
    assert re.search(r'data-status="pending"><a [^>]*>3</a>', row)
    assert 'data-status="failed">0' in row
    beta = re.search(r'<tr data-queue="beta">(.*?)</tr>', body, re.S).group(1)
    assert re.search(r'data-status="scheduled"><a [^>]*>1</a>', beta)
    assert '<span id="worker-count">0</span>' in body


def test_a_queue_page_lists_a_status_page_by_page(conn):
    client = create_app(WebSettings(page_size=10)).test_client()
    jobs = Queue.named("paged").enqueue_many([{"n": n} for n in range(25)])
    first = page(client, "/queues/paged?status=pending")
    assert '<span id="total">25</span>' in first and "page 1 of 3" in first
    listed = re.findall(r'<tr data-task="([^"]+)">', first)
    assert listed == [job.task_id for job in jobs[:10]]  # the next to run first
    last = page(client, "/queues/paged?status=pending&page=3")
    assert re.findall(r'<tr data-task="([^"]+)">', last) == [job.task_id for job in jobs[20:]]
    assert 'id="next"' not in last and 'id="previous"' in last


def test_a_task_page_shows_every_field_its_attempts_and_errors_with_traceback(web, conn):
    job = Queue.named("t").enqueue({"image": "cat.jpg"})
    Worker("t", callback=failing, fork=False, max_loops=1, timeout=0.2).run()
    body = page(web, f"/tasks/{job.task_id}")
    assert 'id="task-status">failed<' in body
    assert job.parameters.hget() in html.unescape(body)
    assert "cat.jpg" in body
    assert "KeyError" in body and "missing thing" in body
    assert 'class="traceback">Traceback (most recent call last)' in body
    assert "attempt 1" in body


def test_the_running_page_and_its_feed_show_progress_worker_and_attempt(web, conn):
    job = Queue.named("r").enqueue({})
    reservation, _ = Queue.scripts().reserve(["r"], "host-a_7", time.time(), pid=4242,
                                             pstart="1")
    assert reservation.task_id == job.task_id
    now = time.time()  # as the task's own `set_progress` writes it
    conn.hset(job.key, "progress", json.dumps({
        "done": 30, "total": 120, "message": "page 30 of 120", "at": now, "first_at": now - 60,
        "first_done": 0, "attempt": 1}))
    body = page(web, "/running")
    assert f'<tr data-task="{job.task_id}">' in body
    assert '<progress max="1" value="0.25">' in body and "page 30 of 120" in body
    feed = web.get("/api/running").get_json()
    assert feed["actions"] is True
    (row,) = feed["tasks"]
    assert (row["id"], row["worker"], row["attempt"], row["fraction"]) == (
        job.task_id, "host-a_7", 1, 0.25)


def test_errors_are_filtered_by_type_code_queue_and_date_with_counts_per_type(web, conn):
    Queue.named("e1").enqueue({})
    Queue.named("e1").enqueue({})
    Worker("e1", callback=failing, fork=False, max_loops=2, timeout=0.2).run()
    Queue.named("e2").enqueue({})
    Worker("e2", callback=lambda job, queue: 1 / 0, fork=False, max_loops=1, timeout=0.2).run()
    body = page(web, "/errors")
    assert re.search(r'data-type="KeyError"><td><a [^>]*>KeyError</a></td><td class="num">2',
                     body)
    assert re.search(r'data-type="ZeroDivisionError"><td><a [^>]*>ZeroDivisionError</a></td>'
                     r'<td class="num">1', body)
    only = page(web, "/errors?type=ZeroDivisionError")
    assert only.count('<tr data-type="ZeroDivisionError">') == 2  # its count row, its row
    assert 'data-type="KeyError"' not in only
    by_queue = page(web, "/errors?queue=e1")
    assert 'data-type="ZeroDivisionError"' not in by_queue
    today = time.strftime("%Y-%m-%d", time.gmtime())
    assert "KeyError" in page(web, f"/errors?since={today}&until={today}")
    assert "no stored error matches" in page(web, "/errors?until=2001-01-01")
    assert "no stored error matches" in page(web, "/errors?code=E42")


def test_the_workers_page_lists_a_live_worker(web, conn, workers):
    workers.start("--queues=wq")
    body = ""

    def listed():
        nonlocal body
        body = page(web, "/workers")
        return "data-worker=" in body
    from helpers import wait_for
    wait_for(listed, timeout=20)
    assert "wq" in body


def test_an_action_asks_for_the_token_once_then_acts(web, conn):
    job = Queue.named("a").enqueue({})
    wrong = act(web, "cancel", token="nöpe", task=job.task_id)
    assert wrong.status_code == 403 and "wrong token" in wrong.get_data(as_text=True)
    assert job.status.hget() == "pending"
    done = act(web, "cancel", task=job.task_id)
    assert done.status_code == 302
    assert job.status.hget() == "canceled"
    assert "canceled" in page(web, "/")  # the flash message
    second = page(web, f"/confirm/requeue?task={job.task_id}")
    assert 'name="token"' not in second  # this session gave it already
    assert act(web, "requeue", task=job.task_id).status_code == 302
    assert job.status.hget() == "pending"


def test_an_action_without_the_sessions_csrf_token_is_refused(web, conn):
    job = Queue.named("a").enqueue({})
    page(web, f"/confirm/cancel?task={job.task_id}")
    for form in ({"task": job.task_id, "token": TOKEN},
                 {"task": job.task_id, "token": TOKEN, "csrf": "forged"},
                 {"task": job.task_id, "token": TOKEN, "csrf": "forgé"}):
        response = web.post("/act/cancel", data=form)
        assert response.status_code == 403
        assert "came from another site" in response.get_data(as_text=True)
    assert job.status.hget() == "pending"
    assert 'name="token"' in page(web, f"/confirm/cancel?task={job.task_id}")  # not signed in


def test_another_sessions_csrf_token_does_not_do(conn):
    app = create_app(WebSettings(token=TOKEN))
    mine, theirs = app.test_client(), app.test_client()
    job = Queue.named("a").enqueue({})
    token_of_theirs = csrf(page(theirs, f"/confirm/cancel?task={job.task_id}"))
    page(mine, f"/confirm/cancel?task={job.task_id}")
    response = mine.post("/act/cancel", data={"task": job.task_id, "token": TOKEN,
                                              "csrf": token_of_theirs})
    assert response.status_code == 403
    assert job.status.hget() == "pending"


@pytest.mark.parametrize("settings", [WebSettings(token=TOKEN, read_only=True), WebSettings()],
                         ids=["read-only", "no-token"])
def test_without_actions_no_page_offers_one_and_none_is_done(conn, settings):
    client = create_app(settings).test_client()
    failed = Queue.named("ro").enqueue({})
    Worker("ro", callback=failing, fork=False, max_loops=1, timeout=0.2).run()
    job = Queue.named("ro").enqueue({})
    for path in ("/", "/running", "/queues/ro?status=pending", "/queues/ro?status=failed",
                 f"/tasks/{job.task_id}", f"/tasks/{failed.task_id}"):
        assert not re.search(r'class="action( danger)?"', page(client, path))
    assert "read-only" in page(client, "/")
    page(client, f"/confirm/delete?task={job.task_id}", status=403)
    response = client.post("/act/delete", data={"task": job.task_id, "token": TOKEN})
    assert response.status_code == 403
    assert job.status.hget() == "pending"


def test_delete_kick_purge_and_requeue_failed(web, conn):
    queue = Queue.named("ops")
    first = queue.enqueue({})
    queue.enqueue({})
    assert act(web, "delete", task=first.task_id).status_code == 302
    assert conn.exists(first.key) == 0
    Worker("ops", callback=failing, fork=False, max_loops=1, timeout=0.2).run()
    assert queue.counts()["failed"] == 1
    assert act(web, "requeue-failed", queue="ops").status_code == 302
    assert queue.counts()["pending"] == 1
    reservation, _ = Queue.scripts().reserve(["ops"], "host_1", time.time())
    assert Job.load(reservation.task_id).bury("poisoned", listener_id="host_1")
    assert queue.counts()["buried"] == 1
    assert act(web, "kick", queue="ops", count=5).status_code == 302
    assert queue.counts()["buried"] == 0 and queue.counts()["pending"] == 1
    for _ in range(3):
        queue.enqueue({})
    assert act(web, "purge", queue="ops", status="pending").status_code == 302
    assert queue.counts()["pending"] == 0
    purge_running = web.get("/confirm/purge?queue=ops&status=started")
    assert purge_running.status_code == 400
    assert "cannot purge status 'started'" in html.unescape(purge_running.get_data(as_text=True))


def test_every_value_from_redis_is_escaped(web, conn):
    job = Queue.named("x").enqueue({"note": SCRIPT})
    conn.hset(job.key, "extra<b>", SCRIPT)
    for path in (f"/tasks/{job.task_id}", "/queues/x?status=pending", "/"):
        body = page(web, path)
        assert SCRIPT not in body
        assert "<b>" not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page(web, f"/tasks/{job.task_id}")


def test_every_page_carries_a_strict_content_security_policy(web, conn):
    response = web.get("/")
    policy = response.headers["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy
    assert "frame-ancestors 'none'" in policy
    assert response.headers["X-Frame-Options"] == "DENY"
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert "<script>" not in response.get_data(as_text=True)  # no inline script


def test_a_localhost_dashboard_refuses_other_host_names(conn):
    client = create_app(WebSettings(), host="127.0.0.1").test_client()
    assert client.get("/", headers={"Host": "localhost:8080"}).status_code == 200
    assert client.get("/", headers={"Host": "127.0.0.1:8080"}).status_code == 200
    assert client.get("/", headers={"Host": "attacker.example"}).status_code == 400
    open_client = create_app(WebSettings(), host="0.0.0.0").test_client()
    assert open_client.get("/", headers={"Host": "queue.internal"}).status_code == 200


@pytest.mark.parametrize(("path", "status", "message"), [
    ("/queues/bad%20name", 400, "invalid queue name"),
    ("/queues/q?status=nope", 400, "unknown status"),
    ("/queues/q?page=0", 400, "invalid page"),
    ("/tasks/nope", 404, "nope"),
    ("/errors?since=yesterday", 400, "invalid date"),
    ("/errors?since=2026-02-02&until=2026-01-01", 400, "is after"),
    ("/confirm/explode?task=x", 404, "no such page"),
    ("/confirm/kick?queue=q&count=lots", 400, "invalid count"),
    ("/nowhere", 404, "no such page"),
])
def test_bad_addresses_get_a_page_naming_the_problem(web, conn, path, status, message):
    body = page(web, path, status=status)
    assert message in html.unescape(body)
    assert "Traceback" not in body


def test_next_pages_stay_on_the_dashboard(web, conn):
    job = Queue.named("n").enqueue({})
    body = page(web, f"/confirm/cancel?task={job.task_id}&next=https://evil.example/")
    assert 'name="next" value="/"' in body
    response = web.post("/act/cancel", data={"task": job.task_id, "token": TOKEN,
                                             "csrf": csrf(body), "next": "//evil.example"})
    assert response.headers["Location"] == "/"


def test_redis_out_of_reach_is_a_503_page(redis_url, conn):
    from limpyd_blueque import use_redis
    from limpyd_blueque.connection.embedded import EmbeddedRedis

    client = create_app(WebSettings()).test_client()
    try:
        with EmbeddedRedis() as server:
            use_redis(server.url)
        body = page(client, "/", status=503)
        assert "cannot reach Redis" in body
    finally:
        use_redis(redis_url)


# -- issue 29: token statuses, confirmation labels, pause and resume, worker orders, ------
# -- the throughput chart and the search ----------------------------------------------------
def test_an_action_posted_without_the_token_is_401_and_with_a_wrong_one_403(web, conn):
    job = Queue.named("a").enqueue({})
    for fields in ({}, {"task": "bad id"}, {"queue": "x"}):  # nothing right, as with curl
        nothing = web.post("/act/cancel", data=fields)
        assert nothing.status_code == 401, fields
        assert "no token given" in html.unescape(nothing.get_data(as_text=True))
    bare = web.post("/act/cancel", data={"task": job.task_id})  # no form, no token
    assert bare.status_code == 401
    assert "no token given" in html.unescape(bare.get_data(as_text=True))
    assert bare.headers["WWW-Authenticate"].startswith("Form ")
    form = {"task": job.task_id, "csrf": csrf(page(web, f"/confirm/cancel?task={job.task_id}")),
            "next": "/"}
    assert web.post("/act/cancel", data={**form, "token": ""}).status_code == 401
    wrong = web.post("/act/cancel", data={**form, "token": "s3cret-tokem"})
    assert wrong.status_code == 403 and "wrong token" in wrong.get_data(as_text=True)
    assert "WWW-Authenticate" not in wrong.headers
    for response in (bare, wrong):
        body = response.get_data(as_text=True)
        assert TOKEN not in body and "s3cret-tokem" not in body  # no token is ever shown
        assert 'id="confirm"' in body  # the page to try again
    assert job.status.hget() == "pending"
    assert web.post("/act/cancel", data={**form, "token": TOKEN}).status_code == 302
    assert job.status.hget() == "canceled"


@pytest.mark.parametrize(("path", "heading", "button", "keep"), [
    ("/confirm/cancel?task={task}", "Cancel task {task}?", "Cancel task", "Keep it"),
    ("/confirm/requeue?task={task}", "Requeue task {task}?", "Requeue task", "Keep it"),
    ("/confirm/delete?task={task}", "Delete task {task}?", "Delete task", "Keep it"),
    ("/confirm/requeue-failed?queue=b", "Requeue every failed task of queue b?",
     "Requeue failed tasks", "Keep them"),
    ("/confirm/purge?queue=b&status=failed", "Delete every failed task of queue b?",
     "Delete tasks", "Keep them"),
    ("/confirm/kick?queue=b&count=3", "Kick up to 3 buried task(s) of queue b back in line?",
     "Kick buried tasks", "Keep them"),
    ("/confirm/pause?queue=b", "Pause queue b?", "Pause queue", "Keep it running"),
    ("/confirm/resume?queue=b", "Resume queue b?", "Resume queue", "Keep it paused"),
    ("/confirm/quiet?worker=host-a_12", "Quiet worker host-a_12?", "Quiet worker",
     "Keep it working"),
    ("/confirm/stop?worker=host-a_12", "Stop worker host-a_12?", "Stop worker",
     "Keep it running"),
])
def test_each_confirmation_says_what_its_buttons_do(web, conn, path, heading, button, keep):
    job = Queue.named("b").enqueue({})
    body = html.unescape(page(web, path.format(task=job.task_id)))
    assert f"<h1>{heading.format(task=job.task_id)}</h1>" in body
    assert re.search(rf'<button type="submit" id="confirm"[^>]*>{re.escape(button)}</button>',
                     body)
    assert re.search(rf'<a class="action keep" href="/" id="back">{re.escape(keep)}</a>', body)


def test_pause_and_resume_a_queue_with_the_token(web, conn):
    queue = Queue.named("p")
    queue.enqueue({})
    Queue.named("other").enqueue({})
    body = page(web, "/queues/p")
    assert 'id="paused"' not in body and "/confirm/pause?" in body
    assert web.post("/act/pause", data={"queue": "p"}).status_code == 401
    assert not queue.is_paused()
    done = act(web, "pause", queue="p")
    assert done.status_code == 302 and queue.is_paused()
    assert "queue p paused" in page(web, "/")
    overview = page(web, "/")
    assert re.search(r'<tr data-queue="p">\s*<td><a [^>]*>p</a> <span class="flag paused">paused',
                     overview)
    assert not re.search(r'<tr data-queue="other">\s*<td><a [^>]*>other</a> <span', overview)
    body = page(web, "/queues/p")
    assert 'id="paused">paused<' in body and "/confirm/resume?" in body
    assert "/confirm/pause?" not in body
    queue.enqueue({})  # enqueueing still works
    assert queue.counts()["pending"] == 2
    assert act(web, "pause", queue="p").status_code == 302  # paused already: said so
    assert "was paused already" in page(web, "/")
    assert act(web, "resume", queue="p").status_code == 302
    assert not queue.is_paused()
    assert 'id="paused"' not in page(web, "/queues/p")


def test_the_workers_page_shows_each_workers_figures_and_quiets_and_stops_it(web, conn,
                                                                            workers):
    from helpers import wait_for

    process = workers.start("--queues=wq", "--concurrency=3")
    row = ""

    def listed(state):
        nonlocal row
        found = re.search(r'<tr data-worker="([^"]+)">(.*?)</tr>', page(web, "/workers"), re.S)
        row = found.group(2) if found else ""
        return found and f'data-state="{state}"' in row and found.group(1)
    worker_id = wait_for(lambda: listed("waiting") or listed("running"), timeout=20)
    assert '<td class="num concurrency">3</td>' in row
    assert '<td class="num running-count">0</td>' in row
    assert re.search(r'<td class="num load">\d+\.\d\d</td>', row)
    assert f"/confirm/quiet?next=/workers&amp;worker={worker_id}" in row
    assert f"/confirm/stop?next=/workers&amp;worker={worker_id}" in row
    read_only = create_app(WebSettings(token=TOKEN, read_only=True)).test_client()
    assert worker_id in page(read_only, "/workers")
    assert not re.search(r'class="action( danger)?"', page(read_only, "/workers"))
    assert act(web, "quiet", worker=worker_id).status_code == 302
    assert Queue.worker_orders() == {worker_id: "quiet"}
    wait_for(lambda: listed("quiet"), timeout=10)
    assert "/confirm/quiet?" not in row and "/confirm/stop?" in row
    job = Queue.named("wq").enqueue({})
    time.sleep(1.5)
    assert job.status.hget() == "pending"  # a quiet worker takes no new task
    assert act(web, "stop", worker=worker_id).status_code == 302
    assert process.wait(20) == 0
    assert act(web, "stop", worker=worker_id).status_code == 302
    assert f"no live worker {worker_id}: nothing was told" in page(web, "/")


def test_the_chart_draws_the_counts_real_steps_wrote(web, conn):
    queue = Queue.named("c")
    queue.enqueue_many([{} for _ in range(3)])
    Worker("c", callback=lambda job, queue: None, fork=False, max_loops=3, timeout=0.2).run()
    queue.enqueue({})
    Worker("c", callback=failing, fork=False, max_loops=1, timeout=0.2).run()
    assert queue.enqueue({}).cancel()
    Queue.named("idle").enqueue({})
    body = page(web, "/chart")
    chart = re.search(r'<section class="chart" data-queue="c">(.*?)</section>', body, re.S).group(1)
    totals = dict(re.findall(r'<polyline class="series \w+" data-status="(\w+)" '
                             r'data-total="(\d+)"', chart))
    assert totals == {"complete": "3", "failed": "1", "canceled": "1"}
    assert "processed (complete): <strong class=\"total\">3</strong>" in chart
    top = int(re.search(r'data-top="(\d+)"', chart).group(1))
    assert top in (2, 5)  # a scale from 0 to 5 for 3 in a minute (to 2 if a minute ended)
    points = re.search(r'data-status="complete" data-total="3" points="([^"]+)"', chart).group(1)
    assert len(points.split()) == 6 * 60  # one a minute, six hours by default
    heights = [176 - float(point.split(",")[1]) for point in points.split()]  # 166 high
    assert round(sum(height * top / 166 for height in heights), 2) == 3
    assert points.split()[-1].startswith("948.0,")  # the last minute at the right end
    idle = re.search(r'<section class="chart" data-queue="idle">(.*?)</section>', body, re.S)
    assert 'data-total="0"' in idle.group(1)
    one = page(web, "/chart?queue=c&hours=24")
    assert one.count('<section class="chart"') == 1
    assert len(re.search(r'points="([^"]+)"', one).group(1).split()) == 24 * 60
    assert "last 24 hours" in one


def test_the_charts_scale_and_hour_marks():
    from limpyd_blueque.operations.web.charts import chart, nice_top

    assert [nice_top(peak) for peak in (0, 1, 2, 3, 5, 6, 11, 20, 21, 99, 101, 4000)] == [
        2, 2, 2, 5, 5, 10, 20, 20, 50, 100, 200, 5000]
    first = 29_000_000 // 60 * 60 + 30  # a minute (Unix time // 60) half past an hour
    drawn = chart("q", first, {"complete": [0] * 180, "failed": [0] * 180,
                               "canceled": [0] * 180}, 3)
    assert [label[-3:] for _, label in drawn.x_ticks] == [":30", ":00"] * 3  # 3 hours
    assert [label for _, label in drawn.y_ticks] == ["0", "1", "2"]
    counts = {"complete": [0] * 59 + [42], "failed": [0] * 60, "canceled": [0] * 60}
    drawn = chart("q", first, counts, 1)
    assert drawn.top == 50
    assert [label for _, label in drawn.y_ticks] == ["0", "10", "20", "30", "40", "50"]
    assert drawn.lines[0].points.split()[-1] == "948.0,36.6"  # 42 of 50, 166 units high
    assert drawn.totals == {"complete": 42, "failed": 0, "canceled": 0}


def test_the_search_page_finds_a_task_and_says_what_it_looked_at(conn):
    client = create_app(WebSettings()).test_client()
    queue = Queue.named("s")
    jobs = queue.enqueue_many([{"image": f"{n}.jpg"} for n in range(3)])
    tagged = queue.enqueue({"image": "x.png"}, identifier="monthly")
    form = page(client, "/search")
    assert 'id="search-form"' in form and "<option value=\"s\"" in form
    assert "looks at the first\n  1,000 tasks of each list of the queue" in form
    body = page(client, "/search?queue=s&q=image%3D1.jpg")
    assert re.findall(r'<tr data-task="([^"]+)" data-how="(\w+)">', body) == [
        (jobs[1].task_id, "parameters")]
    assert '<span id="looked-at">4</span>' in body
    assert "Every task of the queue was looked at." in body
    assert re.findall(r'data-how="(\w+)"', page(client, "/search?queue=s&q=monthly")) == [
        "identifier"]
    assert re.findall(r'data-how="(\w+)"', page(
        client, f"/search?queue=s&q={tagged.task_id}")) == ["id"]
    assert "no task matches" in page(client, "/search?queue=s&q=nothing-like-it")
    assert 'action="/search"' in page(client, "/queues/s")  # each queue page has the box


def test_the_search_page_says_where_it_stopped(conn):
    client = create_app(WebSettings(search_limit=5)).test_client()
    Queue.named("s").enqueue_many([{"n": n} for n in range(8)])
    body = page(client, "/search?queue=s&q=n")
    assert "looks at the first\n  5 tasks of each list" in body
    assert '<span id="looked-at">5</span>' in body
    assert "The search stopped at 5 tasks of each list" in body
    assert "1 list(s) of the queue hold more" in body


def test_every_new_page_escapes_what_it_shows(web, conn):
    queue = Queue.named("x")
    job = queue.enqueue({"note": SCRIPT})
    for path in ("/search?queue=x&q=%3Cscript%3Ealert(1)%3C/script%3E", "/chart?queue=x",
                 "/workers", f"/confirm/cancel?task={job.task_id}&next=/%3Cb%3E"):
        body = page(web, path)
        assert SCRIPT not in body and "<b>" not in body


@pytest.mark.parametrize(("path", "status", "message"), [
    ("/chart?hours=5", 400, "invalid hours '5': use one of 1, 3, 6, 12, 24"),
    ("/chart?hours=lots", 400, "invalid hours"),
    ("/chart?queue=bad%20name", 400, "invalid queue name"),
    ("/search?queue=bad%20name&q=x", 400, "invalid queue name"),
    ("/search?queue=s&q=" + "x" * 501, 400, "search too long"),
    ("/confirm/quiet?worker=nobody", 400, "invalid listener id"),
    ("/confirm/stop?worker=", 400, "invalid listener id"),
    ("/confirm/pause?queue=bad%20name", 400, "invalid queue name"),
])
def test_bad_addresses_of_the_new_pages_get_a_page_naming_the_problem(web, conn, path, status,
                                                                      message):
    body = page(web, path, status=status)
    assert message in html.unescape(body)
    assert "Traceback" not in body


def test_a_queue_page_shows_its_limits_the_busiest_groups_first(web):
    queue = Queue.named("lim")
    queue.set_limit(None, max_running=9)
    queue.set_limit("*", max_running=2)
    queue.set_limit("quiet", max_starts=5, per=60)
    queue.enqueue_many(list(range(3)), group="busy")
    queue.enqueue("q", group="quiet")
    Queue.reserve_from(["lim"], "host_1")
    body = page(web, "/queues/lim")
    table = body[body.index('<table id="limits">'):]
    table = table[:table.index("</table>")]
    rows = re.findall(r"<tr><td>(.*?)</td>", table)
    assert rows == ["the queue as a whole", "every other group", "quiet"]  # busy runs
    assert re.search(r"every other group</td>\s*<td class=\"n\">2</td>", table)
    # each group under the default, with its own counts, after the default's row
    governed = re.findall(r'<tr class="governed"><td>(.*?) <small>\(the default\)</small></td>'
                          r'(?:\s*<td class="n">(.*?)</td>){6}', table)
    assert [group for group, _ in governed] == ["busy"]
    assert re.search(r'busy <small>\(the default\)</small></td>\s*<td class="n">2</td>'
                     r'(\s*<td class="n">-</td>){3}\s*<td class="n">1</td>\s*'
                     r'<td class="n">2</td>', table)
    assert table.index("every other group") < table.index("busy") < table.index("quiet")
    assert "limits" not in page(web, "/queues/other")  # no limit: no table
