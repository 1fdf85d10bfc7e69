"""Bad input through the API, as an attacker or a clumsy caller gives it: each is refused
with an exception of our tree that names the bad value, and Redis is left unchanged."""

from __future__ import annotations

import logging
import time
from datetime import datetime, timedelta, timezone

import pytest
import redis
from helpers import fill_until_full

from limpyd_blueque import (
    BluequeDatabase,
    BluequeModel,
    Client,
    ConfigurationError,
    InvalidName,
    InvalidParameters,
    Queue,
    TaskExists,
    Worker,
    aio,
    use_redis,
)
from limpyd_blueque.cli.worker_script import WorkerConfig
from limpyd_blueque.connection.embedded import EmbeddedRedis
from limpyd_blueque.exceptions import ParametersTooLarge, PartiallyEnqueued, RedisFull
from limpyd_blueque.protocol.values import check_task_id, encode, printable
from limpyd_blueque.worker.settings import SETTINGS

pytestmark = pytest.mark.timeout(60)

NAN, INF = float("nan"), float("inf")
NUMBERS = [setting for setting in SETTINGS if setting.kind in ("int", "float")]


@pytest.fixture
def queue(database):
    return Queue.named("q")


def nested(depth):
    value = []
    for _ in range(depth):
        value = [value]
    return value


def circular():
    value = []
    value.append(value)
    return value


# -- numbers -------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["ttr", "max_run_time"])
@pytest.mark.parametrize("value", [NAN, INF, -INF, 0, -1, 1e10, "60", True, [60]])
def test_configure_refuses_a_duration_that_is_not_finite_and_above_0(queue, conn, name, value):
    with pytest.raises(ConfigurationError) as error:
        queue.configure(**{name: value})
    assert f"queue setting {name} must be" in str(error.value)
    assert str(error.value).endswith(f"not {value!r}")
    assert conn.keys("*") == []


@pytest.mark.parametrize("value", [NAN, INF, 1.5, 3.0, 0, -2, 2**53, "5", True])
def test_configure_refuses_max_attempts_that_is_not_a_whole_number_above_0(queue, conn, value):
    with pytest.raises(ConfigurationError, match="queue setting max_attempts must be") as error:
        queue.configure(max_attempts=value)
    assert str(error.value).endswith(f"not {value!r}")
    assert conn.keys("*") == []


def test_configure_checks_every_value_before_writing_any(queue, conn):
    with pytest.raises(ConfigurationError, match="max_attempts"):
        queue.configure(ttr=30, max_attempts=NAN)
    assert conn.keys("*") == []
    queue.configure(ttr=30, max_run_time=3600.5, max_attempts=3)
    assert queue.settings() == {"ttr": 30.0, "max_run_time": 3600.5, "max_attempts": 3.0}


@pytest.mark.parametrize("setting", NUMBERS, ids=lambda setting: setting.name)
def test_every_numeric_worker_setting_refuses_a_value_over_its_maximum(setting, capsys):
    over = setting.maximum * 10
    with pytest.raises(ConfigurationError, match=f"^{setting.name} must be at most "):
        Worker(queues="q", **{setting.name: over})
    with pytest.raises(SystemExit) as exit_info:
        WorkerConfig(["--queues=q", f"{setting.option}={over}"])
    assert exit_info.value.code == 2
    assert f"argument {setting.option}: '{over}' must be at most " in capsys.readouterr().err


@pytest.mark.parametrize("eta", [NAN, INF, -INF, 1e300, "tomorrow", True, None, [1]])
def test_schedule_refuses_an_eta_that_is_not_a_moment(queue, conn, eta):
    with pytest.raises(ConfigurationError, match=r"^eta must be") as error:
        queue.schedule("x", eta)
    assert str(error.value).endswith(f"not {eta!r}")
    assert conn.keys("*") == []


def test_schedule_takes_aware_and_naive_datetimes(queue, conn):
    soon = datetime.now(timezone.utc) + timedelta(hours=1)
    aware = queue.schedule("aware", soon)
    naive = queue.schedule("naive", soon.astimezone().replace(tzinfo=None))  # local time
    scores = dict(conn.zrange("blueque_scheduled_tasks_q", 0, -1, withscores=True))
    assert scores[aware.pk.get()] == pytest.approx(soon.timestamp())
    assert scores[naive.pk.get()] == pytest.approx(soon.timestamp(), abs=1e-3)
    past = queue.schedule("past", datetime.now(timezone.utc) - timedelta(days=1))
    assert past.status.hget() == "pending"


