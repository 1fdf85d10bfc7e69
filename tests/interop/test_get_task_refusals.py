"""`Client.get_task`, the drop-in's read, given what the reference would read blindly: an id
that breaks the task id rule, or a task hash whose numbers do not parse. Each is refused
with an error of this library's tree that names the problem; nothing is written. A valid
id reads as the reference reads it (see test_wire_compat.py)."""

from __future__ import annotations

import pytest

from limpyd_blueque import Client, InvalidName, LimpydBluequeError, ProtocolError


@pytest.fixture
def client(redis_url, database):
    return Client(redis_url)


@pytest.mark.parametrize("task_id, problem", [
    (None, "a task id is a str, not NoneType"),
    (12, "a task id is a str, not int"),
    (b"t1", "a task id is a str, not bytes"),
    (["t1"], "a task id is a str, not list"),
    ("", "use 1 to 200 printable characters"),
    ("a b", "use 1 to 200 printable characters"),
    ("a\nb", "use 1 to 200 printable characters"),
    ("x" * 201, "use 1 to 200 printable characters"),
], ids=lambda value: repr(value)[:24])
def test_get_task_refuses_an_id_that_breaks_the_rule(client, conn, task_id, problem):
    with pytest.raises(InvalidName) as error:
        client.get_task(task_id)
    assert isinstance(error.value, LimpydBluequeError)
    message = str(error.value)
    assert message.startswith(f"invalid task id {repr(task_id)[:80]}")
    assert problem in message
    assert conn.keys("*") == []


def test_get_task_of_a_valid_unknown_id_is_still_the_empty_task(client, conn):
    task = client.get_task("no-such-task")
    assert (task.id, task.status, task.pid, task.created, task.attempt) == (
        "no-such-task", None, None, None, 0)
    assert conn.keys("*") == []


@pytest.mark.parametrize("name, value, problem", [
    ("eta", "abc", "a number"),
    ("created", "yesterday", "a number"),
    ("updated", "1.5.3", "a number"),
    ("pid", "x", "a whole number"),
    ("pid", "inf", "a whole number"),
    ("attempt", "x", "a whole number"),
])
def test_get_task_of_a_corrupt_hash_is_a_protocol_error_naming_task_field_and_value(
        client, conn, name, value, problem):
    key = "blueque_task_t1"
    conn.hset(key, mapping={"status": "pending", "queue": "q", "parameters": "x",
                            "created": "1700000000", "updated": "1700000000", name: value})
    before = conn.hgetall(key)
    with pytest.raises(ProtocolError) as error:
        client.get_task("t1")
    assert str(error.value) == (f"task 't1' has a corrupt {name} field: '{value}' is not "
                                f"{problem}")
    assert conn.keys("*") == [key]
    assert conn.hgetall(key) == before
