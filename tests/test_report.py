"""``python -m batchlog report <sink> --html FILE``: the page of a real sink, rewound, vacuumed
and run again, opened in a real headless browser (Debian's Chromium, installed by dev/setup): its
DOM as rendered, and a screenshot whose pixels show the bars and the rewind's mark; and the page
of a sink of 100,000 batches, grouped into 400 bars.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import struct
import subprocess
import zlib
from pathlib import Path

import golden_support as gs
import rewind_support as rs
from batchlog import _report
from batchlog.reports import SinkBatch, SinkHistory, SinkOperation
from pyspark.sql import SparkSession
from rewind_support import _ids_confs, batchlog  # noqa: F401  (compact every 3 batches)
from support import REPO, cli_here
from test_history import BATCHES, _build

CHROMIUM = shutil.which("chromium")
#: Where the docs show the screenshot (written when BATCHLOG_DOCS_UPDATE=1).
DOCS_SHOT = REPO / "docs" / "report.png"


def _chromium(*args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM, "Chromium is missing: dev/setup installs Debian's chromium"
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _png_pixels(png: Path) -> tuple[int, int, set[tuple[int, int, int]]]:
    """Width, height and the set of RGB colours of an 8-bit RGB(A) PNG (Chromium's)."""
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width = 8, b"", 0
    height = depth = ctype = 0
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + n]
        if kind == b"IHDR":
            width, height, depth, ctype = struct.unpack(">IIBB", body[:10])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    assert depth == 8 and ctype in (2, 6), (depth, ctype)
    bpp = 3 if ctype == 2 else 4
    raw, stride = zlib.decompress(idat), width * bpp
    prev, colours, i = bytearray(stride), set(), 0
    for _ in range(height):
        f, line = raw[i], bytearray(raw[i + 1 : i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b, c = prev[x], prev[x - bpp] if x >= bpp else 0
            if f == 1:
                line[x] = (line[x] + a) & 255
            elif f == 2:
                line[x] = (line[x] + b) & 255
            elif f == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        colours.update(tuple(line[x : x + 3]) for x in range(0, stride, bpp))  # type: ignore[misc]
        prev = line
    return width, height, colours


def test_the_report_of_a_rewound_sink_renders_in_chromium(
    spark: SparkSession, tmp_path: Path
) -> None:
    inbox, out, ck = _build(spark, tmp_path)
    batchlog.rewind(spark, str(out), str(ck), 3, quiet=True)
    rs.run_ids_query(spark, inbox, out, ck, mult=2)
    batchlog.vacuum(spark, str(out), older_than="0s", dry_run=False, quiet=True)
    page = tmp_path / "report.html"
    done = cli_here(spark, "report", str(out), "--html", str(page))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"wrote {page} (")

    dom = _chromium("--dump-dom", page.as_uri()).stdout
    assert f"<h1>{out}</h1>" in dom
    assert len(re.findall(r'<rect class="bar"', dom)) == BATCHES  # one bar a batch
    # each batch's rows, as its commit recorded them: 5 rows, in 2 files (p = 0, 1)
    assert re.findall(r"<title>batch 3: (\d+) rows, (\d+) files", dom) == [("5", "2")]
    assert f"{BATCHES} ({5 * BATCHES} rows, {2 * BATCHES} files" in dom
    assert len(re.findall(r'class="mark compaction"', dom)) == 2  # 2.compact, 5.compact
    assert len(re.findall(r'class="mark rewind"', dom)) == 1
    assert len(re.findall(r'class="mark vacuum"', dom)) == 1
    ops = re.findall(r'<tr class="op"><td>[^<]*</td><td>(\w+)</td><td>(\w+)</td>', dom)
    assert ops == [("vacuum", "done"), ("rewind", "done")]  # newest first
    assert 'id="readers">No registered readers.' in dom
    horizon = batchlog.SinkLog(spark, str(out)).inspect().horizon.horizon
    facts = dict(re.findall(r"<tr><th>([^<]+)</th><td>([^<]*)</td></tr>", dom))
    assert facts["rewind horizon"] == f"batch {horizon}: the oldest batch a rewind reaches"
    assert facts["retention watermark"] == "batch 0: retention dropped no entry"
    assert facts["lease holder"] == "none: no query writes the sink"
    assert facts["operations kept"] == "90 days (older records expire)"
    assert "<script" not in dom and "http://" not in dom.replace("http://www.w3.org", "")

    shot = tmp_path / "report.png"
    _chromium("--screenshot=" + str(shot), "--window-size=1100,760", page.as_uri())
    width, height, colours = _png_pixels(shot)
    assert (width, height) == (1100, 760)
    assert (0x4A, 0x7B, 0xD0) in colours, "no bar drawn"
    assert (0xD0, 0x4A, 0x4A) in colours, "no rewind mark drawn"
    if os.environ.get("BATCHLOG_DOCS_UPDATE") == "1":
        shutil.copyfile(shot, DOCS_SHOT)


def test_the_report_names_the_query_holding_the_lease_as_it_writes(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Written while a query runs: the lease holder is that query's run; once it stops, none."""
    inbox, out, ck = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    inbox.mkdir()
    (inbox / "0.json").write_text('{"id": 1, "p": 0}\n')
    source = spark.readStream.schema("id long, p int").json(str(inbox))
    q = source.writeStream.format("parquet").option("checkpointLocation", str(ck)).start(str(out))
    page = tmp_path / "report.html"
    try:
        q.processAllAvailable()  # a batch committed: the run holds the sink's lease
        done = cli_here(spark, "report", str(out), "--html", str(page))
        assert done.returncode == 0, done.stderr
        inspected = cli_here(spark, "inspect", str(out))
        assert inspected.returncode == 0, inspected.stderr
    finally:
        q.stop()
    facts = dict(re.findall(r"<tr><th>([^<]+)</th><td>([^<]*)</td></tr>", page.read_text()))
    holder = facts["lease holder"]
    jvm_pid = spark.sparkContext._jvm.ProcessHandle.current().pid()  # type: ignore[union-attr]
    assert holder.startswith(f"query {q.id}, run {q.runId} (driver pid {jvm_pid} on "), holder
    assert facts["owner on record"].startswith(f"query {q.id} since batch 0")
    writing = [ln for ln in inspected.stdout.splitlines() if ln.startswith("lease holder ")]
    assert writing == [
        f"lease holder    query {q.id} (run {q.runId}, driver pid {jvm_pid} on "
        + writing[0].split(" on ", 1)[1]
    ]
    assert ", at batch 0; lease refreshed " in writing[0] and writing[0].endswith(" by its clock")
    done = cli_here(spark, "report", str(out), "--html", str(page))
    assert done.returncode == 0, done.stderr
    assert "<td>none: no query writes the sink</td>" in page.read_text()


def test_the_retention_watermark_is_where_the_logs_retention_dropped_entries(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The golden sink kept 2 batches (spark.batchlog.retention.batches=2) and compacted at 2 and
    5: its log holds every entry from batch 4 on; the report and inspect both say so."""
    with gs.root_lock():
        root = gs.install("retention")
        try:
            out = root / gs.SINKS["retention"]["out"]
            summary = batchlog.SinkLog(spark, str(out)).inspect()
            page = tmp_path / "report.html"
            done = cli_here(spark, "report", str(out), "--html", str(page))
            assert done.returncode == 0, done.stderr
            inspected = cli_here(spark, "inspect", str(out))
            assert inspected.returncode == 0, inspected.stderr
        finally:
            gs.clean("retention")
    assert summary.retained_from == 4
    facts = dict(re.findall(r"<tr><th>([^<]+)</th><td>([^<]*)</td></tr>", page.read_text()))
    assert facts["retention watermark"] == (
        "batch 4: retention dropped entries of older batches (spark.batchlog.retention.*)"
    )
    assert (
        "retained from   batch 4 (retention dropped entries of older batches: "
        "spark.batchlog.retention.*)"
    ) in inspected.stdout.splitlines()


def test_a_sink_of_100000_batches_is_drawn_as_400_bars() -> None:
    n = 100_000
    history = SinkHistory(
        "/data/big",
        n - 1,
        0,
        [
            SinkBatch(b, 2, 1000 + b % 7, 1_796_000_000_000 + b * 1000, 3, None, None, None)
            for b in range(n)
        ],
        [],
        [
            SinkOperation(
                "rewind",
                1_796_000_000_000 + 50_000_000,
                10,
                "etl",
                "edge",
                "app-1",
                "0.1.0",
                {"toBatch": "50000"},
                "done",
                {"batches": 1},
            )
        ],
        7_776_000_000,
    )
    bars = _report.bars(history)
    assert len(bars) == _report.MAX_BARS
    assert sum(b.files for b in bars) == 2 * n and sum(b.rows or 0 for b in bars) == 3 * n
    assert sum(b.bytes for b in bars) == sum(1000 + b % 7 for b in range(n))
    assert [(b.first, b.last) for b in bars[:2]] == [(0, 249), (250, 499)]
    # an operation without a batch of its own is marked at the latest batch written before it
    vacuum = SinkOperation(
        "vacuum", 1_796_000_000_000 + 70_000_500, 5, "etl", "edge", "app-1", "0.1.0", {}, "done", {}
    )
    later = dataclasses.replace(history, operations=[*history.operations, vacuum])
    assert [(m.kind, m.batch) for m in _report.marks(later)] == [
        ("rewind", 50_000),
        ("vacuum", 70_000),
    ]
    svg = _report._chart(history)
    assert svg.count('<rect class="bar"') == _report.MAX_BARS
    assert svg.count('class="mark rewind"') == 1
    assert len(svg) < 100_000