@pytest.mark.parametrize("limit", [-1, 1.5, NAN, "3", True, 2**60])
def test_enqueue_due_refuses_a_limit_that_is_not_a_count(queue, conn, limit):
    queue.schedule("x", time.time() + 60)
    before = {key: conn.type(key) for key in conn.keys("*")}
    with pytest.raises(ConfigurationError, match=r"^limit must be") as error:
        queue.enqueue_due(now=time.time() + 120, limit=limit)
    assert str(error.value).endswith(f"not {limit!r}")
    assert {key: conn.type(key) for key in conn.keys("*")} == before
    assert conn.zcard("blueque_scheduled_tasks_q") == 1


@pytest.mark.parametrize("now", [NAN, INF, "now"])
def test_enqueue_due_refuses_a_now_that_is_not_a_moment(queue, conn, now):
    with pytest.raises(ConfigurationError, match=f"^now must be .*not {now!r}"):
        queue.enqueue_due(now=now)


# -- the shape of arguments --------------------------------------------------------------------
@pytest.mark.parametrize("parameters", ["abc", b"abc", {"a": 1, "b": 2}, {1, 2}, 5, None,
                                        (n for n in range(3))],
                         ids=lambda value: "generator" if hasattr(value, "__next__")
                         else repr(value))
def test_enqueue_many_refuses_what_is_not_a_sequence_of_parameters(queue, conn, parameters):
    with pytest.raises(InvalidParameters, match="enqueue_many takes a sequence") as error:
        queue.enqueue_many(parameters)
    assert type(parameters).__name__ in str(error.value)
    assert conn.keys("*") == []


def test_enqueue_many_refuses_an_id_given_twice(queue, conn):
    with pytest.raises(InvalidName, match="task id 'b' is given twice"):
        queue.enqueue_many(["1", "2", "3"], task_ids=["a", "b", "b"])
    assert conn.keys("*") == []


@pytest.mark.parametrize("task_ids", ["ab", b"ab", {"a": 1, "b": 2}, ["a"], ["a", "b", "c"]])
def test_enqueue_many_refuses_ids_that_are_not_one_per_task(queue, conn, task_ids):
    with pytest.raises(InvalidName, match=r"task_ids must be a sequence|id\(s\) for 2 task"):
        queue.enqueue_many(["1", "2"], task_ids=task_ids)
    assert conn.keys("*") == []


BAD_IDS = ["", " ", "a b", "a\nb", "tab\there", "\x1b[31mred", "rtl\u202eevil", "nbsp\u00a0x",
           "lone\ud800", "x" * 201, 5, None, b"bytes", ["a"]]


@pytest.mark.parametrize("task_id", BAD_IDS, ids=repr)
def test_a_task_id_breaking_the_rule_is_refused_everywhere(queue, conn, task_id):
    calls = {"enqueue_many": lambda: queue.enqueue_many(["x"], task_ids=[task_id]),
             "enqueue": lambda: queue.enqueue("x", task_id=task_id),
             "schedule": lambda: queue.schedule("x", time.time() + 60, task_id=task_id),
             "schedule past": lambda: queue.schedule("x", time.time() - 60, task_id=task_id)}
    if task_id is None:  # task_id=None asks for a new id, except in a list of ids
        calls = {"enqueue_many": calls["enqueue_many"]}
    for call in calls.values():
        with pytest.raises(InvalidName, match=r"^invalid task id ") as error:
            call()
        assert repr(task_id)[:80] in str(error.value)
    assert conn.keys("*") == []


@pytest.mark.parametrize("task_id", ["a", "x" * 200, "2026-11-23T10:00:00+01:00", "état/été#1",
                                     "日本語", "a|b:c*d?[e]", "emoji-\U0001f600"])
def test_a_task_id_following_the_rule_is_taken(queue, conn, task_id):
    assert check_task_id(task_id) == task_id
    assert queue.enqueue("x", task_id=task_id).pk.get() == task_id
    assert conn.lrange("blueque_pending_tasks_q", 0, -1) == [task_id]


@pytest.mark.parametrize("chunk", [0, -5, 1.5, NAN, "10"])
def test_enqueue_many_refuses_a_chunk_that_is_not_a_count(queue, conn, chunk):
    with pytest.raises(ConfigurationError, match=f"^chunk must be .*not {chunk!r}"):
        queue.enqueue_many(["a", "b"], chunk=chunk)
    assert conn.keys("*") == []


