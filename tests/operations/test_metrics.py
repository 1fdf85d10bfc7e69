"""Prometheus metrics (issue 14): what the scripts count, what a scrape shows (parsed with
`prometheus_client`'s own parser), what a scrape costs, and `blueque metrics` serving
them over HTTP."""

from __future__ import annotations

import re
import socket
import subprocess
import time
import urllib.request

import pytest
from helpers import script, signals_scene, wait_for
from prometheus_client.parser import text_string_to_metric_families

from limpyd_blueque import Job, Queue, Worker
from limpyd_blueque.operations.metrics import registry
from limpyd_blueque.protocol.statistics import DURATION_BOUNDS, read_counters


def scrape_text():
    from prometheus_client import generate_latest

    return generate_latest(registry()).decode()


def samples(text):
    """`{(sample name, frozenset of labels): value}` of an exposition text."""
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def value(parsed, name, **labels):
    return parsed[(name, frozenset(labels.items()))]


def slow(job, queue):
    time.sleep(0.3)


def fail(job, queue):
    raise ValueError("no")


def run_tasks(name, complete, failed):
    """`complete` tasks of queue `name` run to completion (0.3 s each), then `failed`
    that fail, by in-process workers."""
    queue = Queue.named(name)
    for callback, count in ((slow, complete), (fail, failed)):
        for _ in range(count):
            queue.enqueue({})
        Worker(name, callback=callback, fork=False, max_loops=count, timeout=0.2).run()
    return queue


def test_finished_tasks_and_run_times_are_counted_per_queue(conn):
    run_tasks("m", complete=3, failed=1)
    parsed = samples(scrape_text())
    assert value(parsed, "blueque_tasks_completed_total", queue="m") == 3
    assert value(parsed, "blueque_tasks_failed_total", queue="m") == 1
    assert value(parsed, "blueque_tasks", queue="m", status="complete") == 3
    assert value(parsed, "blueque_tasks", queue="m", status="failed") == 1
    # four runs, three of them 0.3 s or more: in the buckets from 1 s up, none under 0.1 s
    assert value(parsed, "blueque_task_run_seconds_count", queue="m") == 4
    assert value(parsed, "blueque_task_run_seconds_bucket", queue="m", le="+Inf") == 4
    assert value(parsed, "blueque_task_run_seconds_bucket", queue="m", le="1") == 4
    assert value(parsed, "blueque_task_run_seconds_bucket", queue="m", le="0.1") <= 1
    assert 0.9 <= value(parsed, "blueque_task_run_seconds_sum", queue="m") < 5
    assert value(parsed, "blueque_task_wait_seconds_count", queue="m") == 4
    buckets = [sample for sample in parsed if sample[0] == "blueque_task_wait_seconds_bucket"]
    assert len(buckets) == len(DURATION_BOUNDS) + 1  # every bound, even an empty one


def test_a_wait_is_timed_from_the_last_move_into_line(conn):
    queue = Queue.named("w")
    job = queue.enqueue({})
    conn.hset(job.key, "updated", time.time() - 120)  # in line for two minutes
    Worker("w", callback=lambda job, queue: None, fork=False, max_loops=1, timeout=0.2).run()
    histogram = read_counters(conn, Job.keys(), ["w"])["w"].durations["wait"]
    assert histogram.count == 1
    assert 119 < histogram.total < 130
    cumulative = dict(histogram.buckets)
    assert (cumulative[60], cumulative[300]) == (0, 1)


def test_cancels_and_recoveries_are_counted_once(conn):
    queue = Queue.named("c")
    waiting = queue.enqueue({})
    waiting.cancel()
    held = queue.enqueue({})
    scripts = Queue.scripts()
    reservation, _ = scripts.reserve(["c"], "gone-host_1", time.time())
    assert reservation.task_id == held.task_id
    counts = scripts.upkeep.recover([("c", held.task_id, None, None)], time.time(),
                                    expired_only=False, max_attempts=None, why="test",
                                    process_gone=True)
    assert counts == {held.task_id: "pending"}
    parsed = samples(scrape_text())
    assert value(parsed, "blueque_tasks_canceled_total", queue="c") == 1
    assert value(parsed, "blueque_tasks_recovered_total", queue="c") == 1
    assert value(parsed, "blueque_tasks", queue="c", status="pending") == 1


