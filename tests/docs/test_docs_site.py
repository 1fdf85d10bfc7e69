"""What the documentation site promises, checked without building it (CI builds it with
`sphinx-build -n -W`): the API reference covers every exported name, every page is in
the site's table of contents, and the changelog's newest entry is this version."""

from __future__ import annotations

import re
from pathlib import Path

import limpyd_blueque

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_the_api_reference_documents_every_exported_name():
    api = (DOCS / "api.rst").read_text()
    documented = set(re.findall(r"^\.\. auto\w+:: limpyd_blueque\.(\w+)\s*$", api, re.M))
    assert set(limpyd_blueque.__all__) - documented == set()


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
