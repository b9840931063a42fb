"""``python -m batchlog report <sink> --html FILE``: one self-contained HTML page of a sink.

Drawn from two reports the JVM already gives (``SinkLog.history()`` and ``inspect()``), so it holds
no batchlog logic: each batch's bytes and files over the batches, compactions and operations
marked on that line, the retention watermark, the rewind horizon, the owner on record, the lease
holder (the query whose lease is on the sink) and the sink's readers. Batches are grouped
into at most :data:`MAX_BARS` bars (a sink of 100,000 batches draws 400 bars, not 100,000), so
the page stays small and is written in well under a second. Inline SVG and CSS: no script, no
network, readable in any browser and as a CI artifact.
"""

from __future__ import annotations

import bisect
import html
from dataclasses import dataclass
from pathlib import Path

from batchlog._cli_util import human_bytes
from batchlog._cli_util import when as _when
from batchlog.reports import SinkHistory, SinkSummary

#: The most bars the chart draws; batches are grouped into bars of equal width past it.
MAX_BARS = 400

WIDTH, HEIGHT, LEFT, TOP, BOTTOM = 1000, 270, 70, 20, 50


@dataclass(frozen=True)
class Bar:
    """Batches ``first..last``: their live files and bytes, and the newest file's time."""

    first: int
    last: int
    files: int
    bytes: int
    time_ms: int
    rows: int | None


