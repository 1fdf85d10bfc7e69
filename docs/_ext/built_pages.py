"""The check of the built pages: what a reader would see as broken, which ``-W`` misses.

``sphinx-build -W`` fails on the warnings Sphinx logs, but some breakage only shows on
the page: a docutils system message left in the text, markup rendered as "problematic",
the word "ERROR" anywhere outside code (a log level or an example's output is code), or a
``.. contents::`` box, which the Furo theme paints red with
"ERROR: Adding a table of contents ... is unnecessary" (from its style sheet: the word is
in no page's text, so the box is found by its class).

`blueque_docs` runs this check after each HTML build and logs each finding as a warning,
so that ``sphinx-build -W`` fails on it; it also runs on a built site by itself::

    python3 docs/_ext/built_pages.py docs/_build/html

which prints each finding and exits with code 1 when there is any.
"""

from __future__ import annotations

import re
import sys
from html.parser import HTMLParser
from pathlib import Path

#: classes of elements that are a problem wherever they are, and what each one is
FLAGGED_CLASSES = {
    "system-message": "a docutils system message",
    "problematic": "markup that docutils could not resolve (shown as 'problematic')",
}
#: the class of ``.. contents::``, and the one that Furo accepts as meaning it on purpose
CONTENTS, FURO_ESCAPE = "contents", "this-will-duplicate-information-and-it-is-still-useful-here"
#: elements whose text is code (and classes that mark code inside Sphinx's markup): an
#: "ERROR" there is a log level or an example's output, not a message to the reader
CODE_TAGS = {"code", "pre", "kbd", "samp", "tt", "script", "style", "textarea"}
CODE_CLASSES = {"pre", "highlight", "literal"}
VOID_TAGS = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta",
             "source", "track", "wbr"}
#: "ERROR" anywhere outside code: a page names a log level or quotes a message as code
ADMONITION = "admonition"
ERROR_WORD = re.compile(r"\bERROR\b")


class PageScanner(HTMLParser):
    """Reads one page and lists its findings, each a line of text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.findings: list[str] = []
        #: the open elements: (tag, whether its text is code, what it is flagged as,
        #: whether it is an admonition)
        self.open: list[tuple[str, bool, str | None, bool]] = []
        self.flagged_text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        classes = set((dict(attrs).get("class") or "").split())
        flagged = next((what for name, what in FLAGGED_CLASSES.items() if name in classes),
                       None)
        if CONTENTS in classes and FURO_ESCAPE not in classes and tag in ("nav", "div"):
            flagged = ("a '.. contents::' table, shown by Furo as a red ERROR box (Furo "
                       "lists a page's sections beside it)")
        if tag in VOID_TAGS:
            if flagged:
                self.findings.append(flagged)
            return
        code = (tag in CODE_TAGS or bool(classes & CODE_CLASSES)
                or self.in_code())
        if flagged and not self.inside_flagged():
            self.flagged_text = []
        self.open.append((tag, code, flagged, ADMONITION in classes))

    def handle_endtag(self, tag: str) -> None:
        for depth in range(len(self.open) - 1, -1, -1):
            if self.open[depth][0] == tag:
                for _, _, flagged, _ in reversed(self.open[depth:]):
                    if flagged:
                        self.close_flagged(flagged)
                del self.open[depth:]
                return

    def handle_data(self, data: str) -> None:
        if self.inside_flagged():
            self.flagged_text.append(data)
        if self.in_code():
            return
        if ERROR_WORD.search(data):
            self.findings.append(f"an ERROR in the text: {shorten(data)}")

    def in_code(self) -> bool:
        return bool(self.open) and self.open[-1][1]

    def inside_flagged(self) -> bool:
        return any(flagged for _, _, flagged, _ in self.open)

    def close_flagged(self, flagged: str) -> None:
        text = shorten("".join(self.flagged_text))
        self.findings.append(f"{flagged}: {text}" if text else flagged)
        if not self.inside_flagged():
            self.flagged_text = []

    def close(self) -> None:
        super().close()
        for _, _, flagged, _ in reversed(self.open):
            if flagged:
                self.close_flagged(flagged)
        self.open = []


def shorten(text: str, width: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 3] + "..."


def page_findings(html: str) -> list[str]:
    """What is wrong with one built page (an empty list when nothing is)."""
    scanner = PageScanner()
    scanner.feed(html)
    scanner.close()
    return scanner.findings


def site_findings(outdir: Path | str) -> list[tuple[Path, str]]:
    """(page, finding) for every page of a built HTML site, pages in order."""
    outdir = Path(outdir)
    found = []
    for page in sorted(outdir.rglob("*.html")):
        if {"_static", "_sources"} & set(page.relative_to(outdir).parts):
            continue
        found += [(page, finding) for finding in page_findings(page.read_text("utf-8"))]
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("usage: python3 docs/_ext/built_pages.py BUILT_HTML_DIR", file=sys.stderr)
        return 2
    outdir = Path(argv[0])
    found = site_findings(outdir)
    for page, finding in found:
        print(f"{page.relative_to(outdir)}: {finding}")
    pages = sum(1 for _ in outdir.rglob("*.html"))
    print(f"{pages} pages checked: {len(found) or 'no'} problem(s)"
          f"{'' if found else ' (no system message, no ERROR, no contents box)'}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
