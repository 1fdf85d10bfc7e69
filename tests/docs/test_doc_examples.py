"""Every Python code block of README.rst and of the pages in docs/ runs here, against the
tests' private Redis, so that no example of the documentation can rot.

Sybil (a library made for this) finds the blocks: each ``.. code-block:: python``, and
each ``.. invisible-code-block: python``, an rst comment that readers do not see, for
the set-up a reader does not need (a task to run, a name the text assumes). The blocks of
a document run in their order, in one namespace, in a temporary working directory, with
the URL the documentation shows (``redis://localhost:6379/0``) replaced by the tests' own.
The README's quick start is left out here: test_quick_start.py runs it as a new user does,
with its shell commands and its worker.
"""

from __future__ import annotations

import re
import subprocess
import textwrap
from pathlib import Path

import pytest
from readme_quick_start import line_range as quick_start_lines
from sybil import Example, Sybil
from sybil.evaluators.python import pad
from sybil.parsers.rest import CodeBlockParser

from limpyd_blueque import BluequeModel

ROOT = Path(__file__).resolve().parents[2]
#: the server every example names
DOCUMENTED_URL = "redis://localhost:6379/0"
#: the pages whose examples a new user follows step by step: each must have some
GUIDES = ("README.rst", "docs/first_long_task.rst", "docs/production.rst",
          "docs/porting_blueque.rst", "docs/limits.rst", "docs/workflows.rst",
          "docs/bounds.rst")


def documents() -> list[str]:
    """README.rst and every page of docs/ that holds a Python code block."""
    return [str(page.relative_to(ROOT)) for page in pages()
            if re.search(r"code-block:?: python", page.read_text(encoding="utf-8"))]


def pages() -> list[Path]:
    return [ROOT / "README.rst", *sorted(page for page in (ROOT / "docs").rglob("*.rst")
                                          if "_build" not in page.parts)]


def literal_blocks(text: str) -> list[str]:
    """The bodies of the plain literal blocks (after a paragraph ending with ``::``)."""
    lines, blocks = text.splitlines(), []
    for number, line in enumerate(lines):
        if not line.rstrip().endswith("::") or line.lstrip().startswith(".."):
            continue
        body = []
        for following in lines[number + 1:]:
            if following.strip() and not following.startswith(" "):
                break
            body.append(following)
        blocks.append(textwrap.dedent("\n".join(body)).strip())
    return blocks


def looks_like_python(block: str) -> bool:
    """Python a reader would run (it compiles, and imports or calls something)."""
    try:
        compile(block, "<block>", "exec")
    except SyntaxError:
        return False
    return bool(re.search(r"^\s*(import|from)\s|\w\(", block, re.M))


def evaluator(url: str):
    """Runs one block as Python, on the server at `url` instead of the documented one."""
    def evaluate(example: Example) -> None:
        source = example.parsed.replace(DOCUMENTED_URL, url)
        code = compile(pad(source, example.line + example.parsed.line_offset),
                       example.path, "exec", dont_inherit=True)
        exec(code, example.namespace)
        example.namespace.pop("__builtins__", None)
    return evaluate


def test_python_is_never_in_a_plain_literal_block_which_the_tests_would_not_run():
    found = [(str(page.relative_to(ROOT)), block.splitlines()[0]) for page in pages()
             for block in literal_blocks(page.read_text(encoding="utf-8"))
             if looks_like_python(block)]
    assert found == []


def test_every_guide_has_examples_that_run():
    assert set(GUIDES) <= set(documents())


@pytest.mark.parametrize("document", documents())
def test_code_blocks_run(document, redis_url, database, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("REDIS_URL", redis_url)
    parser = CodeBlockParser(language="python", evaluator=evaluator(redis_url))
    examples = [example for example in Sybil([parser]).parse(ROOT / document)
                if not (document == "README.rst" and example.line in quick_start_lines())]
    namespace: dict = {}
    try:
        for example in examples:
            example.evaluate()
            namespace = example.namespace
    finally:
        BluequeModel.use_database(database)  # a `use_redis` of an example bound another
        # a process a page started (a worker) never outlives it, even when it fails half
        # way: it would take the tasks of the next page run on this server
        for value in list(namespace.values()):
            if isinstance(value, subprocess.Popen) and value.poll() is None:
                value.kill()
                value.wait(10)
    assert examples