# -- parameters ------------------------------------------------------------------------------------
@pytest.mark.parametrize("value, problem", [
    (nested(100_000), "nested too deeply"),
    (circular(), "Circular reference"),
    ({"n": 10**5000}, "4300"),  # the wording of the limit differs across Pythons
    ({"x": NAN}, "not JSON compliant"),
    ({(1, 2): "tuple key"}, "keys must be"),
    ("lone \ud800 surrogate", "'\\\\ud800' at index 5"),
    ("escaped \udcff byte", "'\\\\udcff' at index 8"),
], ids=["deep", "circular", "huge-int", "nan", "tuple-key", "surrogate", "escaped-byte"])
def test_parameters_that_cannot_be_stored_are_refused_cleanly(queue, conn, value, problem):
    for call in (lambda: queue.enqueue(value), lambda: queue.enqueue_many(["ok", value]),
                 lambda: queue.schedule(value, time.time() + 60)):
        with pytest.raises(InvalidParameters, match=f"task parameters .*{problem}"):
            call()
    assert conn.keys("*") == []


def test_an_error_text_that_is_not_utf8_is_escaped_not_refused():
    assert encode("boom \udcff", "error") == "boom \\udcff"
    with pytest.raises(InvalidParameters, match="task result must be valid UTF-8"):
        encode("boom \udcff", "result")


# -- failures part-way, and the server's own refusals -------------------------------------------
def test_a_chunk_refused_part_way_reports_the_ids_already_enqueued(queue, conn):
    queue.enqueue("taken", task_id="t5")
    ids = [f"t{n}" for n in range(10)]
    with pytest.raises(PartiallyEnqueued) as error:
        queue.enqueue_many(list(range(10)), task_ids=ids, chunk=5)  # t5 opens the 2nd chunk
    assert error.value.enqueued == ids[:5]
    assert isinstance(error.value.cause, TaskExists)
    assert error.value.__cause__ is error.value.cause
    assert "5 of 10 tasks enqueued, then TaskExists" in str(error.value)
    assert conn.lrange("blueque_pending_tasks_q", 0, -1)[::-1] == ["t5", *ids[:5]]
    assert not any(conn.exists(f"blueque_task_{task_id}") for task_id in ids[6:])


def test_a_failure_in_the_first_chunk_raises_the_error_itself(queue, conn):
    queue.enqueue("taken", task_id="t0")
    with pytest.raises(TaskExists):
        queue.enqueue_many(["a", "b"], task_ids=["t0", "t1"], chunk=1)
    assert conn.llen("blueque_pending_tasks_q") == 1


@pytest.fixture(scope="module")
def private_redis():
    """A redis-server of this module's own, whose memory and limits the tests change."""
    with EmbeddedRedis() as server:
        yield server


@pytest.fixture
def private(private_redis):
    """`(client of the models, raw connection)` on the private server, emptied, with its
    default limits back after the test."""
    raw = redis.Redis.from_url(private_redis.url, decode_responses=True)
    raw.flushall()
    yield Client(private_redis.url), raw
    raw.config_set("maxmemory", 0)
    raw.config_set("proto-max-bulk-len", 512 * 1024 * 1024)
    raw.flushall()


def test_a_full_redis_gets_its_own_error_and_nothing_is_written(private):
    client, raw = private
    fill_until_full(raw, margin=-100_000)
    queue = client.queue_model.named("q")
    before = sorted(raw.keys("*"))
    for call in (lambda: queue.enqueue("x"), lambda: queue.enqueue_many(["a", "b"]),
                 lambda: queue.schedule("x", time.time() + 60), lambda: queue.configure(ttr=5)):
        with pytest.raises(RedisFull, match=r"Redis at redis://127.0.0.1:\d+/0 is full"):
            call()
    assert sorted(raw.keys("*")) == before


def test_redis_full_part_way_through_enqueue_many_reports_what_was_written(private):
    client, raw = private
    fill_until_full(raw, margin=1_000_000)
    queue = client.queue_model.named("q")
    with pytest.raises(PartiallyEnqueued) as error:
        queue.enqueue_many(["p" * 1000] * 5000, chunk=100)
    assert isinstance(error.value.cause, RedisFull)
    enqueued = error.value.enqueued
    assert 0 < len(enqueued) < 5000 and len(enqueued) % 100 == 0  # whole chunks only
    assert raw.lrange("blueque_pending_tasks_q", 0, -1)[::-1] == enqueued
    assert len(raw.keys("blueque_task_*")) == len(enqueued)


def test_parameters_over_the_servers_bulk_limit_are_refused_before_any_write(private):
    client, raw = private
    raw.config_set("proto-max-bulk-len", 1024 * 1024)
    queue = client.queue_model.named("q")
    just_fits = "x" * (1024 * 1024)
    too_big = "é" * (600 * 1024)  # fewer characters than the limit, more bytes
    for call in (lambda: queue.enqueue(too_big), lambda: queue.enqueue_many(["a", too_big]),
                 lambda: queue.schedule(too_big, time.time() + 60)):
        with pytest.raises(ParametersTooLarge, match=r"of 1228800 bytes are over the 1048576"):
            call()
    assert raw.keys("*") == []
    assert queue.enqueue(just_fits).parameters.hget() == just_fits


