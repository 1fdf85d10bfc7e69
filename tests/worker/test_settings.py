"""settings.py is the one table of worker settings: checks, command line and docs follow it."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from limpyd_blueque import ConfigurationError, Job
from limpyd_blueque.cli.worker_script import WorkerConfig
from limpyd_blueque.worker.settings import SETTINGS, Setting, WorkerSettings

README = Path(__file__).parents[2] / "README.rst"
BY_NAME = {setting.name: setting for setting in SETTINGS}
NUMBERS = [setting for setting in SETTINGS if setting.kind in ("int", "float")]
BOUNDED = [setting for setting in NUMBERS if setting.minimum is not None]
#: a valid command-line text per kind, and what the parser makes of it
SAMPLES = {
    "int": ("7", 7), "float": ("2.5", 2.5), "queues": ("a,b", "a,b"), "str": ("x", "x"),
    "level": ("DEBUG", "DEBUG"), "callable": ("jobs.callback", "jobs.callback"),
    "model": ("jobs.RecordingJob", "jobs.RecordingJob"),
    "models": ("jobs.RecordingJob,jobs.OtherJob", "jobs.RecordingJob,jobs.OtherJob"),
    "names": ("KeyError,app.Fatal", "KeyError,app.Fatal"), "size": ("512M", 512 * 1024**2),
}


def readme_settings_rows() -> dict[str, tuple[str, str]]:
    """{setting: (option, meaning)} from the simple table of README's "Settings" section."""
    section = README.read_text().split("\nSettings\n--------\n", 1)[1]
    lines = section.splitlines()
    borders = [index for index, line in enumerate(lines) if re.fullmatch(r"[= ]+", line)]
    starts = [match.start() for match in re.finditer(r"=+", lines[borders[0]])]
    rows = {}
    for line in lines[borders[1] + 1:borders[2]]:
        name, option, meaning = (line[start:end].strip().replace("``", "")
                                 for start, end in zip(starts, [*starts[1:], None]))
        rows[name] = (option, meaning)
    return rows


def sample(setting: Setting[object]) -> tuple[str, object]:
    """A valid command-line text for `setting`, and what the parser makes of it."""
    if setting.kind == "choice":
        return setting.choices[-1], setting.choices[-1]
    if setting.name == "listener_id":
        return "box.example_17", "box.example_17"
    if setting.name == "retry_jitter":  # a fraction
        return "0.25", 0.25
    return SAMPLES[setting.kind]


def parse(*argv: str) -> dict[str, object]:
    """The worker options `blueque-worker` makes of `argv` (no worker is built)."""
    return vars(WorkerConfig(list(argv)).options)


# -- the docs -----------------------------------------------------------------------------------
def test_the_readme_table_lists_every_setting_and_no_other():
    assert list(readme_settings_rows()) != []
    assert set(readme_settings_rows()) == set(WorkerSettings.parameters)


@pytest.mark.parametrize("setting", [s for s in SETTINGS if s.cli], ids=lambda s: s.name)
def test_the_readme_gives_the_option_of_each_setting(setting):
    option, _ = readme_settings_rows()[setting.name]
    flag = setting.option[2:]
    if setting.kind == "bool":
        assert option in (f"--[no-]{flag}", f"--{flag} / --no-{flag}")
    else:
        assert option == setting.option


@pytest.mark.parametrize("setting", [s for s in SETTINGS if s.cli and s.shown_default],
                         ids=lambda s: s.name)
def test_the_readme_shows_the_default_of_each_setting(setting):
    _, meaning = readme_settings_rows()[setting.name]
    assert meaning.endswith(f"({setting.shown_default})")


def test_the_readme_names_the_option_driving_update_title():
    assert readme_settings_rows()["update_title"][0] == "--no-title"


# -- the command line ---------------------------------------------------------------------------
@pytest.mark.parametrize("setting", [s for s in SETTINGS if s.cli and s.kind != "bool"],
                         ids=lambda s: s.name)
def test_every_setting_has_a_generated_option(setting):
    text, value = sample(setting)
    assert parse(f"{setting.option}={text}")[setting.name] == value
    assert setting.name not in parse()  # absent: the worker's default applies


@pytest.mark.parametrize("setting", [s for s in SETTINGS if s.kind == "bool" and s.cli],
                         ids=lambda s: s.name)
