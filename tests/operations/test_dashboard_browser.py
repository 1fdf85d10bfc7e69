"""The web dashboard in a real browser (issue 14): `blueque web` served by waitress on a
free port, real `blueque-worker` processes, and headless Chromium driven by Selenium
through Debian's `chromium` and `chromedriver` (nothing downloaded at run time).

Run with `python3 -m pytest -m browser`. Without a browser the tests are skipped, unless
`BLUEQUE_BROWSER_REQUIRED=1` (as CI sets it) makes that a failure. Each page is saved as
a PNG in `artifacts/screenshots/` at the root of the repository (the run's artifacts,
which CI keeps; the run prints the folder), and also in `$BLUEQUE_SCREENSHOTS` when set:
`BLUEQUE_SCREENSHOTS=docs/_static/dashboard python3 -m pytest -m browser` refreshes the
pictures of docs/dashboard.rst.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from helpers import LISTENER, script, take, wait_for

from limpyd_blueque import Job, Queue, Worker, Workflow

pytestmark = pytest.mark.browser
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
TOKEN = "browser-token"
SCRIPT = "<script>alert(1)</script>"


def missing_browser():
    """Why no browser can run here (None: one can)."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[browser]')"
    for path in (CHROMIUM, CHROMEDRIVER):
        if not shutil.which(path):
            return f"{path} is missing (Debian: apt-get install chromium chromium-driver)"
    return None


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    why = missing_browser()
    if why:
        if os.environ.get("BLUEQUE_BROWSER_REQUIRED"):
            pytest.fail(f"the browser tests must run: {why}")
        pytest.skip(why)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-dev-shm-usage", "--disable-quic", "--no-first-run",
                     "--disable-background-networking", "--disable-component-update",
                     "--disable-sync", "--window-size=1400,900",
                     f"--user-data-dir={tmp_path_factory.mktemp('chromium')}"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Dashboard:
    """A `blueque web` process, and the browser pointed at it."""

    def __init__(self, redis_url, browser, *options, token=TOKEN):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.browser = browser
        env = {**os.environ}
        env.pop("BLUEQUE_WEB_TOKEN", None)
        if token:
            env["BLUEQUE_WEB_TOKEN"] = token
        self.process = subprocess.Popen(
            [*script("blueque", "limpyd_blueque.admin"), f"--redis-url={redis_url}", "web",
             f"--port={self.port}", *options],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        wait_for(self.answers, timeout=20, interval=0.1)
        browser.delete_all_cookies()

    def answers(self):
        try:
            with urllib.request.urlopen(self.base + "/", timeout=2):
                return True
        except OSError:
            return False

    def open(self, path):
        self.browser.get(self.base + path)
        return self.browser

    def find(self, selector):
        from selenium.webdriver.common.by import By

        return self.browser.find_elements(By.CSS_SELECTOR, selector)

    def one(self, selector, timeout=10):
        return wait_for(lambda: (self.find(selector) or [None])[0], timeout=timeout)

    def click(self, selector, timeout=10):
        """Click the first element `selector` finds, again if the live table replaced it
        between finding and clicking."""
        from selenium.common.exceptions import StaleElementReferenceException

        def clicked():
            try:
                self.one(selector, timeout=timeout).click()
            except StaleElementReferenceException:
                return False
            return True
        wait_for(clicked, timeout=timeout)

    def stop(self):
        self.process.terminate()
        self.process.wait(10)


@pytest.fixture
def dashboard(redis_url, browser, conn):
    started = []

    def start(*options, token=TOKEN):
        web = Dashboard(redis_url, browser, *options, token=token)
        started.append(web)
        return web
    yield start
    for web in started:
        web.stop()


#: where each run saves its screenshots, as artifacts of the run (git ignores artifacts/)
ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "screenshots"
#: the pages each run saves a picture of, by the name of its file
PAGES = ("queues", "running", "queue", "task", "workers", "errors", "confirm", "search",
         "chart", "workflow")
#: the pictures this run saved
SAVED: set[str] = set()


@pytest.fixture(scope="module", autouse=True)
def screenshots_folder(request):
    """Say where the pictures are, once the tests of this module have run."""
    yield
    plugins = request.config.pluginmanager
    reporter, capture = plugins.get_plugin("terminalreporter"), plugins.get_plugin(
        "capturemanager")
    saved = sorted(path.name for path in ARTIFACTS.glob("*.png")) if ARTIFACTS.is_dir() else []
    if reporter is not None and capture is not None and saved:
        with capture.global_and_fixture_disabled():
            reporter.write_line(f"\ndashboard screenshots ({len(saved)}) in {ARTIFACTS}/: "
                                f"{', '.join(saved)}")


def shot(browser, name):
    """Save the whole page as `<name>.png` in `ARTIFACTS`, and in $BLUEQUE_SCREENSHOTS
    when set (the docs' pictures)."""
    height = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(1400, min(max(int(height) + 20, 500), 1200))
    try:
        folders = [ARTIFACTS] + [Path(path) for path in [os.environ.get("BLUEQUE_SCREENSHOTS")]
                                 if path]
        for folder in folders:
            folder.mkdir(parents=True, exist_ok=True)
            assert browser.save_screenshot(str(folder / f"{name}.png")), name
        SAVED.add(name)
    finally:
        browser.set_window_size(1400, 900)


def failing(job, queue):
    raise ValueError(f"cannot read {job.task_id[:8]}.jpg: truncated file")


def missing(job, queue):
    raise KeyError("width")


def cell(web, queue, status):
    return web.one(f'tr[data-queue="{queue}"] td[data-status="{status}"]').text


def test_the_overview_shows_each_queues_counts(dashboard):
    thumbnails, reports = Queue.named("thumbnails"), Queue.named("reports")
    thumbnails.enqueue_many([{"image": f"{n}.jpg"} for n in range(4)])
    Worker("thumbnails", callback=failing, fork=False, max_loops=1, timeout=0.2).run()
    for hours in (1, 2):
        reports.schedule({"report": "monthly"}, eta=time.time() + 3600 * hours)
    Queue.named("emails").enqueue({"to": "ops@example.com"})
    assert reports.pause()
    web = dashboard()
    web.open("/")
    assert web.one('tr[data-queue="reports"] .flag.paused').text == "paused"
    assert not web.find('tr[data-queue="emails"] .flag.paused')
    assert cell(web, "thumbnails", "pending") == "3"
    assert cell(web, "thumbnails", "failed") == "1"
    assert cell(web, "reports", "scheduled") == "2"
    assert cell(web, "emails", "pending") == "1"
    shot(web.browser, "queues")


def test_a_running_tasks_progress_bar_moves_without_a_reload(dashboard, workers):
    queue = Queue.named("reports")
    job = queue.enqueue({"total": 200, "step": 0.1})
    queue.enqueue({"total": 400, "step": 0.1})
    workers.start("--queues=reports", "--job-model=operating_jobs.ProgressJob",
                  "--concurrency=2")
    web = dashboard()
    page = web.open("/running")
    page.execute_script("document.body.dataset.loaded = 'once'")  # gone if it reloads
    row = f'tr[data-task="{job.task_id}"]'

    def bar():  # read in the page: the rows are replaced every second
        value = page.execute_script(
            "const bar = document.querySelector(arguments[0]); return bar && bar.value;",
            f"{row} progress")
        return float(value) if value is not None else None
    first = wait_for(lambda: (bar() or 0) > 0 and bar(), timeout=30)
    later = wait_for(lambda: (bar() or 0) > first and bar(), timeout=30)
    assert later > first
    cells = page.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0])).map(td => td.textContent)",
        f"{row} td")
    assert cells[3] == "1"  # the first attempt
    assert "item" in cells[5] and "of 200" in cells[5]
    assert page.execute_script("return document.body.dataset.loaded") == "once"
    worker = cells[2]
    assert worker != "-"
    web.open("/workers")
    assert worker in web.one("#workers").text
    web.open("/running")
    web.one(f"{row} progress")
    shot(web.browser, "running")
    errors = [entry for entry in page.get_log("browser") if entry["level"] == "SEVERE"]
    assert not errors, errors