def test_a_database_index_out_of_range_is_a_configuration_error(redis_url):
    url = redis_url.rsplit("/", 1)[0] + "/99"
    with pytest.raises(ConfigurationError, match="/99 has no such database: DB index is out"):
        BluequeDatabase(url).ping()


# port 1: nothing listens there, so a refusal shows that no connection was tried
NOT_A_DATABASE = [
    ("redis://:{pw}@127.0.0.1:1/abc", "abc"),
    ("redis://:{pw}@127.0.0.1:1/-1", "-1"),
    ("redis://:{pw}@127.0.0.1:1/1.5", "1.5"),
    ("redis://:{pw}@127.0.0.1:1/1/2", "1/2"),  # redis-py reads it as database 12
    ("redis://:{pw}@127.0.0.1:1/+3", "+3"),
    ("rediss://:{pw}@127.0.0.1:1/%20", " "),
    ("redis://:{pw}@127.0.0.1:1/0?db=-1", "-1"),
    ("unix://:{pw}@/tmp/nowhere.sock?db=abc", "abc"),
    ("redis+cluster://:{pw}@127.0.0.1:1/abc", "abc"),
]
ENTRY_POINTS = {"use_redis": use_redis, "BluequeDatabase": BluequeDatabase, "Client": Client,
                "aio.connect": aio.connect}


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
@pytest.mark.parametrize("url, database_text", NOT_A_DATABASE)
def test_a_url_whose_database_is_not_a_whole_number_is_refused_before_connecting(
        entry, url, database_text):
    """redis-py would take database 0 for a path it cannot read (`/abc`), silently."""
    bound = BluequeModel.database
    with pytest.raises(ConfigurationError) as error:
        ENTRY_POINTS[entry](url.format(pw="s3cret-pw"))
    assert str(error.value) == (f"invalid Redis URL {url.format(pw='***')!r}: its database "
                                f"{database_text!r} is not a whole number of 0 or more")
    assert BluequeModel.database is bound


@pytest.mark.parametrize("url", ["redis://127.0.0.1:1", "redis://127.0.0.1:1/",
                                 "redis://127.0.0.1:1/3", "redis://127.0.0.1:1/07/",
                                 "redis://127.0.0.1:1/%33", "redis://127.0.0.1:1/0?db=5",
                                 "unix:///tmp/nowhere.sock?db=2", "rediss://127.0.0.1:1/15"])
def test_a_url_with_no_database_or_a_whole_number_is_taken(url):
    BluequeDatabase(url)


# -- what goes into log lines --------------------------------------------------------------------
@pytest.mark.parametrize("text, shown", [
    ("plain id-1", "plain id-1"),
    ("two\nlines", "two\\nlines"),
    ("\x1b[31mred\x1b[0m", "\\x1b[31mred\\x1b[0m"),
    ("cr\rtab\t", "cr\\rtab\\t"),
    ("rtl\u202eevil", "rtl\\u202eevil"),
    ("bad byte \udcff", "bad byte \\udcff"),
    ("été 日本", "été 日本"),
])
def test_printable_escapes_what_could_forge_or_colour_a_log_line(text, shown):
    assert printable(text) == shown


def write_raw_task(conn, task_id, identifier):
    """A pending task as another client could write it, with an id our API refuses."""
    conn.hset(f"blueque_task_{task_id}", mapping={
        "status": "pending", "queue": "q", "parameters": "x", "identifier": identifier,
        "created": time.time(), "updated": time.time()})
    conn.lpush("blueque_pending_tasks_q", task_id)


def failing(job, queue):
    raise ValueError("line one\nFORGED 2026-01-01 INFO all good\x1b[2J")


def test_log_lines_escape_task_ids_identifiers_and_messages(database, conn, caplog):
    task_id = "evil\nFORGED INFO task done\x1b[31m"
    write_raw_task(conn, task_id, "who\r\x1b]0;title\x07")
    worker = Worker(queues="q", fork=False, max_loops=1, timeout=0.2, callback=failing)
    with caplog.at_level(logging.INFO, logger=worker.logger_name):
        worker.run()
    lines = [record.getMessage() for record in caplog.records]
    assert any("evil\\nFORGED INFO task done\\x1b[31m|who\\r\\x1b]0;title\\x07" in line
               for line in lines)
    assert any("failed: ValueError: line one\\nFORGED" in line for line in lines)
    for line in lines:
        assert "\n" not in line and "\x1b" not in line and "\r" not in line