def test_every_boolean_setting_has_an_option_and_its_negation(setting):
    flag = setting.option[2:]
    assert parse(f"--{flag}")[setting.name] is True
    assert parse(f"--no-{flag}")[setting.name] is False


def test_the_help_shows_each_setting_with_its_default():
    help_text = " ".join(WorkerConfig(["--queues=q"]).make_parser().format_help().split())
    for setting in SETTINGS:
        if setting.cli:
            assert setting.option in help_text
            assert setting.help in help_text
    assert "lease length in seconds (default: 60)" in help_text
    assert "seconds between lease renewals (default: ttr / 3)" in help_text
    assert "--update-title" not in help_text


def test_choices_come_from_the_table():
    assert parse("--on-terminate=requeue")["on_terminate"] == "requeue"
    with pytest.raises(SystemExit):
        parse("--on-terminate=later")


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "1e999", "True", "five"])
@pytest.mark.parametrize("setting", NUMBERS, ids=lambda s: s.name)
def test_the_command_line_refuses_a_non_finite_or_non_numeric_value(setting, text, capsys):
    with pytest.raises(SystemExit) as exit_info:
        WorkerConfig(["--queues=q", f"{setting.option}={text}"])
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert len(error.strip().splitlines()) == 1
    assert f"argument {setting.option}: {text!r} " in error


def test_the_command_line_reports_the_problem_of_the_text_typed(capsys):
    for argv, message in [(["--ttr=nan"], "'nan' must be a finite number"),
                          (["--concurrency=0"], "'0' must be at least 1"),
                          (["--timeout=0"], "'0' must be above 0"),
                          (["--max-loops=1.5"], "'1.5' is not a whole number"),
                          (["--ttr=soon"], "'soon' is not a number")]:
        with pytest.raises(SystemExit):
            parse(*argv)
        assert message in capsys.readouterr().err


def test_command_line_numbers_keep_their_kind():
    options = parse("--ttr=120", "--max-loops=7", "--requeue-priority-delta=-3")
    assert (options["ttr"], options["max_loops"], options["requeue_priority_delta"]) == (
        120.0, 7, -3.0)
    assert isinstance(options["max_loops"], int) and isinstance(options["ttr"], float)


# -- Setting.check ------------------------------------------------------------------------------
@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("setting", NUMBERS, ids=lambda s: s.name)
def test_a_number_setting_refuses_nan_and_infinities(setting, value):
    expected = "must be a whole number" if setting.kind == "int" else "must be a finite number"
    with pytest.raises(ConfigurationError, match=f"^{setting.name} {expected}, not {value!r}$"):
        setting.check(value)


@pytest.mark.parametrize("value", [True, False, "5", b"5", [5]])
@pytest.mark.parametrize("setting", NUMBERS, ids=lambda s: s.name)
def test_a_number_setting_refuses_booleans_and_other_types(setting, value):
    kind = "a whole number" if setting.kind == "int" else "a number"
    with pytest.raises(ConfigurationError) as error:
        setting.check(value)
    assert str(error.value) == f"{setting.name} must be {kind}, not {value!r}"


def test_an_int_setting_refuses_a_float_and_a_float_setting_takes_an_int():
    with pytest.raises(ConfigurationError, match=r"max_loops must be a whole number, not 1\.5"):
        BY_NAME["max_loops"].check(1.5)
    assert BY_NAME["ttr"].check(90) == 90


@pytest.mark.parametrize("setting", BOUNDED, ids=lambda s: s.name)
def test_a_number_setting_keeps_its_bound(setting):
    low = setting.minimum
    assert setting.check(low + 1) == low + 1
    with pytest.raises(ConfigurationError) as error:
        setting.check(low - 1)
    bound = f"above {low}" if setting.above else f"at least {low}"
    assert str(error.value) == f"{setting.name} must be {bound}, not {low - 1!r}"
    if setting.above:
        with pytest.raises(ConfigurationError, match=f"must be above {low}"):
            setting.check(low)
    else:
        assert setting.check(low) == low


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.name)
def test_none_is_accepted_only_by_an_optional_setting(setting):
    if setting.optional:
        assert setting.check(None) is None
    else:
        with pytest.raises(ConfigurationError):
            setting.check(None)


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.name)
def test_every_default_but_the_queues_passes_its_own_check(setting):
    if setting.name == "queues":
        with pytest.raises(ConfigurationError, match="no queues: give at least one queue name"):
            setting.check(setting.default)
    else:
        assert setting.check(setting.default) == setting.default


