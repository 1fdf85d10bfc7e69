"""What the documentation site promises, checked without building it (CI builds it with
`sphinx-build -n -W`): the API reference covers every exported name and starts with what
applications call, every page is in the site's table of contents, no page adds a table
of contents of its own, the README renders on PyPI as on the site, and the changelog's
newest entry is this version."""

from __future__ import annotations

import io
import re
from pathlib import Path

import limpyd_blueque

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_the_api_reference_documents_every_exported_name():
    api = (DOCS / "api.rst").read_text()
    documented = set(re.findall(r"^\.\. auto\w+:: limpyd_blueque\.(\w+)\s*$", api, re.M))
    assert set(limpyd_blueque.__all__) - documented == set()


def test_the_api_reference_starts_with_what_applications_call_and_ends_with_internals():
    api = (DOCS / "api.rst").read_text()
    documented = re.findall(r"^\.\. auto\w+:: limpyd_blueque\.([\w.]+)\s*$", api, re.M)
    assert documented[:7] == ["use_redis", "Queue", "Job", "Worker", "Error", "Client", "aio"]
    internals = api.index("\nInternals\n=========\n")
    assert api.index(".. autoclass:: limpyd_blueque.KeySpace\n") > internals


def test_no_page_adds_a_table_of_contents_of_its_own():
    """Furo shows each page's sections beside it, and paints a `.. contents::` table red
    (docs/_ext/built_pages.py fails the build on one; this says so before any build)."""
    pages = [DOCS.parent / "README.rst", *DOCS.glob("*.rst")]
    assert [page.name for page in pages
            if re.search(r"^\s*\.\. contents::", page.read_text(), re.M)] == []


def test_the_readme_renders_without_a_message_where_docutils_alone_renders_it():
    """PyPI and GitHub render README.rst with docutils, without Sphinx: an option only
    Sphinx knows (a code block's ``:caption:``) is an error box on the project's page."""
    from docutils.core import publish_parts
    from docutils.writers import get_writer_class

    messages = io.StringIO()
    publish_parts((DOCS.parent / "README.rst").read_text(), writer=get_writer_class("html")(),
                  settings_overrides={"warning_stream": messages, "report_level": 2,
                                      "halt_level": 5})
    assert messages.getvalue() == ""


def test_every_page_is_in_the_table_of_contents():
    index = (DOCS / "index.rst").read_text()
    listed = set(re.findall(r"^   (\w+)$", index, re.M))
    pages = {page.stem for page in DOCS.glob("*.rst")} - {"index"}
    assert pages - listed == set()
    assert listed - pages == set()


def test_the_changelog_starts_with_this_version():
    changelog = (DOCS.parent / "CHANGELOG.rst").read_text()
    versions = re.findall(r"^(\d+\.\d+\.\d+) \(\d{4}-\d{2}-\d{2}\)$", changelog, re.M)
    assert versions and versions[0] == limpyd_blueque.__version__
