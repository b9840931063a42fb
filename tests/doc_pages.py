"""The documentation's pages and their fenced code blocks, for the tests that run them
(``test_docs.py``, ``test_docs_blocks.py``).

A block that cannot run in the suite is marked ``<!-- docs-test: skip (reason) -->`` on the line
above it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from support import REPO

SKIP = re.compile(r"<!-- docs-test: skip \((.+)\) -->")
FENCE = re.compile(r"^( *)```(\w*)\n(.*?)^ *```", re.S | re.M)


def pages() -> list[Path]:
    """README.md and every page of the site (docs/architecture.md and docs/contributing.md are
    links to the top-level files)."""
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def page_name(page: Path) -> str:
    """``page`` relative to the repository: ``docs/runbook/zombie-driver.md``."""
    return str(page.relative_to(REPO))


@dataclass(frozen=True)
class Block:
    """One fenced block of a page: its language, code, skip reason (None: not marked), the line
    of its opening fence (1-based) and where its code is in the page's text."""

    page: Path
    lang: str
    code: str
    skip: str | None
    line: int
    start: int
    end: int

    @property
    def where(self) -> str:
        return f"{page_name(self.page)}:{self.line} ({self.lang or 'plain'} block)"


def page_blocks(page: Path) -> list[Block]:
    """Every fenced block of ``page``, in order."""
    text = page.read_text()
    found = []
    for m in FENCE.finditer(text):
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        skip = SKIP.fullmatch(before.strip())
        line = text.count("\n", 0, m.start()) + 1
        indent = len(m.group(1))
        code = "".join(line[indent:] for line in m.group(3).splitlines(keepends=True))
        found.append(
            Block(
                page=page,
                lang=m.group(2),
                code=code,
                skip=skip.group(1) if skip else None,
                line=line,
                start=m.start(3),
                end=m.end(3),
            )
        )
    return found


def blocks(page: Path) -> list[tuple[str, str, bool]]:
    """(language, code, marked skip) of each fenced block of ``page``."""
    return [(b.lang, b.code, b.skip is not None) for b in page_blocks(page)]


def section_block(page: Path, heading: str, lang: str) -> str:
    """The first ``lang`` block under the heading ``heading`` of ``page``."""
    text = page.read_text()
    start = text.index(f"\n{heading}\n")
    m = FENCE.search(text, start)
    assert m is not None and m.group(2) == lang, f"no {lang} block under {heading}"
    return m.group(3)
