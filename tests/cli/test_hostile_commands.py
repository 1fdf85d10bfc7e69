"""`blueque-worker` and `blueque` given bad input, run as users run them: the installed
console scripts, in real processes. Every mistake gets one line on stderr and exit code 2
(1 when Redis is unreachable or full), no traceback unless asked; a Redis password never
shows in what they print nor in their command line as `ps` sees it."""

from __future__ import annotations

import os
import signal
import subprocess
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest
import redis
from helpers import TESTS, fill_until_full, script, wait_for

from limpyd_blueque.connection.embedded import EmbeddedRedis, free_port
from limpyd_blueque.worker.settings import SETTINGS

pytestmark = pytest.mark.timeout(300)



WORKER = script("blueque-worker", "limpyd_blueque.cli")
ADMIN = script("blueque", "limpyd_blueque.admin")
NUMBERS = [s for s in SETTINGS if s.cli and s.kind in ("int", "float")]


def first_only(values, ids=None):
    """`values` for `parametrize`: the first runs in every test run, the others only in the
    slow hostile suite (`pytest -m hostile`): each case starts a Python of its own."""
    ids = ids or [None] * len(values)
    return [pytest.param(*(value if isinstance(value, tuple) else (value,)), id=case_id,
                         marks=() if index == 0 else pytest.mark.hostile)
            for index, (value, case_id) in enumerate(zip(values, ids))]


def run(command, *options, **kwargs):
    return subprocess.run([*command, *options], capture_output=True, text=True, timeout=60,
                          **kwargs)


def assert_one_line(result, code=2, *texts):
    """Exit `code`, exactly one line on stderr holding each of `texts`, no traceback."""
    assert result.returncode == code, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for text in texts:
        assert text in lines[0]
    return lines[0]


def bad_numbers(setting):
    """The texts each numeric option must refuse: NaN, the infinities, a word, and a value
    under its minimum (a negative one when that is under it). Values over the maximum:
    see test_hostile_input.py."""
    low = "-5" if setting.minimum is not None and setting.minimum > -5 else "-1e12"
    return ["nan", "inf", "-inf", "abc", low]


CASES = [(setting.option, text) for setting in NUMBERS for text in bad_numbers(setting)]


@pytest.fixture(scope="module")
def refused(redis_url):
    """{(option, text): result} of `blueque-worker --queues=q <option>=<text>`, run
    side by side (each run starts a Python)."""
    def one(case):
        option, text = case
        return case, run(WORKER, f"--redis-url={redis_url}", "--queues=q", f"{option}={text}")
    with ThreadPoolExecutor(max_workers=4) as pool:
        return dict(pool.map(one, CASES))


@pytest.mark.hostile
@pytest.mark.parametrize("option, text", CASES)
def test_every_numeric_worker_option_refuses_a_bad_number_in_one_line(refused, option, text):
    assert_one_line(refused[option, text], 2, f"argument {option}: {text!r} ")


@pytest.mark.parametrize("option, text", [("--ttr", "inf")])
def test_a_bad_number_is_refused_by_the_real_command(redis_url, option, text):
    result = run(WORKER, f"--redis-url={redis_url}", "--queues=q", f"{option}={text}")
    assert_one_line(result, 2, f"argument {option}: {text!r} ")


@pytest.mark.parametrize("text", first_only(["nan", "inf", "-inf", "abc", "-1", "0", "1e99"]))
def test_blueque_clean_refuses_a_bad_max_attempts_in_one_line(redis_url, text):
    result = run(ADMIN, f"--redis-url={redis_url}", "clean", f"--max-attempts={text}")
    assert_one_line(result, 2, f"argument --max-attempts: {text!r} ")


# -- user modules that fail at import ------------------------------------------------------------
@pytest.fixture(scope="module")
def broken_modules(tmp_path_factory):
    path = tmp_path_factory.mktemp("modules")
    (path / "raises_at_import.py").write_text(
        'raise RuntimeError("settings missing\\nsee the docs")\n')
    (path / "bad_syntax.py").write_text("def f(:\n")
    return path


IMPORTED = ["--callback", "--job-model", "--queue-model", "--error-model", "--worker-class",
            "--worker-config"]


@pytest.mark.parametrize("option", first_only(IMPORTED))
def test_a_module_failing_at_import_is_one_line_naming_its_exception(redis_url, broken_modules,
                                                                     option):
    result = run(WORKER, f"--redis-url={redis_url}", f"--pythonpath={broken_modules}",
                 "--queues=q", f"{option}=raises_at_import.thing")
    assert_one_line(result, 2, "cannot import", "'raises_at_import.thing': RuntimeError: "
                    "settings missing\\nsee the docs")


