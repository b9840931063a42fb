"""The golden sinks (``tests/fixtures/golden/``): what each holds, how it is put back where it was
written, and the answers every later version must give about it.

A golden sink is a small sink written by a real streaming query of one batchlog version and stored
in the repository with its checkpoint, to be read by every later version (``test_golden.py``):
a change that cannot read an old sink exactly as it was read when it was written fails there.

**Relocation.** Log lines, compact indexes, checkpoints and the sink record hold absolute paths
(``file:/tmp/batchlog-golden/<name>/...``), and a compact index holds the length and
modification time of its compact file. Rewriting paths would change the compact files' bytes and
so their indexes' offsets and CRCs: the fixture would no longer be what the old version wrote.
So each sink is written at a fixed path, :data:`ROOT` ``/<name>``, and put back at exactly that
path (:func:`install`), every file with the modification time it had (``files.json``: git keeps
no modification times). Tests hold :func:`root_lock` while they use :data:`ROOT`, so two test
processes on one machine never share it.

:func:`answers` computes what the current code says about a sink (``SinkLog``, ``verify``, a
rewind dry run, the ``batchlog`` data source by batch, plain Spark); ``make.py`` records it as
``expected.json`` and the test compares. Only stable facts are recorded (no timings, no report
fields a later version may add), so that a new report field does not break an old sink's test.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from conftest import (
    COMPACT_INTERVAL_KEY,
    VANILLA_COMMIT_PROTOCOL,
    batch_rows,
    drop_inputs,
    read_back_plain,
    run_stream,
)
from pyspark.sql import SparkSession
from support import REPO, await_query, batchlog, run_cli, session_conf

COMMIT_PROTOCOL_KEY = "spark.sql.streaming.commitProtocolClass"
BATCHLOG_COMMIT_PROTOCOL = "io.batchlog.BatchTaggedCommitProtocol"
RETENTION_KEY = "spark.batchlog.retention.batches"
INFER = {"spark.sql.streaming.schemaInference": "true"}

#: Where the golden sinks live in the repository.
GOLDEN_DIR = REPO / "tests" / "fixtures" / "golden"

#: Where every golden sink was written, and where a test puts it back: ``ROOT/<name>``.
ROOT = Path("/tmp/batchlog-golden")
LOCK = Path("/tmp/batchlog-golden.lock")

#: Each golden sink: its output and the checkpoint of the query that wrote it (relative to
#: ``ROOT/<name>``), its format, and the batch its rewind dry run goes back to.
SINKS: dict[str, dict[str, Any]] = {
    # batchlog from batch 0: compactions at 2 and 5, partitioned by country, parquet
    "plain": {"format": "parquet", "out": "out", "chk": "chk", "rewind_to": 4},
    # plain Spark (0, 1), batchlog (2..4), plain Spark (5: it writes the compact file), batchlog (6)
    "mixed": {"format": "json", "out": "out", "chk": "chk", "rewind_to": 6},
    # batchlog keeping 2 batches (spark.batchlog.retention.batches=2): compactions 2 and 5 drop
    "retention": {"format": "json", "out": "out", "chk": "chk", "rewind_to": 6},
    # batchlog, then _spark_metadata deleted and rebuilt by `python -m batchlog repair`
    "repaired": {"format": "json", "out": "out", "chk": "chk", "rewind_to": 4},
    # an upstream batchlog sink (0..6) and a downstream query reading it with the batchlog source
    # (it read 0..4; a restart reads 5 and 6)
    "downstream": {"format": "json", "out": "up/out", "chk": "up/chk", "rewind_to": 4},
    # batchlog whose commits record themselves ("commit": query, run, rows, duration), two runs
    # (0..3, then 4..6), compactions at 2 and 5, partitioned by country, parquet
    "committed": {"format": "parquet", "out": "out", "chk": "chk", "rewind_to": 4},
}

#: The downstream query of the "downstream" sink: its checkpoint and output (relative).
DOWN_CHK, DOWN_OUT = "down/chk", "down/out"


@contextlib.contextmanager
def root_lock() -> Iterator[None]:
    """Holds the machine-wide lock on :data:`ROOT` (another test process waits)."""
    with open(LOCK, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@contextlib.contextmanager
def every_sink_installed() -> Iterator[Path]:
    """Every golden sink put back at its path, :data:`ROOT` locked, for the block; removed after."""
    with root_lock():
        for name in SINKS:
            install(name)
        try:
            yield ROOT
        finally:
            for name in SINKS:
                clean(name)


def expected(name: str) -> dict[str, Any]:
    """What the version that wrote the golden sink ``name`` answered (``expected.json``)."""
    found: dict[str, Any] = json.loads((GOLDEN_DIR / name / "expected.json").read_text())
    return found


def sink_dir(name: str) -> Path:
    return ROOT / name


def clean(name: str) -> None:
    shutil.rmtree(sink_dir(name), ignore_errors=True)


# ---- storing and installing a fixture --------------------------------------------------------


def capture(name: str) -> None:
    """Stores ``ROOT/<name>`` as the fixture ``GOLDEN_DIR/<name>/root``, with ``files.json``:
    every file's modification time (ms) and every directory (git keeps neither)."""
    src, dst = sink_dir(name), GOLDEN_DIR / name / "root"
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(src, dst)
    files, dirs = {}, []
    for p in sorted(src.rglob("*")):
        rel = str(p.relative_to(src))
        if p.is_dir():
            dirs.append(rel)
        else:
            files[rel] = p.stat().st_mtime_ns // 1_000_000
    manifest = {"root": str(src), "dirs": dirs, "mtimes": files}
    (GOLDEN_DIR / name / "files.json").write_text(json.dumps(manifest, indent=1) + "\n")


