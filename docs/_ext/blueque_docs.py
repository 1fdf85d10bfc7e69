"""This site's own Sphinx extension: the references that are generated from the code, and
the links between pages checked as references.

* ``.. blueque-settings::`` is the table of worker settings, read from
  `limpyd_blueque.worker.settings.SETTINGS`, the one table the `Worker` attributes, its keyword
  checks and the `blueque-worker` options come from.
* ``.. blueque-help:: blueque`` (or ``blueque-worker``) is a command's ``--help``, and one
  section per subcommand, as the command's own parser prints them.
* The pages link to one another as GitHub shows them (``keys.rst <keys.rst>``_, and
  ``docs/keys.rst`` from README.rst): those links become ``:doc:`` references here, so
  that ``sphinx-build -n -W`` fails on a link to a page that does not exist. Links to
  files outside the site (``bench/README.md``) become the file's name, and any other
  relative link, which would lead nowhere on the site, is a warning.
* After an HTML build, each built page is read for what a reader would see as broken and
  ``-W`` does not catch: a docutils system message, an "ERROR", a ``.. contents::`` box
  (`built_pages`); each finding is a warning, so that ``sphinx-build -W`` fails.
"""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.parsers.rst import Directive
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.util import logging
from sphinx.util.nodes import nested_parse_with_titles

PAGE_LINK = re.compile(r"`([^`<]+?)\s*<(?:docs/)?([\w/-]+)\.rst>`_")
FILE_LINK = re.compile(r"`([^`<]+?)\s*<((?:bench|tests|limpyd_blueque|scripts)/[^>]+)>`_")
#: files of the repository that the site shows as a page of its own
PAGES_OF_FILES = {"CHANGELOG": "changelog"}
#: the width of the generated `--help` texts
HELP_COLUMNS = "88"


def checked_links(text: str) -> str:
    """`text` with its links to pages as ``:doc:`` references, to files as file names."""
    def page(match: re.Match[str]) -> str:
        label, target = match[1].strip(), match[2]
        target = PAGES_OF_FILES.get(target, target)
        if label.removeprefix("docs/") == f"{match[2]}.rst":
            return f":doc:`/{target}`"  # the page's own title
        return f":doc:`{label} </{target}>`"
    return FILE_LINK.sub(lambda match: f"``{match[2]}``", PAGE_LINK.sub(page, text))


def on_source_read(app: Sphinx, docname: str, source: list[str]) -> None:
    source[0] = checked_links(source[0])


def on_include_read(app: Sphinx, path: Any, parent: str, content: list[str]) -> None:
    content[0] = checked_links(content[0])


def check_relative_links(app: Sphinx, doctree: nodes.document, docname: str) -> None:
    """Warn of each link that is neither a reference Sphinx resolved, nor a URL, nor an
    anchor of the page: on the site it would lead nowhere."""
    for reference in doctree.findall(nodes.reference):
        uri = reference.get("refuri", "")
        if uri and not reference.get("internal") and not re.match(r"[a-z]+:|#", uri):
            logging.getLogger(__name__).warning(
                "link to %r, which is not a page of this site", uri,
                location=reference, type="blueque", subtype="link")


def check_built_pages(app: Sphinx, exception: Exception | None) -> None:
    """After an HTML build, a warning for each problem `built_pages` finds on a page."""
    if exception is not None or app.builder.format != "html":
        return
    from built_pages import site_findings

    outdir = Path(app.outdir)
    for page, finding in site_findings(outdir):
        built = page.relative_to(outdir)
        docname = built.with_suffix("").as_posix()  # the page's source, when it has one
        logging.getLogger(__name__).warning(
            "the built page %s shows %s", built, finding,
            location=docname if docname in app.env.all_docs else None,
            type="blueque", subtype="page")