@pytest.mark.hostile
def test_a_module_with_a_syntax_error_is_one_line(redis_url, broken_modules):
    result = run(WORKER, f"--redis-url={redis_url}", f"--pythonpath={broken_modules}",
                 "--queues=q", "--callback=bad_syntax.f")
    assert_one_line(result, 2, "cannot import callback 'bad_syntax.f': SyntaxError")


@pytest.mark.parametrize("flag", first_only(["--traceback", "-v"]))
def test_the_traceback_is_shown_when_asked(redis_url, broken_modules, flag):
    result = run(WORKER, f"--redis-url={redis_url}", f"--pythonpath={broken_modules}",
                 "--queues=q", "--callback=raises_at_import.thing", flag)
    assert result.returncode == 2
    assert "Traceback" in result.stderr
    assert 'raise RuntimeError("settings missing' in result.stderr  # the module's own line
    assert result.stderr.strip().splitlines()[-1].startswith("blueque-worker: error: cannot")


# -- the server ----------------------------------------------------------------------------------
def other_database(url, index):
    return url.rsplit("/", 1)[0] + f"/{index}"


@pytest.mark.parametrize("command, options", first_only(
    [(WORKER, ["--queues=q"]), (ADMIN, ["clean"])], ids=["blueque-worker", "blueque"]))
def test_a_database_index_out_of_range_is_one_line(redis_url, command, options):
    result = run(command, f"--redis-url={other_database(redis_url, 99)}", *options)
    assert_one_line(result, 2, "/99 has no such database: DB index is out of range")


@pytest.mark.parametrize("command, options", first_only(
    [(WORKER, ["--queues=q"]), (ADMIN, ["clean"])], ids=["blueque-worker", "blueque"]))
def test_an_unreachable_redis_is_one_line(command, options):
    url = f"redis://127.0.0.1:{free_port()}/0"
    assert_one_line(run(command, f"--redis-url={url}", *options), 1, f"cannot reach Redis at {url}")


@pytest.fixture
def full_redis():
    with EmbeddedRedis() as server:
        client = redis.Redis.from_url(server.url)
        client.zadd("blueque_queues", {"q": 0})  # a queue seen: a worker on it does not warn
        fill_until_full(client, margin=-100_000)
        yield server.url


@pytest.mark.parametrize("command, options", first_only(
    [(WORKER, ["--queues=q", "--max-duration=2"]), (ADMIN, ["clean", "--deep"])],
    ids=["blueque-worker", "blueque"]))
def test_a_full_redis_is_one_line(full_redis, command, options):
    result = run(command, f"--redis-url={full_redis}", *options)
    if command is ADMIN and result.returncode == 0:
        return  # cleaning an installation with nothing to clean writes nothing
    assert_one_line(result, 1, "is full: it refuses writes")


# -- secrets -------------------------------------------------------------------------------------
PASSWORD = f"pw-{uuid.uuid4().hex}"


@pytest.fixture(scope="module")
def secret_redis():
    """A password-protected redis-server: its url holds PASSWORD."""
    with EmbeddedRedis(password=PASSWORD) as server:
        yield server


def assert_no_secret(*texts):
    for text in texts:
        assert PASSWORD not in text
        assert PASSWORD[3:] not in text


def test_print_options_masks_the_password(secret_redis):
    result = run(WORKER, f"--redis-url={secret_redis.url}", "--queues=q", "--print-options",
                 "--dry-run")
    assert result.returncode == 0, result.stderr
    assert f"redis_url=redis://:***@127.0.0.1:{secret_redis.port}/0" in result.stdout
    assert_no_secret(result.stdout, result.stderr)


BAD_URLS = [
    ("redis://:{pw}@127.0.0.1:notaport/0", []),
    ("redis://user:{pw}@127.0.0.1:{port}/99", []),
    ("redis://:{pw}-wrong@127.0.0.1:{port}/0", []),
    ("redis://:{pw}@127.0.0.1:{free}/0", []),
    ("redis://:{pw}@127.0.0.1:{port}/0", ["redis://:{pw}@elsewhere/0"]),
    ("redis://:{pw}@127.0.0.1:notaport/0", ["--traceback"]),
    ("redis://127.0.0.1:{port}/0?password={pw}&db=99", []),
]
BAD_URL_IDS = ["bad-port", "user-and-db", "wrong-password", "unreachable", "stray-argument",
               "traceback", "query"]


@pytest.mark.parametrize("url, options", first_only(BAD_URLS, BAD_URL_IDS))
@pytest.mark.parametrize("command", [WORKER, pytest.param(ADMIN, marks=pytest.mark.hostile)],
                         ids=["blueque-worker", "blueque"])