def test_gauges_show_waiting_age_running_tasks_and_live_workers(conn):
    queue = Queue.named("g")
    old = queue.enqueue({})
    conn.hset(old.key, "created", time.time() - 600)
    queue.enqueue({})
    Queue.scripts().reserve(["g"], "host_1", time.time())
    parsed = samples(scrape_text())
    assert value(parsed, "blueque_running_tasks", queue="g") == 1
    assert value(parsed, "blueque_tasks", queue="g", status="pending") == 1
    assert value(parsed, "blueque_live_workers") == 0
    empty = Queue.named("empty")
    empty.enqueue({}).delete()
    parsed = samples(scrape_text())
    # nothing waits: no age at all (a 0 would read as "a task waits, just enqueued")
    assert ("blueque_oldest_waiting_age_seconds", frozenset({("queue", "empty")})) not in parsed
    assert value(parsed, "blueque_oldest_waiting_age_seconds", queue="g") >= 0


def test_one_outcome_counter_a_pause_gauge_and_redis_up(conn):
    queue = run_tasks("o", complete=2, failed=1)
    queue.enqueue({}).cancel()
    Queue.named("p").enqueue({})
    Queue.named("p").pause()
    parsed = samples(scrape_text())
    assert value(parsed, "blueque_redis_up") == 1
    assert {outcome: value(parsed, "blueque_tasks_finished_total", queue="o", outcome=outcome)
            for outcome in ("complete", "failed", "canceled", "expired")} == {
        "complete": 2, "failed": 1, "canceled": 1, "expired": 0}
    assert value(parsed, "blueque_queue_paused", queue="p") == 1
    assert value(parsed, "blueque_queue_paused", queue="o") == 0


