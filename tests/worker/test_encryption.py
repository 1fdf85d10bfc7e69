"""Encryption at rest (issue #33, item 2): tasks sealed with AES-256-GCM run through a
real forked worker with a rotated key set, and Redis holds no clear value of them (every
key scanned); a worker without a task's key fails it once naming the key id; a tampered
or moved value fails its task, never running it with wrong data; `blueque reencrypt`
moves old values to the current key; no key or clear value reaches a log, `blueque
inspect` or the dashboard, which show `(encrypted)` unless given the keys."""

from __future__ import annotations

import base64
import json
import logging
import os
import subprocess
import sys

import pytest

from limpyd_blueque import Error, Job, Queue, Worker, use_redis
from limpyd_blueque.operations.web import WebSettings, create_app
from limpyd_blueque.protocol.encryption import Keyring, TamperedValue, UnknownEncryptionKey
from limpyd_blueque.protocol.keys import keyspace

pytestmark = pytest.mark.timeout(60)
K = keyspace()
SECRET = "patient-4711-diagnosis"
NEW, OLD = base64.b64encode(os.urandom(32)).decode(), base64.b64encode(os.urandom(32)).decode()
KEYS = {"2026-11": NEW, "2026-06": OLD}


class Private(Job):
    """Reads its payload, reports progress and checkpoints with it, returns it."""

    def run(self, queue):
        value = self.payload()
        self.set_progress(1, 2, f"reading {value['name']}")
        self.checkpoint({"at": value["name"]})
        return {"done": value["name"]}


@pytest.fixture
def sealed(redis_url):
    """The models bound with the keys (the old one first: then rotated in a test)."""
    database = use_redis(redis_url, encryption_keys=KEYS)
    yield database
    use_redis(redis_url)


def run(queue_name, loops=1, **settings):
    settings.setdefault("fork", True)
    Worker(queues=[queue_name], job_model=Private, max_loops=loops, timeout=0.1,
           logger_level=logging.INFO, **settings).run()


def reencrypt(redis_url, keys_file, queue):
    """`blueque --encryption-keys-file=FILE reencrypt QUEUE --json`, as an operator runs it."""
    return subprocess.run([sys.executable, "-m", "limpyd_blueque.admin",
                           f"--redis-url={redis_url}", f"--encryption-keys-file={keys_file}",
                           "reencrypt", queue, "--json"],
                          capture_output=True, text=True, timeout=60)


def every_stored_value(conn):
    """Every value Redis holds, as one text (hashes, lists, sets, sorted sets, strings)."""
    texts = []
    for key in conn.scan_iter():
        kind = conn.type(key)
        if kind == "hash":
            texts += [f"{name}={value}" for name, value in conn.hgetall(key).items()]
        elif kind == "list":
            texts += conn.lrange(key, 0, -1)
        elif kind == "set":
            texts += conn.smembers(key)
        elif kind == "zset":
            texts += conn.zrange(key, 0, -1)
        elif kind == "string":
            texts.append(conn.get(key))
        texts.append(key)
    return "\n".join(texts)


def test_sealed_tasks_run_and_redis_holds_no_clear_value(sealed, conn, caplog, tmp_path):
    job = Queue.named("private").enqueue({"name": SECRET}, model=Private)
    assert job.encrypted.hget() == "aes-256-gcm"
    assert job.parameters.hget().startswith("bqe1:2026-11:")
    keys_file = tmp_path / "keys.json"
    keys_file.write_text(json.dumps(KEYS))
    use_redis(sealed.url)  # the worker's keys come from its file, not from the producer
    caplog.set_level(logging.DEBUG)
    run("private", encryption_keys_file=str(keys_file))
    use_redis(sealed.url, encryption_keys=KEYS)
    assert job.status.hget() == "complete"
    assert job.result_value() == {"done": SECRET}
    assert job.wait(timeout=1) == f'{{"done":"{SECRET}"}}'
    assert job.last_checkpoint() == {"at": SECRET}
    assert job.progress().message.startswith("bqe1:")
    stored = every_stored_value(conn)
    assert SECRET not in stored and "reading" not in stored
    assert NEW not in stored and OLD not in stored
    assert SECRET not in caplog.text and NEW not in caplog.text and OLD not in caplog.text


def test_a_rotated_key_still_opens_what_the_old_one_sealed(redis_url, conn):
    use_redis(redis_url, encryption_keys={"2026-06": OLD})
    job = Queue.named("rotated").enqueue({"name": "old one"}, model=Private)
    assert job.parameters.hget().startswith("bqe1:2026-06:")
    use_redis(redis_url, encryption_keys=KEYS)  # the new key first: it seals from now on
    try:
        run("rotated")
        assert job.result_value() == {"done": "old one"}
        assert job.result.hget().startswith("bqe1:2026-11:")
        assert job.parameters.hget().startswith("bqe1:2026-06:")
    finally:
        use_redis(redis_url)


