"""Helpers of the repair and lineage tests (test_integrity_repair.py, test_integrity_lineage.py):
the input files, the query (file source -> parquet sink, compact interval 3), and what a user sees
of a sink (plain Spark's rows, ``SinkLog.files(b)`` read as parquet).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from reliability_support import (
    SINK_CONFS,
    TAGGED,
    batchlog,
    check_log,
    local_path,
    plain_read,
    sql_conf,
    start_stream,
    write_input,
)
from support import await_query

INTERVAL_KEY = "spark.sql.streaming.fileSink.log.compactInterval"
PROTOCOL_KEY = "spark.sql.streaming.commitProtocolClass"
VANILLA = "org.apache.spark.sql.execution.streaming.ManifestFileCommitProtocol"
DEFAULT_INTERVAL = {INTERVAL_KEY: "10"}  # Spark's default: not the query's interval
RECORDS = frozenset({"batchlog-sink.json", "batchlog-lease.json"})
ROWS = 3  # rows per input file: ids k*1000 .. k*1000+2, one in each partition p0..p2


# ---- helpers -----------------------------------------------------------------------------------


class Input:
    """The input directory; file ``k`` is read by batch ``k`` (mtimes make the order certain)."""

    def __init__(self, root: Path) -> None:
        self.dir = root
        self.base = time.time() - 3600
        self.ids: dict[int, list[int]] = {}

    def add(self, first: int, n: int) -> None:
        for k in range(first, first + n):
            self.ids[k] = write_input(self.dir, k, 1, ROWS)
            t = self.base + k
            os.utime(self.dir / f"in-{k:04d}.json", (t, t))

    def all_ids(self) -> list[int]:
        return sorted(i for ids in self.ids.values() for i in ids)


def run_query(spark: SparkSession, inp: Input, out: Path, chk: Path, **confs: str) -> None:
    """The query of ``reliability_support.run_stream`` (same checkpoint, same query), with
    ``confs`` on top of its sink confs (e.g. Spark's own commit protocol); raises its error."""
    with sql_conf(spark, **{**SINK_CONFS, **confs}):
        await_query(start_stream(spark, inp.dir, out, chk), out)


def meta_names(out: Path) -> set[str]:
    """Visible names in ``_spark_metadata`` (no checksums)."""
    return {p.name for p in (out / "_spark_metadata").iterdir() if not p.name.startswith(".")}


def with_indexes(names: set[str]) -> set[str]:
    """``names`` of a log plus the index beside each compact file (``N.compact.index``), as a
    compaction and a repair write them."""
    return names | {f"{n}.index" for n in names if n.endswith(".compact")}


def record(out: Path) -> dict:
    """The sink record, where batchlog keeps it: ``<out>/_batchlog/`` (not in the log)."""
    return json.loads((out / "_batchlog" / "_batchlog-sink.json").read_text())


def tagged_on_disk(out: Path) -> dict[int, set[Path]]:
    """Data files on disk by the batch their batch-tagged name gives."""
    by: dict[int, set[Path]] = {}
    for p in out.rglob("part-*"):
        if p.name.endswith(".crc") or "_spark_metadata" in str(p.relative_to(out)):
            continue
        m = TAGGED.search(p.name)
        if m:
            by.setdefault(int(m.group(1)), set()).add(p)
    return by


def ids_by_file(spark: SparkSession, paths: Iterable[str]) -> dict[str, list[int]]:
    """The ids of each given data file, read as parquet files (not through the sink's log)."""
    paths = list(paths)
    if not paths:
        return {}
    df = spark.read.parquet(*paths).select("id", F.input_file_name().alias("f"))
    by: dict[str, list[int]] = {}
    for r in df.collect():
        by.setdefault(str(local_path(r["f"])), []).append(r["id"])
    return by


def assert_batches(
    spark: SparkSession, out: Path, inp: Input, batches: Iterable[int], tagged_names: bool = True
) -> None:
    """``files(b)`` holds exactly batch b's files: their ids are input file b's, and (when every
    batch was written by batchlog) the paths are exactly the data files named for batch b."""
    log = batchlog.SinkLog(spark, str(out))
    files = {b: log.files(b) for b in batches}
    ids = ids_by_file(spark, (p for fs in files.values() for p in fs))
    on_disk = tagged_on_disk(out) if tagged_names else {}
    for b, fs in files.items():
        got = sorted(i for p in fs for i in ids[str(local_path(p))])
        assert got == sorted(inp.ids[b]), f"files({b}) = {fs}"
        assert all(log.batch_of(p) == b for p in fs), b
        if tagged_names:
            assert {local_path(p) for p in fs} == on_disk.get(b, set()), f"batch {b}"


def assert_plain_reads_all(out: Path, inp: Input) -> None:
    got = plain_read(out)
    assert got["ids"] == inp.all_ids()
    assert got["rows"] == len(inp.all_ids())  # every id exactly once


def sink_of_8(spark: SparkSession, tmp: Path) -> tuple[Input, Path, Path]:
    """Batches 0..7 by the interval-3 query: 2.compact, 5.compact, 6, 7."""
    inp, out, chk = Input(tmp / "in"), tmp / "out", tmp / "chk"
    inp.add(0, 8)
    run_query(spark, inp, out, chk)
    assert check_log(out, 3, junk=RECORDS)["latest"] == 7
    assert record(out)["compactInterval"] == 3
    return inp, out, chk
