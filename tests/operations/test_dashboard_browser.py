"""The web dashboard in a real browser (issue 14): `blueque web` served by waitress on a
free port, real `blueque-worker` processes, and headless Chromium driven by Selenium
through Debian's `chromium` and `chromedriver` (nothing downloaded at run time).

Run with `python3 -m pytest -m browser`. Without a browser the tests are skipped, unless
`BLUEQUE_BROWSER_REQUIRED=1` (as CI sets it) makes that a failure. Each main page is saved
as a PNG in `.cache/screenshots/` (the run's artifacts), and also in
`$BLUEQUE_SCREENSHOTS` when set:
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
from helpers import script, wait_for

from limpyd_blueque import Job, Queue, Worker

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


#: where each run saves its screenshots, as artifacts of the run (git ignores .cache/)
ARTIFACTS = Path(__file__).resolve().parents[2] / ".cache" / "screenshots"


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
            browser.save_screenshot(str(folder / f"{name}.png"))
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
    web = dashboard()
    web.open("/")
    assert cell(web, "thumbnails", "pending") == "3"
    assert cell(web, "thumbnails", "failed") == "1"
    assert cell(web, "reports", "scheduled") == "2"
    assert cell(web, "emails", "pending") == "1"
    shot(web.browser, "overview")


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
    shot(web.browser, "workers")
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
