"""`blueque limits` and `blueque limit` on a real Redis: a table or JSON of each queue's
limits with running and waiting tasks, busiest first; set, change and remove a limit; bad
values refused in one line, nothing written."""

from __future__ import annotations

import json
import subprocess

import pytest
from helpers import LISTENER, script
from helpers import take as reserve

from limpyd_blueque import ConfigurationError, Limit, Queue

ADMIN = script("blueque", "limpyd_blueque.admin")


def blueque(redis_url, *args):
    return subprocess.run([*ADMIN, f"--redis-url={redis_url}", *args], capture_output=True,
                          text=True, timeout=30, stdin=subprocess.DEVNULL)


def test_limit_sets_changes_and_removes_a_limit(redis_url, database):
    queue = Queue.named("exports")
    queue.enqueue("x")
    result = blueque(redis_url, "limit", "exports", "customer:42", "--max-running", "2",
                     "--weight", "3")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("set: customer:42 in exports: max_running=2, weight=3")
    assert queue.limits()["customer:42"] == Limit("customer:42", max_running=2, weight=3.0)
    result = blueque(redis_url, "limit", "exports", "queue", "--max-starts", "10",
                     "--per", "60", "--json")
    assert result.returncode == 0, result.stderr
    assert '"group": null' in result.stdout and '"changed": true' in result.stdout
    assert queue.limits()[None].max_starts == 10
    result = blueque(redis_url, "limit", "exports", "customer:42", "--remove")
    assert result.stdout.strip() == "removed: the limit of customer:42 in exports"
    assert "customer:42" not in queue.limits()


def test_limits_lists_the_busiest_groups_first(redis_url, database):
    queue = Queue.named("exports")
    queue.set_limit("*", max_running=5)
    queue.set_limit("quiet", max_running=1)
    queue.set_limit("busy", max_running=3)
    queue.enqueue_many(list(range(4)), group="busy")
    queue.enqueue("q", group="quiet")
    reserve("exports", LISTENER)
    reserve("exports", LISTENER)
    result = blueque(redis_url, "limits", "--json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)["exports"]
    assert [row["group"] for row in rows] == ["busy", "quiet", "*"]
    assert rows[0]["running"] == 1 and rows[0]["waiting"] == 3
    table = blueque(redis_url, "limits", "exports")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].startswith("Limits across all workers")
    assert [line.split()[1] for line in lines[3:6]] == ["busy", "quiet", "*"]


def test_limits_shows_each_group_under_the_default_on_its_row(redis_url, database):
    queue = Queue.named("exports")
    queue.set_limit("*", max_running=2)
    queue.enqueue_many(list(range(3)), group="big")
    queue.enqueue("s", group="small")
    reserve("exports", LISTENER)
    lines = blueque(redis_url, "limits", "exports").stdout.splitlines()
    rows = [line.split() for line in lines[3:6]]
    assert [row[1:3] for row in rows] == [["*", "2"], ["big", "(the"], ["small", "(the"]]
    assert rows[1][-2:] == ["1", "2"] and rows[2][-2:] == ["0", "1"]  # running, waiting
    # the JSON holds the limits only: the default's, counting its groups together
    stored = json.loads(blueque(redis_url, "limits", "exports", "--json").stdout)["exports"]
    assert [(row["group"], row["running"], row["waiting"]) for row in stored] == [("*", 1, 3)]


def test_bad_limits_are_refused_in_one_line_with_nothing_written(redis_url, database, conn):
    Queue.named("exports").enqueue("x")
    before = conn.keys("*")
    for args in (["--max-starts", "3"], ["--max-running", "-1"], [],
                 ["--weight", "2", "--max-running", "1"]):
        group = "queue" if "--weight" in args else "g"
        result = blueque(redis_url, "limit", "exports", group, *args)
        assert result.returncode != 0
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert "Traceback" not in result.stderr
    assert sorted(conn.keys("*")) == sorted(before)
    unknown = blueque(redis_url, "limit", "nosuchqueue", "g", "--max-running", "1")
    assert unknown.returncode == 1 and "nosuchqueue" in unknown.stderr


def test_a_new_queue_is_given_a_limit_ahead_of_its_tasks_and_then_listed(redis_url, database):
    refused = blueque(redis_url, "limit", "fresh", "*", "--max-running", "2")
    assert refused.returncode == 1 and "--new-queue" in refused.stderr
    result = blueque(redis_url, "limit", "fresh", "*", "--max-running", "2", "--new-queue")
    assert result.returncode == 0, result.stderr
    assert Queue.named("fresh").limits()["*"].max_running == 2
    listed = json.loads(blueque(redis_url, "limits", "--json").stdout)
    assert [row["group"] for row in listed["fresh"]] == ["*"]
    Queue.named("python-side").set_limit(None, max_running=1)  # known once it has a limit
    assert blueque(redis_url, "limits", "python-side").returncode == 0


def test_remove_takes_no_limit_setting_and_queue_is_no_group_name(redis_url, database, conn):
    queue = Queue.named("exports")
    queue.set_limit("g", max_running=1)
    result = blueque(redis_url, "limit", "exports", "g", "--remove", "--max-running", "3")
    assert result.returncode == 2 and "--max-running" in result.stderr
    assert queue.limits()["g"].max_running == 1  # nothing removed
    with pytest.raises(ConfigurationError, match="reserved"):
        queue.enqueue("x", group="queue")
    with pytest.raises(ConfigurationError, match="reserved"):
        queue.set_limit("queue", max_running=1)