def test_error_lines_never_show_the_password(secret_redis, command, url, options):
    fill = {"pw": PASSWORD, "port": secret_redis.port, "free": free_port()}
    options = [option.format(**fill) for option in options]
    subcommand = ["--queues=q"] if command is WORKER else ["clean"]
    result = run(command, f"--redis-url={url.format(**fill)}", *options, *subcommand)
    assert result.returncode in (1, 2)
    assert_no_secret(result.stdout, result.stderr)
    if "--traceback" not in options:
        assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("command, options, prog, database", first_only(
    [(WORKER, ["--queues=q", "--max-duration=5"], "blueque-worker", "abc"),
     (ADMIN, ["clean"], "blueque", "abc"),
     (WORKER, ["--queues=q", "--max-duration=5"], "blueque-worker", "-1"),
     (WORKER, ["--queues=q", "--max-duration=5"], "blueque-worker", "1.5"),
     (WORKER, ["--queues=q", "--max-duration=5"], "blueque-worker", "1/2")],
    ids=["blueque-worker", "blueque", "negative", "decimal", "two-parts"]))
def test_a_database_that_is_not_a_whole_number_is_one_line_and_nothing_is_written(
        secret_redis, command, options, prog, database):
    """redis-py would take database 0 for a path it cannot read (`/abc`, `/1.5`) and
    database 12 for `/1/2`: the commands refuse such a URL before any connection."""
    raw = redis.Redis.from_url(secret_redis.url)
    raw.flushall()
    url = f"redis://:{PASSWORD}@127.0.0.1:{secret_redis.port}/{database}"
    result = run(command, f"--redis-url={url}", *options)
    masked = f"redis://:***@127.0.0.1:{secret_redis.port}/{database}"
    line = assert_one_line(result, 2, f"{prog}: error: invalid Redis URL {masked!r}: its "
                           f"database {database!r} is not a whole number of 0 or more")
    assert line.startswith(f"{prog}: error: ")
    assert_no_secret(result.stdout, result.stderr)
    assert raw.info("keyspace") == {}


def command_lines(pid):
    """The command line, as `ps` shows it, of `pid` and of each of its children."""
    process = psutil.Process(pid)
    return {p.pid: Path(f"/proc/{p.pid}/cmdline").read_bytes().decode(errors="replace")
            for p in [process, *process.children(recursive=True)]}


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="reads /proc")
@pytest.mark.parametrize("title", first_only([["--no-title"], []], ids=["no-title", "title"]))
def test_a_running_worker_hides_the_password_from_ps(secret_redis, title):
    client = redis.Redis.from_url(secret_redis.url, decode_responses=True)
    client.flushall()
    worker = subprocess.Popen([*WORKER, f"--redis-url={secret_redis.url}", "--queues=q",
                               f"--pythonpath={TESTS}", *title],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: client.scard("blueque_listeners_q"), timeout=20)
        # the worker and its spare task process, forked from it
        lines = wait_for(lambda: len(command_lines(worker.pid)) >= 2
                         and command_lines(worker.pid), timeout=20)
        assert_no_secret(*lines.values())
        if title:
            assert "--redis-url=redis://:***@127.0.0.1" in lines[worker.pid]
    finally:
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=30)
    assert_no_secret(out, err)


def test_the_url_can_come_from_a_file(secret_redis, tmp_path):
    url_file = tmp_path / "redis-url"
    url_file.write_text(f"{secret_redis.url}\nanything after the first line\n")
    result = run(WORKER, f"--redis-url-file={url_file}", "--queues=q", "--print-options",
                 "--dry-run")
    assert result.returncode == 0, result.stderr
    assert f"redis_url=redis://:***@127.0.0.1:{secret_redis.port}/0" in result.stdout
    assert run(ADMIN, f"--redis-url-file={url_file}", "clean").returncode == 0


def test_the_url_can_come_from_the_environment(secret_redis):
    result = run(WORKER, "--queues=q", "--print-options", "--dry-run",
                 env={**os.environ, "REDIS_URL": secret_redis.url})
    assert result.returncode == 0, result.stderr
    assert f"redis_url=redis://:***@127.0.0.1:{secret_redis.port}/0" in result.stdout
    assert_no_secret(result.stdout, result.stderr)


@pytest.mark.parametrize("content, message", first_only([
    (None, "cannot read the Redis URL file"),
    ("", "is empty: expected the URL on its first line"),
    ("\n\nredis://h/0", "is empty"),
]))
def test_a_bad_url_file_is_one_line(tmp_path, content, message):
    url_file = tmp_path / "redis-url"
    if content is not None:
        url_file.write_text(content)
    assert_one_line(run(WORKER, f"--redis-url-file={url_file}", "--queues=q"), 2, message)


@pytest.mark.hostile
def test_the_url_and_a_url_file_together_are_refused(tmp_path, redis_url):
    url_file = tmp_path / "redis-url"
    url_file.write_text(redis_url)
    result = run(ADMIN, f"--redis-url={redis_url}", f"--redis-url-file={url_file}", "clean")
    assert_one_line(result, 2, "give --redis-url or --redis-url-file, not both")
