"""Printing for the CLI: readable tables and byte sizes. No batchlog logic lives here."""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any


def human_bytes(n: float) -> str:
    """``1536`` -> ``'1.5 KiB'``."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table; numbers are right-aligned."""
    cells = [[str(c) for c in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    # a column of numbers (blank cells allowed) is right-aligned
    numeric = [
        all(isinstance(r[i], (int, float)) or r[i] == "" for r in rows)
        and any(isinstance(r[i], (int, float)) for r in rows)
        for i in range(len(headers))
    ]

    def line(values: Sequence[str]) -> str:
        return "  ".join(
            v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)
        ).rstrip()

    out = [line(headers), line(["-" * w for w in widths])]
    out += [line(r) for r in cells]
    return "\n".join(out)


def when(epoch_ms: int) -> str:
    """A time (ms since the epoch) in UTC, to the second: ``2026-12-07 08:54:21 UTC``."""
    t = datetime.datetime.fromtimestamp(epoch_ms / 1000, tz=datetime.timezone.utc)
    return t.strftime("%Y-%m-%d %H:%M:%S UTC")