def test_filtering_errors_by_type(dashboard):
    queue = Queue.named("thumbnails")
    queue.enqueue_many([{"image": f"{n}.jpg"} for n in range(3)])
    Worker("thumbnails", callback=failing, fork=False, max_loops=3, timeout=0.2).run()
    queue.enqueue_many([{"image": "no-width.jpg"} for _ in range(2)])
    Worker("thumbnails", callback=missing, fork=False, max_loops=2, timeout=0.2).run()
    web = dashboard()
    web.open("/errors")
    assert {row.get_attribute("data-type") for row in web.find("#errors tbody tr")} == {
        "ValueError", "KeyError"}
    web.one('#error-filters input[name="type"]').send_keys("KeyError")
    web.one("#filter").click()
    wait_for(lambda: "type=KeyError" in web.browser.current_url)
    rows = web.find("#errors tbody tr")
    assert len(rows) == 2
    assert {row.get_attribute("data-type") for row in rows} == {"KeyError"}
    counts = web.one('#error-types tr[data-type="KeyError"]').text
    assert counts.split()[-1] == "2"
    shot(web.browser, "errors")


def confirm(web, token=None):
    """Confirm the action whose page is open (typing `token` when asked)."""
    if token is not None:
        web.one("#token").send_keys(token)
    web.one("#confirm").click()