def install(name: str) -> Path:
    """Puts the fixture back at ``ROOT/<name>`` (replacing what is there), each file with its
    recorded modification time. Hold :func:`root_lock`."""
    src = GOLDEN_DIR / name / "root"
    manifest = json.loads((GOLDEN_DIR / name / "files.json").read_text())
    dst = sink_dir(name)
    assert manifest["root"] == str(dst), manifest["root"]
    clean(name)
    for d in manifest["dirs"]:
        (dst / d).mkdir(parents=True, exist_ok=True)
    for rel, mtime_ms in manifest["mtimes"].items():
        target = dst / rel
        shutil.copyfile(src / rel, target)
        os.utime(target, ns=(mtime_ms * 1_000_000, mtime_ms * 1_000_000))
    return dst


# ---- writing the sinks (make.py) ---------------------------------------------------------------


def _write(
    spark: SparkSession, root: Path, batches: range, fmt: str, conf: dict[str, str | None]
) -> None:
    """Batches ``batches`` (4 rows each, 1 to 3 countries) through the query ``root/chk``."""
    drop_inputs(root / "in", {b: batch_rows(b, 1 + b % 3) for b in batches})
    with session_conf(spark, {COMPACT_INTERVAL_KEY: "3", **conf}):
        ran = run_stream(spark, root / "in", root / "out", root / "chk", fmt=fmt)
    assert ran == list(batches), ran


def make(spark: SparkSession, name: str) -> None:
    """Writes golden sink ``name`` at ``ROOT/<name>`` with real streaming queries."""
    clean(name)
    root, fmt = sink_dir(name), SINKS[name]["format"]
    plain: dict[str, str | None] = {COMMIT_PROTOCOL_KEY: VANILLA_COMMIT_PROTOCOL}
    ours: dict[str, str | None] = {COMMIT_PROTOCOL_KEY: BATCHLOG_COMMIT_PROTOCOL}
    if name == "plain":
        _write(spark, root, range(7), fmt, ours)
    elif name == "mixed":
        _write(spark, root, range(2), fmt, plain)
        _write(spark, root, range(2, 5), fmt, ours)
        _write(spark, root, range(5, 6), fmt, plain)
        _write(spark, root, range(6, 7), fmt, ours)
    elif name == "committed":
        _write(spark, root, range(4), fmt, ours)
        _write(spark, root, range(4, 7), fmt, ours)
    elif name == "retention":
        _write(spark, root, range(7), fmt, {**ours, RETENTION_KEY: "2"})
    elif name == "repaired":
        _write(spark, root, range(7), fmt, ours)
        shutil.rmtree(root / "out" / "_spark_metadata")
        done = run_cli("repair", str(root / "out"))
        assert done.returncode == 0, done.stdout + done.stderr
    elif name == "downstream":
        up = root / "up"
        _write(spark, up, range(5), fmt, ours)
        assert run_downstream(spark, root) == [0]
        _write(spark, up, range(5, 7), fmt, ours)
    else:
        raise KeyError(name)


def run_downstream(spark: SparkSession, root: Path) -> list[int]:
    """The downstream query of the "downstream" sink (``availableNow``): the batchlog source over
    ``up/out`` into a json batchlog sink ``down/out``; the batch ids it ran."""
    with session_conf(spark, {**INFER, COMPACT_INTERVAL_KEY: "3"}):
        stream = spark.readStream.format("batchlog").load(str(root / "up" / "out"))
        query = (
            stream.writeStream.format("json")
            .option("checkpointLocation", str(root / DOWN_CHK))
            .trigger(availableNow=True)
            .start(str(root / DOWN_OUT))
        )
        await_query(query, root / DOWN_OUT)
    assert query.exception() is None, query.exception()
    return [int(p["batchId"]) for p in query.recentProgress]


# ---- the answers -------------------------------------------------------------------------------


