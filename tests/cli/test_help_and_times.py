"""The command line by everyday use (issue 29, item 6): `blueque --help` grouped (seeing,
acting, maintenance), `stats` and `statistics` told apart, times readable in ISO 8601 with
their age (`inspect`, `tasks`, the dashboard), the previous attempt's error named as such,
action tables titled by what happened, `blueque web` ready only once it listens, and
`blueque-worker --print-options` printed before Redis is contacted. Real processes on the
tests' Redis."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
from helpers import TESTS, script
from jobs import RecordingJob

from limpyd_blueque import Queue, Worker
from limpyd_blueque.connection.embedded import free_port

pytestmark = pytest.mark.timeout(120)

ADMIN = script("blueque", "limpyd_blueque.admin")
#: a moment as the tables show it: ISO 8601 UTC to the second, then its age
WHEN = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \((?:now|[\dmhd.s]+ ago|in [\dmhd.s]+)\)"


def blueque(redis_url, *args, **popen):
    return subprocess.run([*ADMIN, f"--redis-url={redis_url}", *args], capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL, **popen)


def blueques(redis_url, *commands):
    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(lambda args: blueque(redis_url, *args), commands))


# -- help ------------------------------------------------------------------------------------
def test_help_lists_subcommands_by_everyday_use(redis_url):
    result = blueque(redis_url, "--help", env={**os.environ, "COLUMNS": "120"})
    assert result.returncode == 0, result.stderr
    out = result.stdout
    headings = [line for line in out.splitlines() if re.match(r"^\S.*:$", line)
                and line.split(" ")[0] in ("seeing", "acting", "maintenance", "serving")]
    assert [heading.split(" (")[0] for heading in headings] == [
        "seeing", "serving pages", "acting", "maintenance"]
    listed = re.findall(r"^  ([a-z]+) {2,}\S", out, re.M)
    assert listed[:7] == ["stats", "tasks", "inspect", "workflow", "errors", "workers",
                          "watch"]
    assert sorted(listed) == sorted(["stats", "tasks", "inspect", "workflow", "errors",
                                     "workers", "watch",
                                     "statistics", "peek", "periodic", "cancel", "requeue",
                                     "delete", "kick", "pause", "resume", "purge", "truncate",
                                     "drop", "clean", "reindex", "reencrypt", "web", "metrics",
                                     "limits",
                                     "limit"])
    assert listed.index("cancel") > listed.index("periodic")
    assert listed.index("clean") > listed.index("resume") > listed.index("pause")
    assert out.index("seeing") < out.index("positional arguments")  # commands first
    stats = re.search(r"^  stats +(.*?)(?=^  \S)", out, re.M | re.S).group(1)
    statistics = re.search(r"^  statistics +(.*?)(?=^  \S)", out, re.M | re.S).group(1)
    assert "for people" in stats and "'statistics'" in stats
    assert "for scripts" in statistics and "'stats'" in statistics


def test_a_subcommand_help_says_what_it_does(redis_url):
    stats, statistics = blueques(redis_url, ["stats", "--help"], ["statistics", "--help"])
    assert "as tables for people" in " ".join(stats.stdout.split())
    assert "for scripts" in " ".join(statistics.stdout.split())


# -- times and errors ------------------------------------------------------------------------
@pytest.fixture
def retried(database, conn):
    """A task of queue `times` that failed once and waits for its retry (scheduled), one
    failed for good, and one pending."""
    queue = Queue.named("times")
    waiting = queue.enqueue({"fail": "first try"})
    Worker("times", job_model=RecordingJob, fork=False, max_loops=1, timeout=0.2,
           requeue_times=1).run()
    failed = queue.enqueue({"fail": "for good"})
    Worker("times", job_model=RecordingJob, fork=False, max_loops=1, timeout=0.2,
           requeue_times=0).run()
    pending = queue.enqueue("later")
    assert (waiting.status.hget(), failed.status.hget()) == ("scheduled", "failed")
    return {"retried": waiting, "failed": failed, "pending": pending}


def fields_of(table):
    """The rows of the `fields` table of `blueque inspect`: {label: value}."""
    lines = table.split("\n\n")[1].splitlines()[3:]
    return dict(re.split(r" {2,}", line, maxsplit=1) for line in lines)


def test_inspect_shows_times_in_iso_with_their_age_and_the_previous_error(redis_url, retried):
    retried_id, failed_id = retried["retried"].task_id, retried["failed"].task_id
    table, as_json, failed = blueques(redis_url, ["inspect", retried_id],
                                      ["inspect", retried_id, "--json"], ["inspect", failed_id])
    assert table.returncode == 0, table.stderr
    fields = fields_of(table.stdout)
    for name in ("created", "updated", "started_at"):
        assert re.fullmatch(WHEN, fields[name]) and "ago" in fields[name], fields[name]
    assert re.fullmatch(WHEN, fields["eta"]) and "(in " in fields["eta"]  # its retry
    assert fields["previous error (attempt 1)"] == "ValueError: first try"
    assert "error" not in fields
    assert not re.search(r"\b1\d{9}\.\d+\b", table.stdout)  # no epoch number left
    record = json.loads(as_json.stdout)  # the JSON keeps the hash as it is
    assert float(record["fields"]["created"]) > 1e9
    assert record["fields"]["error"] == "ValueError: first try"
    assert fields_of(failed.stdout)["error"] == "ValueError: for good"  # its own outcome


def test_tasks_show_when_each_was_created_with_its_age(redis_url, retried):
    table, as_json = blueques(redis_url, ["tasks", "--queue", "times"],
                              ["tasks", "--queue", "times", "--json"])
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[1].split() == ["id", "status", "queue", "created", "attempt", "progress"]
    rows = {line.split()[0]: line for line in lines[3:] if line.strip()}
    pending = rows[retried["pending"].task_id]
    assert re.search(rf"pending +times +{WHEN} +0", pending), pending
    listing = json.loads(as_json.stdout)  # unchanged: ISO times, age in seconds
    row = next(row for row in listing["tasks"] if row["id"] == retried["pending"].task_id)
    assert row["created"].endswith("+00:00") and isinstance(row["age"], float)


def test_the_dashboard_shows_times_in_iso_and_the_previous_error(conn, retried):
    pytest.importorskip("flask")
    from limpyd_blueque.operations.web import WebSettings, create_app

    client = create_app(WebSettings()).test_client()
    body = client.get(f"/tasks/{retried['retried'].task_id}").get_data(as_text=True)
    fields = dict(re.findall(r"<tr><th>([^<]+)</th><td><pre>([^<]*)</pre></td></tr>", body))
    assert re.fullmatch(WHEN, fields["created"]), fields["created"]
    assert fields["previous error (attempt 1)"] == "ValueError: first try"
    assert "error" not in fields
    listing = client.get("/queues/times?status=pending").get_data(as_text=True)
    row = re.search(rf'<tr data-task="{retried["pending"].task_id}">(.*?)</tr>', listing,
                    re.S).group(1)
    assert re.search(r"<td>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ</td>", row), row


def test_an_action_table_is_titled_by_what_happened(redis_url, retried):
    missing, mixed = blueques(redis_url, ["cancel", "nosuchtask"],
                              ["cancel", retried["pending"].task_id, retried["failed"].task_id,
                               "nosuchtask"])
    assert missing.returncode == 1
    assert missing.stdout.splitlines()[0] == "cancel: 1 not found"
    assert "not canceled: no task with id 'nosuchtask'" in missing.stderr
    assert mixed.stdout.splitlines()[0] == "cancel: 1 canceled, 1 already finished, 1 not found"
    requeued = blueque(redis_url, "requeue", retried["failed"].task_id)
    assert requeued.stdout.splitlines()[0] == "requeue: 1 requeued"


# -- blueque web and --print-options -----------------------------------------------------------
def test_web_says_ready_only_once_it_listens(redis_url, database):
    pytest.importorskip("flask")
    pytest.importorskip("waitress")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        busy = blueque(redis_url, "web", f"--port={taken.getsockname()[1]}")
    assert busy.returncode == 2
    assert len(busy.stderr.strip().splitlines()) == 1, busy.stderr
    assert "cannot listen on 127.0.0.1:" in busy.stderr and "in use" in busy.stderr
    assert "blueque web: http" not in busy.stderr and "Traceback" not in busy.stderr
    port = free_port()
    web = subprocess.Popen([*ADMIN, f"--redis-url={redis_url}", "web", f"--port={port}"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert web.stderr.readline().startswith(f"blueque web: http://127.0.0.1:{port}/ ")
        with socket.create_connection(("127.0.0.1", port), timeout=5):  # listening already
            pass
    finally:
        web.terminate()
        web.wait(timeout=10)


def test_print_options_are_printed_before_redis_is_contacted(redis_url):
    unreachable = f"redis://:secret@127.0.0.1:{free_port()}/0"
    with ThreadPoolExecutor(max_workers=2) as pool:
        alone, dry = pool.map(lambda options: subprocess.run(
            [sys.executable, "-m", "limpyd_blueque.cli", "--queues=q", f"--pythonpath={TESTS}",
             "--callback=jobs.callback", f"--redis-url={unreachable}", "--print-options",
             *options], capture_output=True, text=True, timeout=60), [(), ("--dry-run",)])
    for result in (alone, dry):
        options = dict(line.split("=", 1) for line in result.stdout.splitlines())
        assert options["queues"] == "['q']" and options["callback"].startswith("<function")
        assert options["redis_url"] == unreachable.replace("secret", "***")
        # then the worker (or the dry run) needs Redis, as without --print-options
        assert result.returncode == 1
        assert len(result.stderr.strip().splitlines()) == 1
        assert result.stderr.startswith("blueque-worker: error: cannot reach Redis at ")
        assert "secret" not in result.stdout + result.stderr
