"""The documentation's examples against the code: the README's quickstart runs as written (a real
session, a real streaming query, a temporary sink) and prints what its comments show, and every
CLI command line in the README and ``docs/`` is one the CLI accepts.

Every other block of the pages runs in ``test_docs_blocks.py``; a block that cannot run is marked
``<!-- docs-test: skip (reason) -->`` on the line above it (``doc_pages.py``)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from doc_pages import blocks, pages, section_block
from support import PYTHON_DIR, QUERY_TIMEOUT_S, REPO


def test_the_readme_quickstart_runs_and_prints_what_it_shows(tmp_path: Path) -> None:
    code = section_block(REPO / "README.md", "## Quickstart", "python")
    assert len(code.splitlines()) <= 22, "the quickstart is a 20-line example"
    shown = [
        line.split("#", 1)[1].strip().split(":")[0]
        for line in code.splitlines()
        if line.startswith("print(") and "#" in line
    ]
    script = tmp_path / "quickstart.py"
    script.write_text(code)
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=str(tmp_path),
        env=dict(os.environ, PYTHONPATH=str(PYTHON_DIR)),
        capture_output=True,
        text=True,
        timeout=QUERY_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    printed = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    assert printed == shown, f"printed {printed}, the README shows {shown}"


def cli_lines() -> list[tuple[str, str]]:
    """(page, command line) of every ``python -m batchlog`` line in a bash or console block."""
    found = []
    for page in pages():
        for lang, code, skip in blocks(page):
            if lang not in ("bash", "console", "text") or skip:
                continue
            for line in code.splitlines():
                line = line.removeprefix("$ ")
                if line.startswith("python -m batchlog "):
                    found.append((str(page.relative_to(REPO)), line))
    return found


@pytest.mark.parametrize("page,line", cli_lines())
def test_every_cli_line_in_the_docs_is_one_the_cli_accepts(page: str, line: str) -> None:
    from batchlog.__main__ import parser  # this checkout's package (support puts it first)

    command = line.split("  #", 1)[0]
    command = re.sub(r"\[[^\]]*\]", "", command)  # optional parts: [--dry-run] [--force]
    argv = shlex.split(command)[3:]
    try:
        args = parser().parse_args(argv)
    except SystemExit as e:  # argparse's refusal
        pytest.fail(f"{page}: `{line}` is not a valid batchlog command (exit {e.code})")
    assert callable(args.fn)


def test_the_docs_have_cli_lines_to_check() -> None:
    pages_with_cli = {page for page, _ in cli_lines()}
    assert "README.md" in pages_with_cli
    assert "docs/user-guide/cli.md" in pages_with_cli
    assert len(pages_with_cli) >= 10, pages_with_cli  # README, cli, walk-through, runbook