def test_cancel_and_requeue_ask_for_the_token_once_and_work(dashboard, workers, conn):
    from operating_jobs import wait_status

    job = Queue.named("reports").enqueue({"total": 1000, "step": 0.1})
    workers.start("--queues=reports", "--job-model=operating_jobs.ProgressJob")
    wait_status(job, "started", workers, timeout=20)
    web = dashboard()
    web.open("/running")
    web.click(f'tr[data-task="{job.task_id}"] a.action')
    assert web.one("#token") is not None  # asked for the token
    assert web.one("h1").text == f"Cancel task {job.task_id}?"
    assert web.one("#confirm").text == "Cancel task"  # the buttons say what they do
    assert web.one("#back").text == "Keep it"
    shot(web.browser, "confirm")
    confirm(web, "not-the-token")
    assert "wrong token" in web.one("#token-error").text
    assert Job.load(job.task_id).status.hget() == "started"
    confirm(web, TOKEN)
    assert "cancel requested" in web.one("p.flash.done").text
    wait_status(job, "canceled", workers, timeout=20)
    web.open(f"/tasks/{job.task_id}")
    web.one("a.action").click()  # requeue: the only action of a canceled task
    assert not web.find("#token")  # this session gave it already
    confirm(web)
    assert "requeued" in web.one("p.flash.done").text
    assert Job.load(job.task_id).status.hget() in {"pending", "reserved", "started"}


def test_read_only_shows_no_action(dashboard, conn):
    queue = Queue.named("thumbnails")
    failed = queue.enqueue({"image": "a.jpg"})
    Worker("thumbnails", callback=failing, fork=False, max_loops=1, timeout=0.2).run()
    waiting = queue.enqueue({"image": "b.jpg"})
    web = dashboard("--read-only")
    for path in ("/", "/running", "/queues/thumbnails?status=failed",
                 "/queues/thumbnails?status=pending", f"/tasks/{failed.task_id}",
                 f"/tasks/{waiting.task_id}"):
        web.open(path)
        web.one("footer")
        assert not web.find("a.action"), path
        assert "read-only" in web.one("#mode").text
    web.open(f"/confirm/cancel?task={waiting.task_id}")
    assert web.one("h1").text == "403"
    assert Job.load(waiting.task_id).status.hget() == "pending"