def test_reencrypt_rewrites_what_an_old_key_sealed(redis_url, conn, tmp_path):
    use_redis(redis_url, encryption_keys={"2026-06": OLD})
    jobs = Queue.named("archive").enqueue_many([{"name": f"n{n}"} for n in range(3)],
                                               model=Private)
    use_redis(redis_url)
    keys_file = tmp_path / "keys.json"
    keys_file.write_text(json.dumps(KEYS))
    done = reencrypt(redis_url, keys_file, "archive")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["rewritten"] == 3
    for job in jobs:
        assert job.parameters.hget().startswith("bqe1:2026-11:")
    assert OLD not in done.stdout + done.stderr and NEW not in done.stdout + done.stderr
    use_redis(redis_url, encryption_keys={"2026-11": NEW})  # the old key can go now
    try:
        assert Job.load(jobs[0].task_id).payload() == {"name": "n0"}
    finally:
        use_redis(redis_url)


def test_a_worker_without_the_key_fails_the_task_once_naming_the_key(sealed, conn):
    job = Queue.named("keyless").enqueue({"name": SECRET}, model=Private)
    use_redis(sealed.url)
    run("keyless", fork=False, requeue_times=3,
        encryption_keys={"other": base64.b64encode(os.urandom(32)).decode()})
    assert job.status.hget() == "failed" and job.attempt.hget() == "1"
    (error,) = Error.collection_for_job(job).instances()
    assert error.type.hget() == "UnknownEncryptionKey" and "'2026-11'" in error.message.hget()
    assert SECRET not in every_stored_value(conn)


@pytest.mark.parametrize("damage", ["flipped", "moved", "clear"])
def test_a_tampered_value_fails_its_task_never_runs_it(sealed, conn, damage):
    queue = Queue.named("tampered")
    job = queue.enqueue({"name": "a"}, model=Private)
    other = queue.enqueue({"name": "b"}, model=Private)
    stored = job.parameters.hget()
    if damage == "flipped":
        body = bytearray(base64.b64decode(stored.split(":", 2)[2]))
        body[-1] ^= 1
        job.parameters.hset(stored.rsplit(":", 1)[0] + ":" + base64.b64encode(body).decode())
    elif damage == "moved":  # another task's sealed parameters: bound to that task
        job.parameters.hset(other.parameters.hget())
    else:
        job.parameters.hset('{"name": "forged"}')
    after = queue.enqueue({"name": "c"}, model=Private)
    run("tampered", loops=3, fork=False, requeue_times=3)
    assert job.status.hget() == "failed" and job.attempt.hget() == "1"
    (error,) = Error.collection_for_job(job).instances()
    assert error.type.hget() == "TamperedValue"
    assert job.result.hget() is None
    assert other.result_value() == {"done": "b"} and after.result_value() == {"done": "c"}


def test_inspect_and_the_dashboard_show_encrypted_unless_given_the_keys(
        sealed, conn, redis_url, tmp_path):
    job = Queue.named("shown").enqueue({"name": SECRET}, model=Private)
    run("shown")
    inspect = [sys.executable, "-m", "limpyd_blueque.admin", f"--redis-url={redis_url}",
               "inspect", job.task_id, "--json"]
    shown = subprocess.run(inspect, capture_output=True, text=True, timeout=60)
    fields = json.loads(shown.stdout)["fields"]
    assert fields["parameters"] == fields["result"] == "(encrypted)"
    assert SECRET not in shown.stdout
    keys_file = tmp_path / "keys.json"
    keys_file.write_text(json.dumps(KEYS))
    opened = subprocess.run([*inspect[:4], f"--encryption-keys-file={keys_file}", *inspect[4:]],
                            capture_output=True, text=True, timeout=60)
    assert SECRET in json.loads(opened.stdout)["fields"]["parameters"]
    after = subprocess.run([*inspect, f"--encryption-keys-file={keys_file}"],
                           capture_output=True, text=True, timeout=60)  # after it, too
    assert SECRET in json.loads(after.stdout)["fields"]["parameters"]
    use_redis(redis_url)
    page = create_app(WebSettings()).test_client().get(f"/tasks/{job.task_id}")
    body = page.get_data(as_text=True)
    assert "(encrypted)" in body and SECRET not in body


def test_bad_keys_are_refused_without_showing_them(tmp_path):
    with pytest.raises(Exception, match="32 bytes") as refused:
        Keyring({"k": "c2hvcnQ="})
    assert "c2hvcnQ" not in str(refused.value)
    bad = tmp_path / "keys.json"
    bad.write_text("not json " + NEW)
    with pytest.raises(Exception, match="JSON") as refused:
        Keyring.from_file(bad)
    assert NEW not in str(refused.value)
    assert NEW not in repr(Keyring(KEYS))
    ring = Keyring(KEYS)
    sealed = ring.seal("x", "task\x00parameters")
    with pytest.raises(TamperedValue):
        ring.open(sealed, "task\x00result")
    with pytest.raises(UnknownEncryptionKey, match="'gone'"):
        ring.open(sealed.replace("2026-11", "gone", 1), "task\x00parameters")


