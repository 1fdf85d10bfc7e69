"""docs/porting.rst maps every public name of redis-limpyd-jobs to limpyd-blueque's.

The page's convention, checked here: a redis-limpyd-jobs name is written bare in an inline
literal (``add_job``); a limpyd-blueque name is written from its class or package
(``Job.add_job``, ``limpyd_blueque.Delay``). So every inline literal whose first dotted
part is one of `ROOTS` must name something that exists, and every redis-limpyd-jobs name
(listed below, from its 0.1.5 documentation) must appear in its section of the page.

Needs no Redis: the conftest's autouse `clean` fixture is replaced below.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "porting.rst"

#: the first dotted part of a limpyd-blueque name on the page -> where it is imported from
ROOTS = {
    "limpyd_blueque": "limpyd_blueque",
    "Job": "limpyd_blueque.Job",
    "Queue": "limpyd_blueque.Queue",
    "Error": "limpyd_blueque.Error",
    "Worker": "limpyd_blueque.Worker",
    "Status": "limpyd_blueque.Status",
    "BluequeModel": "limpyd_blueque.BluequeModel",
    "WorkerConfig": "limpyd_blueque.config.WorkerConfig",
}

#: redis-limpyd-jobs' `Worker.parameters`, as its documentation gives it (its spelling)
LJ_WORKER_PARAMETERS = (
    "queues", "callback", "queue_model", "error_model", "logger_name", "logger_level",
    "save_errors", "save_tracebacks", "max_loops", "max_duration", "terminate_gracefuly",
    "timeout", "fetch_priorities_delay", "fetch_delayed_delay", "requeue_times",
    "requeue_priority_delta", "requeue_delay_delta",
)

#: the options of `limpyd-jobs-worker --help`
LJ_SCRIPT_OPTIONS = (
    "--pythonpath", "--worker-config", "--print-options", "--dry-run", "--queues",
    "--queue-model", "--error-model", "--worker-class", "--callback", "--logger-name",
    "--logger-level", "--save-errors", "--no-save-errors", "--save-tracebacks",
    "--no-save-tracebacks", "--max-loops", "--max-duration", "--terminate-gracefuly",
    "--no-terminate-gracefuly", "--timeout", "--fetch-priorities-delay",
    "--fetch-delayed-delay", "--requeue-times", "--requeue-priority-delta",
    "--requeue-delay-delta", "--database", "--no-title", "--version", "--help", "-h",
)

#: every public name of redis-limpyd-jobs, by the section of the page that maps it
LJ_NAMES: dict[str, tuple[str, ...]] = {
    "Imports and connection": (
        "limpyd_jobs", "STATUSES", "Job", "Queue", "Error", "Worker", "WorkerConfig",
        "LOGGER_NAME", "BaseJobsModel", "use_database", "LimpydJobsException",
        "ConfigurationException",
    ),
    "Statuses": ("WAITING", "DELAYED", "RUNNING", "SUCCESS", "ERROR", "CANCELED", "by_value"),
    "Job": (
        # fields
        "identifier", "status", "priority", "added", "start", "end", "tries",
        "delayed_until", "queued", "cancel_on_error",
        # attributes
        "queue_model", "queue_name", "always_cancel_on_error",
        # properties and methods
        "ident", "must_be_cancelled_on_error", "duration", "run", "requeue",
        "enqueue_or_delay", "on_started", "on_success", "on_error", "on_skipped",
        "on_requeued", "on_delayed",
        # class methods
        "add_job", "get_model_repr", "get_from_ident",
    ),
    "Queue": (
        "name", "priority", "waiting", "success", "error", "delayed", "first_delayed",
        "first_delayed_time", "delay_job", "enqueue_job", "requeue_delayed_jobs",
        "get_queue", "get_waiting_keys", "count_waiting_jobs", "count_delayed_jobs",
        "get_all", "get_all_by_priority",
    ),
    "Error": (
        "job_model_repr", "job_pk", "identifier", "idenfitier", "queue_name", "date", "time",
        "type", "code", "message", "traceback", "datetime", "add_error", "collection_for_job",
    ),
    "Worker": (
        *LJ_WORKER_PARAMETERS, "terminate_gracefully",
        # other attributes
        "keys", "status", "logger", "num_loops", "end_forced", "end_signal_caught",
        "start_date", "end_date", "wanted_end_date", "connection", "parameters",
        # methods
        "__init__", "handle_end_signal", "stop_handling_end_signal", "set_logger",
        "must_stop", "wait_for_job", "get_job", "get_queue", "catch_end_signal", "execute",
        "update_keys", "run", "run_started", "run_ended", "job_skipped",
        "job_skipped_message", "job_started", "job_started_message", "job_success",
        "job_success_message", "job_delayed", "job_delayed_message", "job_error",
        "job_error_message", "job_requeue_message", "additional_error_fields",
        "requeue_job", "id", "elapsed", "log", "set_status", "count_waiting_jobs",
        "count_delayed_jobs",
    ),
    "WorkerConfig and the script": ("limpyd-jobs-worker", "WorkerConfig", *LJ_SCRIPT_OPTIONS),
    "Exceptions": ("LimpydJobsException", "ConfigurationException"),
}

LITERAL = re.compile(r"``(?!\s)(.+?)(?<!\s)``", re.S)
DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")


@pytest.fixture(autouse=True)
def clean():
    """Replaces the conftest's fixture of the same name: these tests need no Redis."""
    yield


