"""The check of the built pages (docs/_ext/built_pages.py): what a reader sees as broken
and ``sphinx-build -W`` alone lets through, such as the red ERROR box that the Furo theme
paints over a ``.. contents::`` table. The site's own build runs it (CI builds the site
with ``-W``); here it is shown to find each kind of problem, in pages as Sphinx writes
them, and to fail a real build."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
sys.path.insert(0, str(DOCS / "_ext"))

from built_pages import main, page_findings, site_findings  # noqa: E402 - after the path


@pytest.mark.parametrize("html", [
    # docutils' own rendering of a message it could not raise as a warning
    '<div class="system-message" id="id1"><p class="system-message-title">System Message: '
    'ERROR/3 (<span class="docutils literal">page.rst</span>, line 3)</p>'
    '<p>Unknown directive type "tabel".</p></div>',
    # a reference docutils could not resolve, left in the text
    '<p>See <a class="problematic" href="#id2" id="id3">`the table`_</a>.</p>',
    # `.. contents::`, as Sphinx writes it: Furo paints it red, with its "ERROR" in CSS
    '<nav class="contents local" id="contents"><ul><li><p><a class="reference internal" '
    'href="#first">First</a></p></li></ul></nav>',
    '<div class="contents topic" id="on-this-page"><p class="topic-title">On this page</p>'
    '</div>',
    # an error message in an admonition, or shaped as one in the text
    '<div class="admonition error"><p class="admonition-title">Error</p>'
    '<p>ERROR in the generated table</p></div>',
    "<p>ERROR: the settings table could not be generated</p>",
    # the word alone, outside code: written as code when it is a log level or a quote
    "<p>its level: DEBUG, INFO, WARNING, ERROR or a number</p>",
])
def test_each_kind_of_problem_is_found(html):
    assert page_findings(f"<html><body><article>{html}</article></body></html>")


@pytest.mark.parametrize("html", [
    # a log level, as code, in a code block, in an API signature
    '<p><code class="docutils literal notranslate"><span class="pre">ERROR</span></code></p>',
    '<div class="highlight-text notranslate"><div class="highlight"><pre><span></span>'
    "ERROR: cannot reach Redis\n</pre></div></div>",
    '<dt class="sig sig-object py"><em class="sig-param"><span class="n"><span class="pre">'
    'level</span></span><span class="o"><span class="pre">=</span></span><span '
    'class="default_value"><span class="pre">\'ERROR\'</span></span></em></dt>',
    # a table of contents that says it is one on purpose, as Furo allows
    '<nav class="contents local this-will-duplicate-information-and-it-is-still-useful-here">'
    "</nav>",
    # Furo's own sidebar and table of contents
    '<div class="toc-tree"><ul><li><a class="reference internal" href="#">Page</a></li>'
    "</ul></div>",
])
def test_what_is_fine_is_not_found(html):
    assert page_findings(f"<html><body><article>{html}</article><br></body></html>") == []


def test_the_script_reports_each_page_and_fails(tmp_path, capsys):
    (tmp_path / "good.html").write_text("<p>fine</p>")
    (tmp_path / "bad.html").write_text('<nav class="contents local"><p>Intro</p></nav>')
    (tmp_path / "_static").mkdir()
    (tmp_path / "_static" / "skipped.html").write_text("<p>ERROR: not a page</p>")
    assert [page.name for page, _ in site_findings(tmp_path)] == ["bad.html"]
    assert main([str(tmp_path)]) == 1
    assert capsys.readouterr().out.startswith("bad.html: a '.. contents::' table")
    (tmp_path / "bad.html").unlink()
    assert main([str(tmp_path)]) == 0


def build(source: Path, page: str, out: Path) -> subprocess.CompletedProcess[str]:
    """`sphinx-build -n -W --keep-going` (as CI runs it) of a one-page site, themed with
    Furo and extended with the site's own extension."""
    source.mkdir()
    (source / "conf.py").write_text(textwrap.dedent(f"""\
        import sys
        sys.path.insert(0, {str(DOCS / "_ext")!r})
        extensions = ["blueque_docs"]
        html_theme = "furo"
    """))
    (source / "index.rst").write_text(page)
    return subprocess.run([sys.executable, "-m", "sphinx", "-n", "-W", "--keep-going", "-q",
                           "-b", "html", str(source), str(out)],
                          capture_output=True, text=True, timeout=120)


PAGE = """\
=====
Title
=====

{contents}

First
=====

Text.

Second
======

More text.
"""


def test_a_contents_table_fails_the_build_that_w_alone_lets_through(tmp_path):
    pytest.importorskip("sphinx")
    pytest.importorskip("furo")
    clean = build(tmp_path / "clean", PAGE.format(contents=""), tmp_path / "clean_html")
    assert clean.returncode == 0, clean.stderr
    broken = build(tmp_path / "broken",
                   PAGE.format(contents=".. contents::\n   :local:"), tmp_path / "broken_html")
    assert broken.returncode != 0
    assert "index.html shows a '.. contents::' table" in broken.stderr
