"""The quick start of README.rst, read from the README itself: its lines, its code blocks,
and its length as a reader counts it (test_quick_start.py runs it; test_doc_examples.py
leaves its blocks to that test)."""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.rst"
TITLE = "Quick start"
DIRECTIVE = re.compile(r"^\.\. code-block:: *(\w+) *$")
OPTION = re.compile(r"^ +:(\w+): *(.*)$")
#: a paragraph that introduces a file (PyPI's renderer, plain docutils, has no captions)
FILE = re.compile(r"``([\w/.-]+\.py)``:$")


@dataclass
class Block:
    """A ``.. code-block::`` of the quick start."""

    language: str
    file: str | None  # the file it is, when the paragraph before ends with ``name.py``:
    code: str
    line: int  # of the directive, from 1


def is_underline(line: str, title: str) -> bool:
    return (bool(title.strip()) and not title[0].isspace() and len(line) >= len(title)
            and len(set(line)) == 1 and line[0] in "=-~^*+#")


def section() -> tuple[int, list[str]]:
    """The line number (from 1) of the first line after the title's underline, and the
    lines of the section up to the next title."""
    lines = README.read_text(encoding="utf-8").splitlines()
    start = lines.index(TITLE) + 2
    assert is_underline(lines[start - 1], TITLE)
    end = next(number for number in range(start, len(lines) - 1)
               if is_underline(lines[number + 1], lines[number]))
    return start + 1, lines[start:end]


def line_range() -> range:
    """The README's line numbers (from 1) of the whole section, title included."""
    first, lines = section()
    return range(first - 2, first + len(lines))


def blocks() -> list[Block]:
    first, lines = section()
    found = []
    for number, line in enumerate(lines):
        match = DIRECTIVE.match(line)
        if not match:
            continue
        body = []
        following = iter(lines[number + 1:])
        for option_line in following:
            if not OPTION.match(option_line):
                break
        for body_line in following:
            if body_line.strip() and not body_line[0].isspace():
                break
            body.append(body_line)
        intro = next((line for line in reversed(lines[:number]) if line.strip()), "")
        file = FILE.search(intro.strip())
        found.append(Block(match[1], file[1] if file else None,
                           textwrap.dedent("\n".join(body)).strip() + "\n", first + number))
    return found


def reader_lines() -> list[str]:
    """The lines a reader reads: prose and code, without blank lines, the directives and
    their options (rendered as a frame and a caption, not as lines)."""
    return [line for line in section()[1]
            if line.strip() and not DIRECTIVE.match(line) and not OPTION.match(line)]