def _rows(rows: Any) -> list[str]:
    """Rows as sorted JSON texts (keys sorted): comparable whatever the column order."""
    return sorted(json.dumps(r, sort_keys=True) for r in rows)


#: The fields of a verify report recorded (stable facts about the sink).
VERIFY_FIELDS = [
    "healthy",
    "latest_batch",
    "compact_interval",
    "live_files",
    "live_bytes",
    "untagged_entries",
    "log_errors",
    "indexes_rebuilt_in_memory",
    "missing_count",
    "size_mismatch_count",
    "wrong_batch_count",
    "orphan_count",
    "foreign_count",
]

#: The fields of a rewind plan recorded.
REWIND_FIELDS = [
    "to_batch",
    "sink_latest_batch",
    "offsets_latest",
    "commits_latest",
    "horizon",
    "query_id",
    "affected_batches",
    "data_files",
    "data_bytes",
    "orphan_files",
    "commits_to_delete",
    "offsets_to_delete",
]


def plain_reads(names: list[str]) -> dict[str, dict[str, Any]]:
    """What plain Spark (a separate PySpark process without batchlog) reads from each installed
    sink's output: one process for all of them."""
    reads = read_back_plain(
        [(SINKS[n]["format"], str(sink_dir(n) / SINKS[n]["out"])) for n in names]
    )
    return {
        n: {
            "columns": sorted(read["columns"]),
            "count": read["count"],
            "rows": _rows(read["rows"]),
            "input_files": sorted(read["inputFiles"]),
        }
        for n, read in zip(names, reads)
    }


def answers(spark: SparkSession, name: str, plain: dict[str, Any]) -> dict[str, Any]:
    """What the current code says about golden sink ``name`` at ``ROOT/<name>`` (installed), with
    ``plain``, what plain Spark read from it (:func:`plain_reads`).

    Read-only, but for the "downstream" sink's last answer: its downstream query is restarted.
    """
    spec = SINKS[name]
    root = sink_dir(name)
    out, chk = str(root / spec["out"]), str(root / spec["chk"])
    log = batchlog.SinkLog(spark, out)
    batches = log.batches()
    files = {b: sorted(log.files(b)) for b in batches}
    entries = sorted(
        (str(r["path"]), r["batchId"]) for r in log.entries().select("path", "batchId").collect()
    )
    batch_of = {p: log.batch_of(p) for p, _ in entries}
    verify = batchlog.verify(spark, out)
    plan = batchlog.rewind(spark, out, chk, spec["rewind_to"], dry_run=True, quiet=True).plan
    by_batch = {
        b: _rows(
            r.asDict()
            for r in spark.read.format("batchlog").option("batches", f"{b}-{b}").load(out).collect()
        )
        for b in batches
    }
    everything = _rows(r.asDict() for r in spark.read.format("batchlog").load(out).collect())
    result: dict[str, Any] = {
        "latest_batch": log.latest_batch(),
        "batches": batches,
        "files": {str(b): f for b, f in files.items()},
        "entries": [[p, b] for p, b in entries],
        "batch_of": batch_of,
        "verify": {f: getattr(verify, f) for f in VERIFY_FIELDS},
        "rewind_dry_run": {
            **{f: getattr(plan, f) for f in REWIND_FIELDS},
            "data_files_per_batch": [
                [b.batch_id, b.files, b.bytes] for b in plan.data_files_per_batch
            ],
            "sink_log": {
                "keep_up_to": plan.sink_log.keep_up_to,
                "rebuild": plan.sink_log.rebuild,
                "delete": plan.sink_log.delete,
            },
            "source_logs": [
                {"source": s.source, "keep_up_to": s.keep_up_to, "delete": s.delete}
                for s in plan.source_logs
            ],
        },
        "read_by_batch": {str(b): rows for b, rows in by_batch.items()},
        "read_all": everything,
        "plain_spark": plain,
        "history": [
            [b.batch_id, b.files, b.bytes, b.time_ms, b.rows, b.duration_ms, b.query_id, b.run_id]
            for b in log.history().batches
        ],
    }
    if name == "downstream":
        ran = run_downstream(spark, root)
        down = spark.read.format("json").load(str(root / DOWN_OUT)).collect()
        result["downstream_restart"] = {
            "batches_run": ran,
            "rows": _rows(r.asDict() for r in down),
            "batchlog_offsets": _batchlog_offsets(root / DOWN_CHK),
        }
    return result


def _batchlog_offsets(chk: Path) -> dict[str, Any]:
    """The batchlog source's offset in each ``offsets/N`` of a checkpoint (its last line)."""
    found = {}
    for f in sorted((chk / "offsets").iterdir(), key=lambda p: p.name):
        if f.name.isdigit():
            found[f.name] = json.loads(f.read_text().splitlines()[-1])
    return found