def test_a_script_in_the_data_runs_nothing(dashboard, conn):
    from selenium.common.exceptions import NoAlertPresentException

    queue = Queue.named("thumbnails")
    job = queue.enqueue({"image": SCRIPT})
    conn.hset(job.key, "note", '<img src=x onerror="alert(2)">')
    Worker("thumbnails", callback=lambda job, queue: (_ for _ in ()).throw(
        ValueError(SCRIPT)), fork=False, max_loops=1, timeout=0.2).run()
    web = dashboard()
    for path, shown in ((f"/tasks/{job.task_id}", True), ("/errors", True),
                        ("/queues/thumbnails?status=failed", False)):
        page = web.open(path)
        web.one("footer")
        with pytest.raises(NoAlertPresentException):
            page.switch_to.alert.text  # noqa: B018 - reading it is the check
        assert (SCRIPT in page.find_element("tag name", "main").text) is shown
        sources = [element.get_attribute("src") for element in web.find("script")]
        assert sources == [web.base + "/static/dashboard.js"]
        assert not web.find("main img")


def test_a_queue_page_pages_through_its_tasks(dashboard):
    queue = Queue.named("emails")
    jobs = queue.enqueue_many([{"to": f"user{n}@example.com"} for n in range(60)])
    web = dashboard()
    web.open("/queues/emails?status=pending")
    assert web.one("#total").text == "60"
    ids = [row.get_attribute("data-task") for row in web.find("#tasks tbody tr")]
    assert ids == [job.task_id for job in jobs[:50]]
    shot(web.browser, "queue")
    web.one("#next").click()
    wait_for(lambda: "page=2" in web.browser.current_url)
    ids = [row.get_attribute("data-task") for row in web.find("#tasks tbody tr")]
    assert ids == [job.task_id for job in jobs[50:]]


def converting(job, queue):
    """Converts a document page by page: tells its progress, checkpoints, then fails."""
    job.set_progress(120, 400, "page 120 of 400")
    job.checkpoint({"next_page": 121})
    raise OSError(f"page 121 of {job.task_id[:8]}.pdf: unreadable image")


def test_a_task_page_shows_progress_checkpoint_and_traceback(dashboard):
    job = Queue.named("reports").enqueue({"document": "annual-report.pdf"})
    Worker("reports", callback=converting, fork=False, max_loops=1, timeout=0.2).run()
    web = dashboard()
    page = web.open(f"/tasks/{job.task_id}")
    assert web.one("#task-status").text == "failed"
    cards = page.find_element("css selector", ".cards").text
    assert "120 of 400: page 120 of 400" in cards
    assert "saved in attempt 1" in cards and "attempt 1" in cards
    error = web.one("details.error")
    assert "OSError" in error.text and "unreadable image" in error.text
    assert "Traceback (most recent call last)" in web.one("pre.traceback").text
    assert [element.text for element in web.find(".actions a.action")] == ["requeue", "delete"]
    shot(web.browser, "task")


def confirm_with(web, selector, button, keep, token=None):
    """Click the action link `selector`, check its confirmation's two buttons, confirm."""
    web.click(selector)
    assert web.one("#confirm").text == button
    assert web.one("#back").text == keep
    confirm(web, token)


def test_pause_and_resume_a_queue_from_its_page(dashboard, conn):
    queue = Queue.named("thumbnails")
    queue.enqueue_many([{"image": f"{n}.jpg"} for n in range(2)])
    web = dashboard()
    web.open("/queues/thumbnails?status=pending")
    assert not web.find("#paused")
    confirm_with(web, 'a.action[href^="/confirm/pause"]', "Pause queue", "Keep it running",
                 TOKEN)
    assert "queue thumbnails paused" in web.one("p.flash.done").text
    assert web.one("#paused").text == "paused"
    assert queue.is_paused()
    queue.enqueue({"image": "late.jpg"})  # enqueueing still works
    web.open("/")
    assert "paused" in web.one('tr[data-queue="thumbnails"] td').text
    web.open("/queues/thumbnails?status=pending")
    assert web.one("#total").text == "3"
    confirm_with(web, 'a.action[href^="/confirm/resume"]', "Resume queue", "Keep it paused")
    assert "resumed" in web.one("p.flash.done").text
    assert not web.find("#paused") and not queue.is_paused()