class Generated(Directive):
    """A directive whose content is rst text made by `lines`."""

    def lines(self) -> list[str]:
        raise NotImplementedError

    def run(self) -> list[nodes.Node]:
        container = nodes.section() if self.has_sections else nodes.container()
        nested_parse_with_titles(self.state, StringList(self.lines(), "<generated>"),
                                 container)
        return list(container.children)

    has_sections = False


class SettingsTable(Generated):
    """``.. blueque-settings::``: name, option, kind, default, bounds and help of each."""

    def lines(self) -> list[str]:
        from limpyd_blueque.worker.settings import SETTINGS

        out = [".. list-table::", "   :header-rows: 1", "   :widths: 22 14 14 18 32", "",
               "   * - Setting", "     - Kind", "     - Default", "     - Bounds",
               "     - Meaning"]
        for setting in SETTINGS:
            option = f"``{setting.option}``" if setting.cli else "no option"
            default = setting.shown_default
            out += [f"   * - ``{setting.name}``", "",
                    f"       {option}",
                    f"     - {setting.kind}" + (" or None" if setting.optional else ""),
                    f"     - {literal(default) if default else ''}",
                    f"     - {bounds(setting)}",
                    f"     - {escape(setting.help)}"]
        return out


def bounds(setting: Any) -> str:
    """The values a setting accepts beyond its kind, in words."""
    if setting.choices:
        return "one of " + ", ".join(f"``{choice}``" for choice in setting.choices)
    parts = []
    if setting.minimum is not None:
        parts.append(f"{'>' if setting.above else '≥'} {number(setting.minimum)}")
    if setting.maximum is not None and setting.kind in ("int", "float"):
        parts.append(f"≤ {number(setting.maximum)}")
    return ", ".join(parts)


def number(value: float) -> str:
    """A bound as people read it: 1,000,000,000 rather than 1e+09."""
    return f"{int(value):,}" if float(value).is_integer() else f"{value:g}"


def literal(text: str) -> str:
    return f"``{text}``"


def escape(text: str) -> str:
    """Plain text with rst's inline markup characters escaped."""
    return re.sub(r"([*`|_\\])", r"\\\1", text)


class CommandHelp(Generated):
    """``.. blueque-help:: blueque``: the command's ``--help``, then a section per
    subcommand (each nested subcommand in a section of its own)."""

    required_arguments = 1
    has_sections = True

    def lines(self) -> list[str]:
        os.environ["COLUMNS"] = HELP_COLUMNS  # argparse reads it for each help text
        return help_sections(command_parser(self.arguments[0]), level=0)


def command_parser(name: str) -> argparse.ArgumentParser:
    from limpyd_blueque.cli import admin
    from limpyd_blueque.cli import worker_script as config

    if name == "blueque":
        return admin.make_parser()
    if name == "blueque-worker":
        # the parser alone: WorkerConfig() would parse this process's own arguments
        return config.WorkerConfig.make_parser(object.__new__(config.WorkerConfig))
    raise ValueError(f"no command named {name!r}: blueque or blueque-worker")


UNDERLINES = "-~^"


def help_sections(parser: argparse.ArgumentParser, level: int) -> list[str]:
    """The parser's help as a literal block, then a section per subcommand."""
    out = ["::", ""]
    out += ["    " + line if line else "" for line in parser.format_help().splitlines()]
    out.append("")
    for sub in subcommands(parser):
        title = f"``{sub.prog}``"
        out += [title, UNDERLINES[level] * len(title), ""]
        out += help_sections(sub, level + 1)
    return out


def subcommands(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """The parsers of a parser's subcommands, in the order it lists them (argparse has no
    public way to reach them: they are the choices of its subparsers action)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return list(dict.fromkeys(action.choices.values()))  # aliases share a parser
    return []


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("source-read", on_source_read)
    app.connect("include-read", on_include_read)
    app.connect("doctree-resolved", check_relative_links)
    app.connect("build-finished", check_built_pages)
    app.add_directive("blueque-settings", SettingsTable)
    app.add_directive("blueque-help", CommandHelp)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
