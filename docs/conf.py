"""Sphinx configuration of the limpyd-blueque site: ``sphinx-build -n -W docs
docs/_build/html`` (the ``docs`` extra installs what it needs)."""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE / "_ext"), str(HERE.parent)]

import limpyd_blueque  # noqa: E402 - after the paths above

project = "limpyd-blueque"
author = "the limpyd-blueque developers"
copyright = "2026, " + author
release = limpyd_blueque.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
    "blueque_docs",
]
exclude_patterns = ["_build", "**/_build"]
html_theme = "furo"
html_title = f"limpyd-blueque {release}"
html_static_path = ["_static"]
templates_path: list[str] = []

# `name` in a docstring is code, as the docstrings mean it
default_role = "code"

# the API reference: members in the order of the source, type hints in the description
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": True}

# `-n`: every reference must resolve. The types of other libraries (redis-py, limpyd,
# the standard library's typing) are not documented here.
# Nor are the parts of the machinery that public signatures mention (architecture.rst
# describes them), nor type variables.
nitpick_ignore_regex = [
    (r"py:(class|obj|exc|data)", r"(aioredis|redis|limpyd|typing|collections|argparse|"
                                 r"datetime|logging|enum|types|concurrent|threading|"
                                 r"pathlib|builtins|_?io|re|json|os|signal|subprocess|asyncio)\..*"),
    (r"py:(class|obj)", r"limpyd_blueque\.(protocol\.(scripts|statistics|bounds|codecs|encryption)|"
                        r"worker\.(heartbeat|running|recovery|runners|messages|contract))\..*"),
    (r"py:(class|obj)", r"T|RunningTask|Reservation|Tally|Bounds|Controls|Codec|Keyring|"
                        r"TaskValues|limpyd_blueque\.models\.payload\.TaskValues"),
    (r"py:(class|obj)", r"limpyd_blueque\.[\w.]+\.(T|J|TaskCollectionManager|"
                        r"ReservedListField|ProgressReporter)"),
]
# `Queue` names the model in the models' signatures, and aio's own in aio's
suppress_warnings = ["ref.python"]

# `-b linkcheck` checks the site's own links (files, anchors); the links out of the site
# are left out: they are not this site's to keep, and CI may not reach them
linkcheck_ignore = [r"https?://"]