def bars(history: SinkHistory, max_bars: int = MAX_BARS) -> list[Bar]:
    """The live batches grouped into at most ``max_bars`` bars of consecutive batch ids."""
    batches = history.batches
    if not batches:
        return []
    lo, hi = batches[0].batch_id, batches[-1].batch_id
    per_bar = max(1, -(-(hi - lo + 1) // max_bars))
    out: list[Bar] = []
    for b in batches:
        first = lo + (b.batch_id - lo) // per_bar * per_bar
        if out and out[-1].first == first:
            p = out[-1]
            rows = None if p.rows is None or b.rows is None else p.rows + b.rows
            out[-1] = Bar(
                first,
                b.batch_id,
                p.files + b.files,
                p.bytes + b.bytes,
                max(p.time_ms, b.time_ms),
                rows,
            )
        else:
            out.append(Bar(first, b.batch_id, b.files, b.bytes, b.time_ms, b.rows))
    return out


@dataclass(frozen=True)
class Mark:
    """A compaction or an operation, at the batch it concerns (an operation without one: the
    latest batch written before it ran)."""

    batch: int
    kind: str
    label: str


def marks(history: SinkHistory) -> list[Mark]:
    found = [
        Mark(c.batch_id, "compaction", f"{c.file}, {human_bytes(c.bytes)}")
        for c in history.compactions
    ]
    # the latest batch written by each time: batches by time, each with the highest id so far
    by_time = sorted((b.time_ms, b.batch_id) for b in history.batches)
    times = [t for t, _ in by_time]
    latest_by: list[int] = []
    for _, b in by_time:
        latest_by.append(max(b, latest_by[-1]) if latest_by else b)
    first = history.batches[0].batch_id if history.batches else 0
    for o in history.operations:
        if "toBatch" in o.arguments:
            at = int(o.arguments["toBatch"])
        else:
            n = bisect.bisect_right(times, o.time_ms)
            at = latest_by[n - 1] if n else first
        who = f"{o.user}@{o.host}, {_when(o.time_ms)}"
        changed = ", ".join(f"{k} {v}" for k, v in sorted(o.changed.items()))
        found.append(Mark(at, o.operation, f"{o.operation} ({o.outcome}) by {who}; {changed}"))
    return found


def _e(v: object) -> str:
    return html.escape(str(v))


def _tick(x: float, y: float, text: str, anchor: str) -> str:
    return f'<text class="tick" x="{x}" y="{y}" text-anchor="{anchor}">{_e(text)}</text>'


def _table(id_: str, headers: list[str], rows: str, empty: str) -> str:
    if not rows:
        return f'<p class="empty" id="{id_}">{_e(empty)}</p>'
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    return f'<table id="{id_}"><tr>{head}</tr>{rows}</table>'


def _chart(history: SinkHistory) -> str:
    bs = bars(history)
    if not bs:
        return '<p class="empty">No live batches.</p>'
    lo, hi = bs[0].first, bs[-1].last
    span = max(1, hi - lo + 1)
    top = max(b.bytes for b in bs) or 1
    plot_w, plot_h = WIDTH - LEFT - 10, HEIGHT - TOP - BOTTOM
    base = TOP + plot_h

    def x(batch: float) -> float:
        return LEFT + (batch - lo) / span * plot_w

    parts = [
        f'<svg id="batches" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="bytes per batch">',
        f'<line class="axis" x1="{LEFT}" y1="{base}" x2="{WIDTH - 10}" y2="{base}"/>',
        _tick(LEFT - 6, TOP + 10, human_bytes(top), "end"),
        _tick(LEFT - 6, base, "0", "end"),
        _tick(LEFT, HEIGHT - 22, f"batch {lo}", "start"),
        _tick(WIDTH - 10, HEIGHT - 22, f"batch {hi}", "end"),
        _tick(LEFT, HEIGHT - 8, _when(bs[0].time_ms), "start"),
        _tick(WIDTH - 10, HEIGHT - 8, _when(bs[-1].time_ms), "end"),
    ]
    for b in bs:
        h = b.bytes / top * plot_h
        w = max(1.0, (b.last - b.first + 1) / span * plot_w - 1)
        what = f"batch {b.first}" if b.first == b.last else f"batches {b.first}..{b.last}"
        rows = "" if b.rows is None else f"{b.rows} rows, "
        parts.append(
            f'<rect class="bar" x="{x(b.first):.1f}" y="{TOP + plot_h - h:.1f}" width="{w:.1f}" '
            f'height="{h:.1f}"><title>{_e(what)}: {rows}{b.files} files, '
            f"{_e(human_bytes(b.bytes))}, {_e(_when(b.time_ms))}</title></rect>"
        )
    for m in marks(history):
        if lo <= m.batch <= hi + 1:
            mx = x(min(m.batch, hi))
            parts.append(
                f'<line class="mark {_e(m.kind)}" x1="{mx:.1f}" y1="{TOP}" x2="{mx:.1f}" '
                f'y2="{TOP + plot_h}"><title>{_e(m.label)}</title></line>'
            )
    parts.append("</svg>")
    return "\n".join(parts)


CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 24px; color: #222; }
h1 { font-size: 20px; margin: 0 0 4px; } h2 { font-size: 16px; margin: 24px 0 8px; }
table { border-collapse: collapse; } td, th { padding: 2px 12px 2px 0; text-align: left; }
th { color: #555; font-weight: 600; } #operations td:first-child { white-space: nowrap; }
.bar { fill: #4a7bd0; } .axis { stroke: #888; } .tick { font-size: 11px; fill: #555; }
.mark { stroke-width: 2; } .mark.compaction { stroke: #999; stroke-dasharray: 3 3; }
.mark.rewind, .mark.cascade { stroke: #d04a4a; } .mark.repair { stroke: #e09a20; }
.mark.takeover, .mark.adopt { stroke: #6a3dc0; } .mark.vacuum { stroke: #2a9a5a; }
.legend span { margin-right: 16px; } .swatch { display: inline-block; width: 12px; height: 3px;
  vertical-align: middle; margin-right: 4px; }
"""


def _days(ms: int) -> str:
    days = ms / 86_400_000
    return f"{days:g} days" if days >= 1 else f"{ms / 3_600_000:g} hours"


def _retained(summary: SinkSummary) -> str:
    """The retention watermark: from which batch the log holds every entry."""
    if summary.retained_from == 0:
        return "batch 0: retention dropped no entry"
    return (
        f"batch {summary.retained_from}: retention dropped entries of older batches "
        "(spark.batchlog.retention.*)"
    )


def _lease(summary: SinkSummary) -> str:
    """Who holds the writer's lease as the page is written: the query writing the sink now."""
    lease = summary.lease
    if lease is None:
        return "none: no query writes the sink"
    return (
        f"query {lease.query_id}, run {lease.run_id} (driver pid {lease.pid} on {lease.host}), "
        f"at batch {lease.batch_id}; refreshed {_when(lease.refreshed_at_ms)} by its clock"
    )


def render(history: SinkHistory, summary: SinkSummary) -> str:
    """The page for a sink, from its history and its ``inspect`` summary."""
    h = summary.horizon
    latest_compact = summary.latest_compact or "(none yet)"
    live_files = sum(b.files for b in history.batches)
    counted = [b.rows for b in history.batches if b.rows is not None]
    rows = f"{sum(counted)} rows, " if counted and len(counted) == len(history.batches) else ""
    live_bytes = sum(b.bytes for b in history.batches)
    facts = [
        ("latest batch", history.latest_batch if history.latest_batch >= 0 else "(none)"),
        (
            "live batches",
            f"{len(history.batches)} ({rows}{live_files} files, {human_bytes(live_bytes)})",
        ),
        ("oldest live batch", history.batches[0].batch_id if history.batches else "(none)"),
        ("retention watermark", _retained(summary)),
        ("rewind horizon", f"batch {h.horizon}: the oldest batch a rewind reaches"),
        ("compaction", f"every {summary.compact_interval} batches; latest {latest_compact}"),
        ("log", f"{summary.log_files} files, {human_bytes(summary.log_bytes)}"),
        (
            "owner on record",
            f"query {h.owner} since batch {h.owner_since}" if h.owner else "(none on record)",
        ),
        ("lease holder", _lease(summary)),
        ("operations kept", f"{_days(history.operations_retention_ms)} (older records expire)"),
    ]
    rows = "\n".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in facts)
    ops = "\n".join(
        f'<tr class="op"><td>{_e(_when(o.time_ms))}</td><td>{_e(o.operation)}</td>'
        f"<td>{_e(o.outcome)}</td><td>{_e(o.user)}@{_e(o.host)}</td>"
        f"<td>{_e(' '.join(f'{k}={v}' for k, v in sorted(o.arguments.items())))}</td>"
        f"<td>{_e(' '.join(f'{k}={v}' for k, v in sorted(o.changed.items())))}</td></tr>"
        for o in reversed(history.operations)
    )
    readers = "\n".join(
        f'<tr class="reader"><td>{_e(r.query_id)}</td><td>{_e(r.kind)}</td>'
        f"<td>{_e(r.checkpoint)}</td><td>{_e(r.sink or '-')}</td><td>{_e(_when(r.seen_ms))}</td>"
        f"<td>{'stale' if r.stale else ''}</td></tr>"
        for r in summary.readers
    )
    legend = "".join(
        f'<span><i class="swatch" style="background:{c}"></i>{k}</span>'
        for k, c in [
            ("compaction", "#999"),
            ("rewind", "#d04a4a"),
            ("repair", "#e09a20"),
            ("takeover / adopt", "#6a3dc0"),
            ("vacuum", "#2a9a5a"),
        ]
    )
    op_heads = ["time", "operation", "outcome", "by", "arguments", "changed"]
    ops_table = _table("operations", op_heads, ops, "None recorded.")
    reader_heads = ["query", "kind", "checkpoint", "its sink", "seen", ""]
    readers_table = _table("readers", reader_heads, readers, "No registered readers.")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>batchlog: {_e(history.sink)}</title>
<style>{CSS}</style></head>
<body>
<h1>{_e(history.sink)}</h1>
<table id="facts">{rows}</table>
<h2>Bytes per batch</h2>
<div class="legend">{legend}</div>
{_chart(history)}
<h2>Operations</h2>
{ops_table}
<h2>Readers</h2>
{readers_table}
</body></html>
"""


def write(history: SinkHistory, summary: SinkSummary, path: str | Path) -> Path:
    """Writes the page to ``path`` (a local file: it is the user's, not the sink's)."""
    p = Path(path)
    p.write_text(render(history, summary), encoding="utf-8")
    return p