def test_the_workers_page_shows_figures_and_quiets_then_stops_a_worker(dashboard, workers):
    process = workers.start("--queues=reports", "--concurrency=2")
    web = dashboard()

    def row(state):
        web.open("/workers")
        rows = web.find("#workers tbody tr[data-worker]")
        return rows and rows[0].find_element("css selector", "td.state").get_attribute(
            "data-state") == state and rows[0].get_attribute("data-worker")
    worker = wait_for(lambda: row("waiting"), timeout=20)
    assert web.one("td.concurrency").text == "2"
    assert web.one("td.running-count").text == "0"
    assert float(web.one("td.load").text) >= 0
    shot(web.browser, "workers")
    confirm_with(web, f'tr[data-worker="{worker}"] a.action[href^="/confirm/quiet"]',
                 "Quiet worker", "Keep it working", TOKEN)
    assert f"worker {worker} told to take no new task" in web.one("p.flash.done").text
    wait_for(lambda: row("quiet"), timeout=10)
    confirm_with(web, f'tr[data-worker="{worker}"] a.action[href^="/confirm/stop"]',
                 "Stop worker", "Keep it running")
    assert f"worker {worker} told to stop" in web.one("p.flash.done").text
    assert process.wait(20) == 0
    wait_for(lambda: not web.open("/workers") or not web.find("#workers tr[data-worker]"),
             timeout=20)


