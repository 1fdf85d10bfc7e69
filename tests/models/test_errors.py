"""Bad input gets a clear exception from one tree, and leaves Redis unchanged."""

import pytest

from limpyd_blueque import (
    ConfigurationError,
    InvalidName,
    InvalidParameters,
    LimpydBluequeError,
    Queue,
    RedisUnavailable,
    use_redis,
)
from limpyd_blueque.connection.embedded import free_port


@pytest.mark.parametrize("value", [b"raw", {1, 2}, object(), float("nan")])
def test_parameters_json_cannot_encode_are_refused(database, conn, value):
    with pytest.raises(InvalidParameters, match="task parameters"):
        Queue.named("q").enqueue(value)
    assert conn.keys("*") == []


def test_one_bad_value_in_a_bulk_enqueue_writes_nothing(database, conn):
    with pytest.raises(InvalidParameters):
        Queue.named("q").enqueue_many(["a", "b", b"c"])
    assert conn.keys("*") == []


def test_bad_queue_name_is_refused_before_any_write(database, conn):
    with pytest.raises(InvalidName):
        Queue.named("bad name")
    with pytest.raises(InvalidName):
        Queue.reserve_from(["ok", "no*"], "h_1")
    assert conn.keys("*") == []


def test_an_existing_task_id_is_refused(database, conn):
    q = Queue.named("q")
    job = q.enqueue("a", task_id="fixed")
    with pytest.raises(LimpydBluequeError, match="'fixed' exists already"):
        q.enqueue("b", task_id="fixed")
    assert job.parameters.hget() == "a"
    assert conn.llen("blueque_pending_tasks_q") == 1


def test_unreachable_redis_names_the_url():
    url = f"redis://127.0.0.1:{free_port()}/3"
    with pytest.raises(RedisUnavailable, match=r"cannot reach Redis at redis://127.0.0.1:.*/3"):
        use_redis(url)


def test_unreachable_redis_in_a_step_names_the_url(database):
    from limpyd_blueque import Client

    client = Client(f"redis://127.0.0.1:{free_port()}/0")
    with pytest.raises(RedisUnavailable, match=r"cannot reach Redis at redis://127.0.0.1"):
        client.get_queue("q").enqueue("x")


def test_invalid_url_is_a_configuration_error():
    with pytest.raises(ConfigurationError, match="invalid Redis URL"):
        use_redis("http://nowhere")


def test_models_refuse_to_run_unbound():
    from limpyd_blueque.connection.clients import UnboundDatabase

    with pytest.raises(ConfigurationError, match="no Redis server bound"):
        _ = UnboundDatabase().connection


def test_every_error_derives_from_the_base():
    for error in (ConfigurationError, InvalidName, InvalidParameters, RedisUnavailable):
        assert issubclass(error, LimpydBluequeError)