def literals(text: str) -> list[str]:
    """The inline literals of `text`, their line breaks made spaces."""
    return [" ".join(found.split()) for found in LITERAL.findall(text)]


def sections(text: str) -> dict[str, str]:
    """The text of each section of the page (a title underlined with '='), subsections
    included; the page title (over- and underlined) and what precedes the first section
    are left out."""
    lines = text.splitlines()
    found: dict[str, list[str]] = {}
    current: list[str] | None = None
    for index, line in enumerate(lines):
        below = lines[index + 1] if index + 1 < len(lines) else ""
        above = lines[index - 1] if index else ""
        is_title = (line.strip() and not line[0].isspace() and below
                    and set(below) == {"="} and len(below) >= len(line.rstrip())
                    and not (above and set(above) == {"="}))
        if is_title:
            current = found.setdefault(line.strip(), [])
        elif current is not None:
            current.append(line)
    return {title: "\n".join(body) for title, body in found.items()}


_worker: Any = None


def worker() -> Any:
    """A worker instance, for the attributes its constructor sets (made once, no Redis)."""
    global _worker
    if _worker is None:
        from limpyd_blueque import Worker

        _worker = Worker(queues="porting-doc")
    return _worker


def import_path(path: str) -> Any:
    """The object at dotted `path`: the longest importable module, then attributes."""
    parts = path.split(".")
    for end in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:end]))
        except ImportError:
            continue
        for part in parts[end:]:
            obj = getattr(obj, part)
        return obj
    raise ImportError(path)


def resolves(name: str) -> bool:
    """True when the limpyd-blueque name `name` (dotted, from one of `ROOTS`) exists: as
    attributes from its root, a model's field (`has_field`), or an attribute a worker
    instance has."""
    root, *rest = name.split(".")
    try:
        obj = import_path(ROOTS[root])
    except (ImportError, AttributeError):
        return False
    for index, part in enumerate(rest):
        if hasattr(obj, part):
            obj = getattr(obj, part)
            continue
        last = index == len(rest) - 1
        has_field = getattr(obj, "has_field", None)
        if last and isinstance(obj, type) and callable(has_field) and has_field(part):
            return True
        if index == 0 and root == "Worker" and hasattr(worker(), part):
            obj = getattr(worker(), part)
            continue
        return False
    return True


def blueque_names(text: str) -> list[str]:
    """The limpyd-blueque names of `text`: each inline literal starting with a dotted name
    whose first part is one of `ROOTS` (what follows the name, such as a call, is not
    part of it)."""
    names = []
    for literal in literals(text):
        match = DOTTED.match(literal)
        if match and match.group().split(".")[0] in ROOTS:
            names.append(match.group())
    return names


@pytest.fixture(scope="module")
def page() -> str:
    return PAGE.read_text(encoding="utf-8")


def test_every_limpyd_blueque_name_exists(page):
    names = blueque_names(page)
    assert len(set(names)) > 150, "the page should name limpyd-blueque's API from its roots"
    missing = sorted({name for name in names if not resolves(name)})
    assert not missing, f"names on docs/porting.rst that limpyd-blueque does not have: {missing}"


def test_every_limpyd_jobs_name_is_mapped_in_its_section(page):
    found = sections(page)
    assert set(LJ_NAMES) <= set(found), f"sections missing: {set(LJ_NAMES) - set(found)}"
    missing = {}
    for title, names in LJ_NAMES.items():
        shown = set(literals(found[title]))
        absent = [name for name in names if name not in shown]
        if absent:
            missing[title] = absent
    assert not missing, f"redis-limpyd-jobs names not mapped: {missing}"


def test_every_limpyd_jobs_worker_parameter_appears(page):
    shown = set(literals(sections(page)["Worker"]))
    assert [name for name in LJ_WORKER_PARAMETERS if name not in shown] == []


def test_every_option_exists_in_one_of_the_scripts(page):
    from limpyd_blueque.config import WorkerConfig

    parser = WorkerConfig([]).parser
    ours = {option for action in parser._actions for option in action.option_strings}
    options = {re.split(r"[=\s]", literal)[0] for literal in literals(page)
               if literal.startswith("--")}
    unknown = sorted(options - ours - set(LJ_SCRIPT_OPTIONS))
    assert not unknown, f"options of neither blueque-worker nor limpyd-jobs-worker: {unknown}"
    # the options that keep their name exist in blueque-worker
    kept = set(LJ_SCRIPT_OPTIONS) - {"--terminate-gracefuly", "--no-terminate-gracefuly",
                                     "--fetch-priorities-delay", "--fetch-delayed-delay",
                                     "--database"}
    assert sorted(kept - ours) == []


def test_the_resolver_refuses_what_does_not_exist():
    assert resolves("Job.add_job") and resolves("Job.started_at") and resolves("Worker.status")
    assert resolves("limpyd_blueque.config.WorkerConfig") and resolves("Worker.queue_model.client")
    assert not resolves("Queue.get_queue")
    assert not resolves("Job.added")
    assert not resolves("Worker.update_keys")
    assert not resolves("limpyd_blueque.NoSuchName")


def test_the_page_is_valid_restructuredtext(page):
    core = pytest.importorskip("docutils.core")
    core.publish_string(page, writer_name="null",
                        settings_overrides={"report_level": 2, "halt_level": 2})
