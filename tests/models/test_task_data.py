"""`Job.data()` of a task hash another client (or an operator, or a bug) wrote wrong: Redis
is shared, so what it holds is input. A field the snapshot reads as a number and cannot
read is refused with `ProtocolError` naming the task, the field and the value; the read
writes nothing."""

from __future__ import annotations

import pytest

from limpyd_blueque import Job, LimpydBluequeError, ProtocolError

SOUND = {"status": "pending", "queue": "q", "parameters": "x", "created": "1700000000.5",
         "updated": "1700000001.25"}

# (field, value written, what it is not)
CORRUPT = [
    ("eta", "abc", "a number"),
    ("created", "12:00", "a number"),
    ("updated", "1e", "a number"),
    ("pid", "x", "a whole number"),
    ("pid", "inf", "a whole number"),
    ("pid", "nan", "a whole number"),
    ("pid", "1e400", "a whole number"),
    ("pid", "12.5", "a whole number"),
    ("attempt", "x", "a whole number"),
    ("attempt", "1.5.3", "a whole number"),
    ("attempt", "1.5", "a whole number"),
]


def write(conn, task_id, **fields):
    conn.hset(f"blueque_task_{task_id}", mapping={**SOUND, **fields})
    return conn.hgetall(f"blueque_task_{task_id}")


@pytest.mark.parametrize("name, value, problem", CORRUPT)
def test_a_number_field_that_does_not_parse_is_a_protocol_error_naming_it(
        database, conn, name, value, problem):
    before = write(conn, "t1", **{name: value})
    with pytest.raises(ProtocolError) as error:
        Job.lazy_connect("t1").data()
    assert isinstance(error.value, LimpydBluequeError)
    assert not isinstance(error.value, ValueError)
    assert str(error.value) == (f"task 't1' has a corrupt {name} field: '{value}' is not "
                                f"{problem}")
    assert conn.keys("*") == ["blueque_task_t1"]
    assert conn.hgetall("blueque_task_t1") == before


def test_the_message_escapes_the_task_id_and_the_value_and_cuts_a_long_value(database, conn):
    task_id = "evil\nFORGED INFO ok\x1b[31m"
    write(conn, task_id, eta="\x1b]0;title\x07\r" + "9" * 500)
    with pytest.raises(ProtocolError) as error:
        Job.lazy_connect(task_id).data()
    message = str(error.value)
    assert message.startswith("task 'evil\\nFORGED INFO ok\\x1b[31m' has a corrupt eta field: "
                              "'\\x1b]0;title\\x07\\r999")
    assert message.endswith("...' is not a number")
    assert len(message) < 200
    assert "\n" not in message and "\x1b" not in message and "\r" not in message


def test_numbers_written_as_floats_and_empty_fields_still_read(database, conn):
    write(conn, "t1", pid="4242.0", attempt="3", eta="", node="h_1")
    data = Job.lazy_connect("t1").data()
    assert (data.pid, data.attempt, data.eta, data.created, data.updated) == (
        4242, 3, None, 1700000000.5, 1700000001.25)


def test_fields_the_snapshot_does_not_read_as_numbers_are_given_as_written(database, conn):
    """`ttr`, `max_run_time`, `priority` are this library's own fields: the snapshot gives
    them in `extra`, as strings, whatever they hold (the worker's reserve step judges them)."""
    write(conn, "t1", max_run_time="abc", ttr="x", priority="1.5.3")
    data = Job.lazy_connect("t1").data()
    assert {name: data.extra[name] for name in ("max_run_time", "ttr", "priority")} == {
        "max_run_time": "abc", "ttr": "x", "priority": "1.5.3"}