def test_the_throughput_chart_draws_what_real_steps_counted(dashboard):
    thumbnails, reports = Queue.named("thumbnails"), Queue.named("reports")
    thumbnails.enqueue_many([{"image": f"{n}.jpg"} for n in range(6)])
    Worker("thumbnails", callback=lambda job, queue: None, fork=False, max_loops=4,
           timeout=0.2).run()
    Worker("thumbnails", callback=failing, fork=False, max_loops=2, timeout=0.2).run()
    reports.enqueue_many([{"report": "daily"} for _ in range(3)])
    Worker("reports", callback=lambda job, queue: None, fork=False, max_loops=2,
           timeout=0.2).run()
    assert reports.enqueue({"report": "weekly"}).cancel()
    web = dashboard()
    web.browser.get_log("browser")  # what earlier tests' pages logged: read, left out
    web.open("/chart")

    def totals(queue):
        lines = web.find(f'section.chart[data-queue="{queue}"] polyline.series')
        return {line.get_attribute("data-status"): int(line.get_attribute("data-total"))
                for line in lines}
    assert totals("thumbnails") == {"complete": 4, "failed": 2, "canceled": 0}
    assert totals("reports") == {"complete": 2, "failed": 0, "canceled": 1}
    legend = web.one('section.chart[data-queue="thumbnails"] .legend').text
    assert "processed (complete): 4" in legend and "failed: 2" in legend
    ticks = [tick.text for tick in web.find('section.chart[data-queue="reports"] text.tick.x')]
    assert len(ticks) == 6 and all(tick.endswith(":00") for tick in ticks)  # each hour of 6
    size = web.one('section.chart[data-queue="reports"] svg').size
    assert size["width"] > 800 and size["height"] > 150  # drawn, not collapsed
    shot(web.browser, "chart")
    from selenium.webdriver.support.ui import Select

    Select(web.one("#hours")).select_by_value("24")
    web.one("#show").click()
    wait_for(lambda: "hours=24" in web.browser.current_url)
    assert totals("thumbnails") == {"complete": 4, "failed": 2, "canceled": 0}
    errors = [entry for entry in web.browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert not errors, errors


def test_searching_a_queue_by_parameter_identifier_and_id(dashboard):
    queue = Queue.named("thumbnails")
    jobs = queue.enqueue_many([{"image": f"{n}.jpg", "size": 64 * n} for n in range(12)])
    Worker("thumbnails", callback=failing, fork=False, max_loops=3, timeout=0.2).run()
    tagged = queue.enqueue({"image": "cover.jpg"}, identifier="cover-2026-11")
    web = dashboard()
    web.open("/queues/thumbnails?status=pending")
    web.one("#queue-search-text").send_keys("size=128")
    web.one("#queue-search button").click()
    wait_for(lambda: "/search?" in web.browser.current_url)
    rows = web.find("#matches tbody tr[data-task]")
    assert [(row.get_attribute("data-task"), row.get_attribute("data-how")) for row in rows] == [
        (jobs[2].task_id, "parameters")]
    assert "failed" in rows[0].text
    assert web.one("#looked-at").text == "13"
    assert "Every task of the queue was looked at" in web.one("#search-bound").text
    assert "1,000 tasks of each list of the queue" in web.one("#search-cost").text
    shot(web.browser, "search")
    search = web.one("#search-text")
    search.clear()
    search.send_keys("cover-2026-11")
    web.one("#search").click()
    wait_for(lambda: "cover-2026-11" in web.browser.current_url)
    assert web.one("#matches tbody tr[data-task]").get_attribute("data-how") == "identifier"
    web.one(f'#matches a[href="/tasks/{tagged.task_id}"]').click()
    assert web.one("#task-id").text == tagged.task_id


def test_a_workflow_page_draws_a_node_per_task_and_each_opens_its_task(dashboard):
    wf = Workflow("nightly report")
    extract = wf.add("reports", {"step": "extract"})
    totals = wf.add("reports", {"step": "totals"}, after=[extract])
    charts = wf.add("thumbnails", {"step": "charts"}, after=[extract])
    mail = wf.add("reports", {"step": "mail"}, after=[totals, charts])
    wf.submit()
    assert take("reports").complete("extracted", listener_id=LISTENER)
    take("reports").set_progress(40, 100, "adding up the regions")
    web = dashboard()
    web.open(f"/workflows/{wf.workflow_id}")
    web.one("svg#graph a.node")
    drawn = {node.get_attribute("data-task"): node.get_attribute("data-status")
             for node in web.find("svg#graph a.node")}
    assert drawn == {extract.task_id: "complete", totals.task_id: "reserved",
                     charts.task_id: "pending", mail.task_id: "waiting"}
    assert len(web.find("svg#graph path.edge")) == 4
    assert web.one("#node-count").text == "4"
    assert "40%" in web.one(f'svg#graph a.node[data-task="{totals.task_id}"]').text
    shot(web.browser, "workflow")
    web.click(f'svg#graph a.node[data-task="{charts.task_id}"]')
    wait_for(lambda: web.find("#task-id"))
    assert web.one("#task-id").text == charts.task_id
    assert [item.get_attribute("data-task") for item in web.find("#parents li")] == [
        extract.task_id]
    assert [item.get_attribute("data-task") for item in web.find("#children li")] == [
        mail.task_id]
    web.click("a#workflow")
    wait_for(lambda: web.find("svg#graph"))
    assert len(web.find("svg#graph a.node")) == 4


def test_each_page_is_saved_as_a_picture(request):
    """Run last (in file order): every page has had its picture saved by this run."""
    if missing_browser():
        pytest.skip(missing_browser())
    module = request.node.module
    tests = {name for name in dir(module) if name.startswith("test_")}
    if not tests <= {item.name.split("[")[0] for item in request.session.items}:
        pytest.skip("only some of the browser tests ran: some pages may have no picture")
    assert set(PAGES) <= SAVED, sorted(set(PAGES) - SAVED)