# -- what the review of this feature found -------------------------------------------------
class Parent(Job):
    """Enqueues a child from inside its task, on a queue of its own."""

    def run(self, queue):
        child = Queue.named("children").enqueue({"name": SECRET}, model=Private)
        return child.task_id


def test_what_a_task_enqueues_is_sealed_with_its_worker_s_keys(redis_url, conn):
    use_redis(redis_url, encryption_keys=KEYS)
    parent = Queue.named("parents").enqueue({"name": "p"}, model=Parent)
    use_redis(redis_url)  # a worker given its keys by setting only
    try:
        Worker(queues=["parents"], job_model=Parent, max_loops=1, timeout=0.1, fork=True,
               encryption_keys=KEYS, logger_level=logging.CRITICAL).run()
    finally:
        use_redis(redis_url)
    assert parent.status.hget() == "complete"
    assert SECRET not in every_stored_value(conn)
    children = conn.lrange(K.pending("children"), 0, -1)
    assert len(children) == 1
    assert conn.hget(K.task(children[0]), "encrypted") == "aes-256-gcm"


def test_print_options_shows_the_key_ids_never_the_keys(capsys):
    from limpyd_blueque.cli.worker_script import WorkerConfig

    WorkerConfig(["--queues=q"]).print_options(Worker(queues=["q"], encryption_keys=KEYS))
    shown = capsys.readouterr().out
    assert "2026-11" in shown and NEW not in shown and OLD not in shown


def test_periodic_tasks_are_refused_where_they_would_be_written_clear(sealed):
    from limpyd_blueque import ConfigurationError

    with pytest.raises(ConfigurationError, match="periodic tasks are written clear"):
        Queue.named("nightly").every(3600, {"name": SECRET}, name="n")


class Unstorable(Job):
    def run(self, queue):
        return {"name": SECRET, "tags": {"a", "b"}}  # a set: JSON cannot encode it


def test_a_result_that_cannot_be_stored_is_named_by_its_type_only(sealed, conn, caplog):
    job = Queue.named("unstorable").enqueue({"name": "x"}, model=Unstorable)
    Worker(queues=["unstorable"], job_model=Unstorable, max_loops=1, timeout=0.1, fork=False,
           logger_level=logging.INFO).run()
    assert job.status.hget() == "failed"
    assert "dict" in job.error.hget()
    assert SECRET not in every_stored_value(conn) and SECRET not in caplog.text


class Chatty(Job):
    def run(self, queue):
        self.set_progress(1, 1, "x" * 600 + SECRET)  # longer than a message is kept
        return "ok"


def test_a_long_progress_message_is_cut_then_sealed_and_opens(sealed, conn):
    job = Queue.named("chatty").enqueue({}, model=Chatty)
    Worker(queues=["chatty"], job_model=Chatty, max_loops=1, timeout=0.1, fork=False,
           progress_interval=0, logger_level=logging.CRITICAL).run()
    message = job.progress().message
    assert message.startswith("bqe1:")
    assert job.open_value(message, "progress") == "x" * 500
    assert SECRET not in every_stored_value(conn)


def test_reencrypt_reseals_results_checkpoints_and_progress_too(redis_url, conn, tmp_path):
    use_redis(redis_url, encryption_keys={"2026-06": OLD})
    job = Queue.named("olds").enqueue({"name": "n"}, model=Private)
    try:
        Worker(queues=["olds"], job_model=Private, max_loops=1, timeout=0.1, fork=False,
               progress_interval=0, logger_level=logging.CRITICAL).run()
    finally:
        use_redis(redis_url)
    assert job.result.hget().startswith("bqe1:2026-06:")
    keys_file = tmp_path / "keys.json"
    keys_file.write_text(json.dumps(KEYS))
    done = subprocess.run([sys.executable, "-m", "limpyd_blueque.admin",
                           f"--redis-url={redis_url}", "reencrypt", "olds", "--json",
                           f"--encryption-keys-file={keys_file}"],  # after the command
                          capture_output=True, text=True, timeout=60)
    assert json.loads(done.stdout) == {"queue": "olds", "rewritten": 1, "values": 4,
                                       "unopened": []}
    stored = conn.hgetall(K.task(job.task_id))
    assert "2026-06" not in stored["parameters"] + stored["result"]
    assert "2026-06" not in stored["checkpoint"] + stored["progress"]
    use_redis(redis_url, encryption_keys={"2026-11": NEW})
    try:
        assert job.result_value() == {"done": "n"} and job.last_checkpoint() == {"at": "n"}
    finally:
        use_redis(redis_url)
