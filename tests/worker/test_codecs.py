"""Codecs (issue #33, items 1 and 4): bytes, msgpack and a registered codec round-trip
through a real forked worker, parameters, results and checkpoints included; a task
records its codec, a worker that does not know it fails the task once, naming it; a value
a codec cannot encode is refused before anything is written, a stored value that does not
decode fails its task naming the codec, and the worker goes on."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import zlib

import pytest
import redis

from limpyd_blueque import (
    ConfigurationError,
    Error,
    InvalidParameters,
    Job,
    Queue,
    Worker,
    register_codec,
)
from limpyd_blueque.protocol.codecs import UnknownCodec
from limpyd_blueque.protocol.keys import keyspace

pytestmark = pytest.mark.timeout(60)
K = keyspace()
EVERY_BYTE = bytes(range(256)) * 4


def zjson_encode(value):
    return zlib.compress(json.dumps(value).encode())


def zjson_decode(data):
    return json.loads(zlib.decompress(data))


register_codec("zjson", zjson_encode, zjson_decode)


class Echo(Job):
    """Reads its payload, checkpoints it reversed (or its keys), returns it with a mark."""

    def run(self, queue):
        value = self.payload()
        if isinstance(value, bytes):
            self.checkpoint(value[::-1])
            return value + b"!"
        self.checkpoint({"seen": value})
        return {"echo": value}


def run(queue_name, loops=1, **settings):
    settings.setdefault("fork", True)
    Worker(queues=[queue_name], job_model=Echo, max_loops=loops, timeout=0.1,
           logger_level=logging.CRITICAL, **settings).run()


def raw(redis_url):
    """A client that reads the bytes Redis holds, undecoded."""
    return redis.Redis.from_url(redis_url)


def test_bytes_round_trip_exactly_through_a_forked_worker(conn, redis_url):
    job = Queue.named("blobs", codec="bytes").enqueue(EVERY_BYTE, model=Echo)
    assert raw(redis_url).hget(K.task(job.task_id), "parameters") == EVERY_BYTE
    assert job.codec.hget() == "bytes"
    run("blobs")
    assert job.status.hget() == "complete"
    assert raw(redis_url).hget(K.task(job.task_id), "result") == EVERY_BYTE + b"!"
    assert job.result_value() == EVERY_BYTE + b"!"
    assert job.wait(timeout=1) == EVERY_BYTE + b"!"
    assert job.last_checkpoint() == EVERY_BYTE[::-1]
    assert job.payload() == EVERY_BYTE


@pytest.mark.parametrize("codec", ["msgpack", "zjson"])
def test_msgpack_and_a_registered_codec_round_trip(conn, codec):
    value = {"name": "report", "pages": [1, 2, 3], "ratio": 0.5}
    if codec == "msgpack":
        value["blob"] = b"\x00\xff"
        value["by_id"] = {1: "a", 2: "b"}  # keys that are no str round-trip too
    job = Queue.named("coded").enqueue(value, model=Echo, codec=codec)
    run("coded")
    assert job.status.hget() == "complete"
    assert job.result_value() == {"echo": value}
    assert job.last_checkpoint() == {"seen": value}
    assert job.payload() == value
    assert job.wait(timeout=1) == {"echo": value}


def test_the_default_codec_writes_what_blueque_reads(conn):
    job = Queue.named("plain", codec="json").enqueue({"a": 1}, model=Echo)
    assert job.codec.hget() is None  # nothing written: a Blueque 1.0.1 task
    assert job.parameters.hget() == '{"a":1}'
    run("plain", fork=False)
    assert job.result.hget() == '{"echo":{"a":1}}' and job.wait(timeout=1) == job.result.hget()


def test_a_task_of_a_codec_unknown_to_its_worker_fails_once_naming_it(conn):
    job = Queue.named("strange").enqueue({"x": 1}, model=Echo)
    job.codec.hset("nope")  # written by a producer that knows a codec this worker does not
    after = Queue.named("strange").enqueue({"x": 2}, model=Echo)
    run("strange", loops=2, fork=False, requeue_times=3)
    assert job.status.hget() == "failed" and job.attempt.hget() == "1"
    (error,) = Error.collection_for_job(job).instances()
    assert error.type.hget() == "UnknownCodec" and "'nope'" in error.message.hget()
    assert error.code.hget() == "unknown_codec"
    assert after.status.hget() == "complete"  # the worker went on


def test_a_value_that_does_not_decode_fails_its_task_naming_the_codec(conn):
    queue = Queue.named("garbled", codec="msgpack")
    job = queue.enqueue({"x": 1}, model=Echo)
    job.parameters.hset("\udcc1")  # the byte 0xC1: never valid msgpack
    after = queue.enqueue({"x": 2}, model=Echo)
    run("garbled", loops=2, requeue_times=3)
    assert job.status.hget() == "failed" and job.attempt.hget() == "1"
    (error,) = Error.collection_for_job(job).instances()
    assert error.type.hget() == "UndecodableValue" and "'msgpack'" in error.message.hget()
    assert after.status.hget() == "complete"


@pytest.mark.parametrize("codec, value, named", [
    ("bytes", "text", "str"), ("msgpack", object(), "object"), ("json", {1, 2}, "set"),
    ("zjson", b"raw", "bytes"),
])
def test_a_value_a_codec_cannot_encode_is_refused_before_anything_is_written(
        conn, codec, value, named):
    queue = Queue.named("refusing", codec=codec)
    with pytest.raises(InvalidParameters, match=named) as refused:
        queue.enqueue(value)
    if codec != "json":
        assert f"'{codec}' codec" in str(refused.value)
    with pytest.raises(InvalidParameters):
        queue.enqueue_many([b"ok" if codec == "bytes" else 1, value])
    assert conn.llen(K.pending("refusing")) == 0
    assert not list(conn.scan_iter(match="blueque_task_*"))


def test_a_result_its_codec_cannot_encode_fails_the_task(conn):
    class Wrong(Job):
        def run(self, queue):
            return "text, not bytes"

    job = Queue.named("wrong", codec="bytes").enqueue(b"in", model=Wrong)
    Worker(queues=["wrong"], job_model=Wrong, max_loops=1, timeout=0.1, fork=False,
           logger_level=logging.CRITICAL).run()
    assert job.status.hget() == "failed"
    assert "'bytes' codec cannot encode the task result" in job.error.hget()


def test_a_worker_s_queue_codec_reads_the_tasks_that_name_none(conn):
    job = Queue.named("legacy").enqueue("written by a Blueque client", model=Echo)
    run("legacy", fork=False, codecs={"legacy": "bytes"})
    # read as bytes (Echo appends b"!" to bytes only), its result written with that codec
    assert job.result.hget() == "written by a Blueque client!"
    job.default_codec = "bytes"
    assert job.result_value() == b"written by a Blueque client!"


@pytest.mark.parametrize("name", ["json", "bytes", "9lives", "", None, "a b"])
def test_register_codec_refuses_a_bad_or_built_in_name(name):
    with pytest.raises(ConfigurationError):
        register_codec(name, zjson_encode, zjson_decode)


def test_unknown_codecs_are_refused_where_they_are_named(redis_url):
    with pytest.raises(UnknownCodec, match="'nope'"):
        Queue.named("q", codec="nope")
    with pytest.raises(UnknownCodec, match="'nope'"):
        Worker(queues=["q"], codec="nope")
    with pytest.raises(ConfigurationError, match="'nope'"):
        Worker(queues=["q"], codecs={"q": "nope"})
    done = subprocess.run([sys.executable, "-m", "limpyd_blueque.cli", f"--redis-url={redis_url}",
                           "--queues=q", "--codec=nope"], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 2 and "'nope'" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("codec", [None, "bytes"])
def test_waiting_for_a_result_reads_its_codec_with_it(conn, count_commands, codec):
    job = Queue.named("waited", codec=codec).enqueue(b"in" if codec else "in", model=Echo)
    run("waited", fork=False)
    with count_commands() as counter:
        result = job.wait(timeout=1)
    assert result == (b"in!" if codec else '{"echo":"in"}')
    assert [name for name in counter.commands if name != "SUBSCRIBE"] == ["EVALSHA"]