@pytest.mark.parametrize("name, value, message", [
    ("queues", "", "no queues: give at least one queue name"),
    ("queues", ["a", "b*"], "invalid queue name 'b\\*'"),
    ("queues", 5, "queues must be queue names"),
    ("concurrency", 0, "concurrency must be at least 1, not 0"),
    ("timeout", "5", "timeout must be a number, not '5'"),
    ("max_loops", 1.5, "max_loops must be a whole number, not 1.5"),
    ("on_terminate", "later",
     "on_terminate must be one of wait, detach, requeue, release, not 'later'"),
    ("job_model", dict, "job_model must be a subclass of Job"),
    ("queue_model", Job, "queue_model must be a subclass of Queue"),
    ("callback", "not callable", "callback must be callable"),
    ("logger_level", "LOUD", "unknown logger level 'LOUD'"),
    ("logger_level", True, "unknown logger level True"),
    ("fork", 1, "fork must be True or False, not 1"),
    ("logger_name", 5, "logger_name must be a string, not 5"),
    ("listener_id", "no pid here", "invalid listener id"),
])
def test_a_bad_value_is_refused_with_a_message_naming_it(name, value, message):
    with pytest.raises(ConfigurationError, match=message):
        BY_NAME[name].check(value)


@pytest.mark.parametrize("name, value, normalized", [
    ("queues", "a, b", ["a", "b"]),
    ("queues", ("a", " b "), ["a", "b"]),
    ("logger_level", "debug", logging.DEBUG),
    ("logger_level", "INFO", logging.INFO),
    ("logger_level", 15, 15),
    ("listener_id", "box.example_17", "box.example_17"),
    ("on_terminate", "detach", "detach"),
])
def test_a_good_value_is_normalized(name, value, normalized):
    assert BY_NAME[name].check(value) == normalized


# -- the descriptor and the worker's class attributes ----------------------------------------
def test_a_setting_reads_as_its_default_on_the_class_and_on_an_instance():
    assert (WorkerSettings.ttr, WorkerSettings().ttr, WorkerSettings.max_loops) == (60, 60, 1000)
    assert isinstance(vars(WorkerSettings)["ttr"], Setting)
    assert not hasattr(Setting, "__set__")  # the instance's own value wins
    settings = WorkerSettings()
    settings.ttr = 5
    assert (settings.ttr, WorkerSettings.ttr) == (5, 60)


def test_the_table_order_is_the_parameters_order():
    assert WorkerSettings.parameters == tuple(setting.name for setting in SETTINGS)
    assert WorkerSettings.parameters[:3] == ("queues", "callback", "job_model")
    assert WorkerSettings.parameters[-1] == "update_title"
    assert len(set(WorkerSettings.parameters)) == len(SETTINGS) == 52


def test_configure_settings_checks_and_normalizes_every_setting():
    settings = WorkerSettings()
    settings.configure_settings({"queues": "a,b", "logger_level": "debug", "ttr": 10})
    assert (settings.queues, settings.logger_level, settings.ttr) == (["a", "b"], 10, 10)
    assert settings.max_attempts == 5
    assert set(vars(settings)) == set(WorkerSettings.parameters)


def test_configure_settings_refuses_unknown_names():
    with pytest.raises(ConfigurationError, match=r"^unknown worker option\(s\): colour, size$"):
        WorkerSettings().configure_settings({"queues": "q", "size": 1, "colour": "blue"})


def test_a_subclass_attribute_is_checked_like_a_keyword():
    class Slow(WorkerSettings):
        queues = "a,b"
        concurrency = 4

    slow = Slow()
    slow.configure_settings({})
    assert (slow.queues, slow.concurrency) == (["a", "b"], 4)
    slow = Slow()
    slow.configure_settings({"concurrency": 2})
    assert slow.concurrency == 2

    class Broken(WorkerSettings):
        queues = "q"
        ttr = float("nan")

    with pytest.raises(ConfigurationError) as from_attribute:
        Broken().configure_settings({})
    with pytest.raises(ConfigurationError) as from_keyword:
        WorkerSettings().configure_settings({"queues": "q", "ttr": float("nan")})
    assert str(from_attribute.value) == str(from_keyword.value) == (
        "ttr must be a finite number, not nan")