def test_a_scrape_with_redis_gone_says_so_in_redis_up(tmp_path):
    """`blueque metrics` keeps answering while its Redis is away: `blueque_redis_up 0`
    and no other metric (no figure that would read as zero tasks)."""
    port, metrics_port = free_port(), free_port()
    server = subprocess.Popen(["redis-server", "--port", str(port), "--save", "",
                               "--appendonly", "no", "--dir", str(tmp_path)],
                              stdout=subprocess.DEVNULL)
    process = None
    try:
        url = f"redis://127.0.0.1:{port}/0"
        wait_for(lambda: subprocess.run(["redis-cli", "-p", str(port), "ping"],
                                        capture_output=True).returncode == 0, timeout=10)
        process = subprocess.Popen([*script("blueque", "limpyd_blueque.admin"),
                                    f"--redis-url={url}", "metrics", f"--port={metrics_port}"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        def scraped():
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics",
                                            timeout=5) as page:
                    return samples(page.read().decode())
            except OSError:
                return None
        assert value(wait_for(scraped, timeout=20), "blueque_redis_up") == 1
        server.terminate()
        server.wait(10)
        parsed = wait_for(scraped, timeout=20)
        assert parsed == {("blueque_redis_up", frozenset()): 0}
    finally:
        if process is not None:
            process.terminate()
            process.wait(10)
        if server.poll() is None:
            server.kill()


def test_a_scrape_costs_the_same_for_one_task_as_for_two_thousand(conn, count_commands):
    Queue.named("a").enqueue({})
    Queue.named("b").enqueue({})
    scrape_text()  # scripts loaded, connections made
    with count_commands() as few:
        scrape_text()
    Queue.named("a").enqueue_many([{} for _ in range(2000)])
    with count_commands() as many:
        scrape_text()
    assert many.count == few.count
    # at most 22 per queue (one per structure of a status, its waiting set included, and
    # its own limit), then the workers and the clock
    assert few.count <= 2 * 22 + 1


def test_counters_of_another_type_or_with_junk_read_as_zero(conn):
    Queue.named("h").enqueue({})
    conn.hset("blueque:stats:h", mapping={"finished.complete": "lots", "run.le.1": "-5",
                                          "run.sum_us": "nan", "recovered": "9" * 40})
    Queue.named("i").enqueue({})
    conn.delete("blueque:stats:i")
    conn.set("blueque:stats:i", "not a hash")
    parsed = samples(scrape_text())
    assert value(parsed, "blueque_tasks_completed_total", queue="h") == 0
    assert value(parsed, "blueque_tasks_recovered_total", queue="h") == 0
    assert value(parsed, "blueque_task_run_seconds_sum", queue="h") == 0
    assert value(parsed, "blueque_task_run_seconds_count", queue="h") == 0
    assert value(parsed, "blueque_tasks", queue="i", status="pending") == 1


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_blueque_metrics_serves_the_exposition_over_http(redis_url, conn):
    Queue.named("served").enqueue({})
    port = free_port()
    process = subprocess.Popen([*script("blueque", "limpyd_blueque.admin"),
                                f"--redis-url={redis_url}", "metrics", f"--port={port}"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def scraped():
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as page:
                    return page.read().decode(), page.headers["Content-Type"]
            except OSError:
                return None
        text, kind = wait_for(scraped, timeout=20)
        assert kind.startswith("text/plain")
        assert value(samples(text), "blueque_tasks", queue="served", status="pending") == 1
        # only the queue's metrics: none of the serving process
        assert not [name for name, _ in samples(text) if name.startswith(("process_", "python_"))]
    finally:
        process.terminate()
        process.wait(10)


def test_blueque_metrics_on_a_port_in_use_says_so(redis_url):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run([*script("blueque", "limpyd_blueque.admin"),
                                 f"--redis-url={redis_url}", "metrics", f"--port={port}"],
                                capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("port", ["0", "70000", "http"])
def test_blueque_metrics_refuses_a_port_that_is_not_one(redis_url, port):
    result = subprocess.run([*script("blueque", "limpyd_blueque.admin"),
                             f"--redis-url={redis_url}", "metrics", f"--port={port}"],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 2
    assert f"invalid port {port!r}" in result.stderr


def test_every_metric_the_docs_name_is_served(conn):
    from pathlib import Path

    Queue.named("docs").enqueue({})
    served = {family.name for family in text_string_to_metric_families(scrape_text())}
    served |= {f"{name}_total" for name in served}  # counters' samples end in _total
    page = (Path(__file__).parents[2] / "docs" / "dashboard.rst").read_text()
    named = set(re.findall(r"\b(blueque_[a-z_]+)", page))
    assert {"blueque_tasks", "blueque_stalled_tasks", "blueque_tasks_failed_total"} <= named
    assert named <= served, named - served


def test_tasks_held_back_by_a_limit_are_a_gauge_per_queue(conn):
    queue = Queue.named("held")
    queue.set_limit("a", max_running=1)
    queue.enqueue_many(list(range(3)), group="a")
    queue.enqueue("b", group="b")
    assert Queue.reserve_from(["held"], "host_1")[0] is not None  # a runs
    assert Queue.reserve_from(["held"], "host_1")[0] is not None  # b's turn
    assert Queue.reserve_from(["held"], "host_1")[0] is None  # a is held back
    parsed = samples(scrape_text())
    assert value(parsed, "blueque_tasks_held_back", queue="held") == 2


def test_tasks_waiting_running_and_held_back_are_gauges_per_queue(conn):
    waiting, running, held_back = signals_scene("sig")
    Queue.named("idle").enqueue({}).delete()
    parsed = samples(scrape_text())
    assert [value(parsed, name, queue="sig") for name in (
        "blueque_waiting_tasks", "blueque_running_tasks", "blueque_tasks_held_back")] == [
        waiting, running, held_back]
    assert value(parsed, "blueque_tasks", queue="sig", status="pending") == waiting + held_back
    assert [value(parsed, name, queue="idle") for name in (
        "blueque_waiting_tasks", "blueque_running_tasks", "blueque_tasks_held_back")] == [0, 0, 0]


def test_tasks_held_back_by_their_queues_own_limit_count_as_held_back_not_waiting(conn):
    running = Queue.named("whole")
    running.set_limit(None, max_running=1)
    running.enqueue_many([1, 2, 3, 4])
    assert Queue.reserve_from(["whole"], "host_1")[0] is not None
    assert Queue.reserve_from(["whole"], "host_1")[0] is None  # the queue is full
    started = Queue.named("window")
    started.set_limit(None, max_starts=1, per=60)
    started.enqueue_many([1, 2], group="g")
    assert Queue.reserve_from(["window"], "host_1")[0] is not None
    parsed = samples(scrape_text())
    assert [value(parsed, name, queue="whole") for name in (
        "blueque_waiting_tasks", "blueque_running_tasks", "blueque_tasks_held_back")] == [
        0, 1, 3]
    assert [value(parsed, name, queue="window") for name in (
        "blueque_waiting_tasks", "blueque_tasks_held_back")] == [0, 1]
    running.remove_limit(None)
    parsed = samples(scrape_text())
    assert [value(parsed, name, queue="whole") for name in (
        "blueque_waiting_tasks", "blueque_tasks_held_back")] == [3, 0]
