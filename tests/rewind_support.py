"""Helpers for the rewind / read / adopt integration tests (real streaming queries, local[2]).

Not a conftest: the tests import what they need from here. Spark-independent helpers
(snapshots, raw log parsing) live beside the query runners so each test reads top-down.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from support import (
    await_query,
    batchlog,
    get_spark,
    halt_after_rewind_step_confs,
    run_cli,
    session_conf,
)

# test modules import these from here
__all__ = ["batchlog", "get_spark", "halt_after_rewind_step_confs", "run_cli"]

SINK_COMPACT = "spark.sql.streaming.fileSink.log.compactInterval"
SOURCE_COMPACT = "spark.sql.streaming.fileSource.log.compactInterval"
MIN_BATCHES = "spark.sql.streaming.minBatchesToRetain"
COMMIT_PROTOCOL = "spark.sql.streaming.commitProtocolClass"
PROVIDER = "spark.sql.streaming.stateStore.providerClass"
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
VANILLA_PROTOCOL = "org.apache.spark.sql.execution.streaming.ManifestFileCommitProtocol"

#: rows per input file (= per micro-batch); ids of file i are i*10 .. i*10+ROWS-1
ROWS = 5
DATA_FILE_BATCH = re.compile(r"part-\d+-batch-(\d+)-")


#: Sets (None: unsets) session confs for the block, then restores the previous values.
confs = session_conf


#: batches of the shared ids sink (one input file each)
N_BATCHES = 20


@pytest.fixture(autouse=True)
def _ids_confs(spark: SparkSession) -> Iterator[None]:
    """The ids sink's settings (compact intervals) for every test of a module that imports it."""
    with confs(spark, IDS_CONFS):
        yield


@pytest.fixture
def sink(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> IdsSink:
    """The shared 20-batch ids sink, restored in place before the test."""
    return shared_ids_sink(spark, tmp_path_factory.getbasetemp(), N_BATCHES)


# ---- input files ---------------------------------------------------------------------------


def write_input(inbox: Path, index: int, rows: list[dict[str, Any]]) -> Path:
    """Writes input file ``index`` with mtime 1000+index so the file source takes files in order."""
    inbox.mkdir(parents=True, exist_ok=True)
    f = inbox / f"f{index:03d}.json"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    os.utime(f, (1000 + index, 1000 + index))
    return f


def id_rows(index: int) -> list[dict[str, Any]]:
    """The rows of stateless input file ``index``: ids index*10 .. index*10+4, p = id % 2."""
    return [{"id": index * 10 + j, "p": j % 2} for j in range(ROWS)]


def ids_of_batch(b: int) -> list[int]:
    return [b * 10 + j for j in range(ROWS)]


# ---- queries -------------------------------------------------------------------------------


def run_ids_query(spark: SparkSession, inbox: Path, out: Path, ck: Path, mult: int) -> None:
    """File source -> parquet sink partitioned by p; v = id * mult. One input file per batch."""
    df = spark.readStream.schema("id long, p int").option("maxFilesPerTrigger", 1).json(str(inbox))
    q = (
        df.withColumn("v", F.col("id") * mult)
        .writeStream.format("parquet")
        .partitionBy("p")
        .option("checkpointLocation", str(ck))
        .trigger(availableNow=True)
        .start(str(out))
    )
    await_query(q, out)


def run_window_query(spark: SparkSession, inbox: Path, out: Path, ck: Path) -> None:
    """Windowed count (20 s windows, 5 s watermark), append mode, parquet sink."""
    df = spark.readStream.schema("ts long, k int").option("maxFilesPerTrigger", 1).json(str(inbox))
    agg = (
        df.withColumn("t", F.col("ts").cast("timestamp"))
        .withWatermark("t", "5 seconds")
        .groupBy(F.window("t", "20 seconds"), "k")
        .count()
        .select(F.col("window.start").cast("long").alias("w"), "k", "count")
    )
    q = (
        agg.writeStream.format("parquet")
        .outputMode("append")
        .option("checkpointLocation", str(ck))
        .trigger(availableNow=True)
        .start(str(out))
    )
    await_query(q, out)


def rows_of(df: DataFrame, *cols: str) -> list[tuple[Any, ...]]:
    """The DataFrame's rows as sorted tuples of ``cols`` (duplicates kept)."""
    return sorted(tuple(r) for r in df.select(*cols).collect())


# ---- file system snapshots and raw logs ----------------------------------------------------


def snapshot(*roots: Path) -> dict[str, tuple[int, int]]:
    """Every file (hidden .crc files included) under ``roots``: path -> (size, mtime_ns)."""
    out: dict[str, tuple[int, int]] = {}
    for root in roots:
        for dirpath, _, names in os.walk(root):
            for n in names:
                p = os.path.join(dirpath, n)
                st = os.stat(p)
                out[p] = (st.st_size, st.st_mtime_ns)
    return out


def data_files(out: Path) -> dict[str, int]:
    """Data files on disk under a sink (hidden / underscore paths skipped): path -> size."""
    found: dict[str, int] = {}
    for dirpath, dirs, names in os.walk(out):
        dirs[:] = [d for d in dirs if not d.startswith(("_", "."))]
        for n in names:
            if not n.startswith(("_", ".")):
                p = os.path.join(dirpath, n)
                found[p] = os.path.getsize(p)
    return found


def local(uri: str) -> str:
    """A logged ``file:`` URI as a local path."""
    return re.sub(r"^file:(//)?", "", uri)


def batch_of_name(path: str) -> int:
    m = DATA_FILE_BATCH.search(os.path.basename(path))
    assert m, f"{path} is not a batch-tagged data file name"
    return int(m.group(1))


def log_names(meta: Path) -> list[str]:
    """Log file names in a metadata dir (no hidden files), in batch order."""
    names = [n for n in os.listdir(meta) if re.fullmatch(r"\d+(\.compact)?", n)]
    return sorted(names, key=lambda n: int(n.split(".")[0]))


def raw_lines(log_file: Path) -> list[dict[str, Any]]:
    """The entries of a raw log file, checking the ``v1`` header; each line parsed as JSON."""
    lines = log_file.read_text().split("\n")
    assert lines[0] == "v1", f"{log_file}: header {lines[0]!r}"
    return [json.loads(line) for line in lines[1:] if line]


def raw_live_entries(meta: Path) -> list[dict[str, Any]]:
    """Live entries straight from the files (latest compact + the batch files after it)."""
    names = log_names(meta)
    compacts = [n for n in names if n.endswith(".compact")]
    start = int(compacts[-1].split(".")[0]) if compacts else -1
    entries: list[dict[str, Any]] = []
    for n in names:
        if int(n.split(".")[0]) >= start:
            entries += raw_lines(meta / n)
    return entries


def ck_ids(ck: Path, sub: str) -> list[int]:
    d = ck / sub
    return sorted(int(n) for n in os.listdir(d) if n.isdigit()) if d.exists() else []


REWIND_STEPS = [
    "intent",
    "fence",
    "data-files",
    "sink-log",
    "state",
    "commits",
    "offsets",
    "source-logs",
    "done",
]


# ---- a stateless sink built once and restored per test ------------------------------------


@dataclass(frozen=True)
class Pristine:
    """Folders under ``work`` as they were built, copied aside to ``work/pristine``;
    ``restore()`` puts them back in place: the same absolute paths, so the URIs a log or a
    checkpoint holds stay valid (mtimes preserved). A sink built once serves several tests."""

    work: Path
    names: tuple[str, ...]

    @classmethod
    def save(cls, work: Path, names: list[str]) -> Pristine:
        for name in names:
            shutil.copytree(work / name, work / "pristine" / name)
        return cls(work, tuple(names))

    def restore(self) -> None:
        for name in self.names:
            shutil.rmtree(self.work / name, ignore_errors=True)
            shutil.copytree(self.work / "pristine" / name, self.work / name)


@dataclass
class IdsSink:
    """The stateless sink: ``batches`` input files, one per batch, written with v = id.

    Built once per module into ``work``, then copied aside; ``restore()`` puts the pristine copy
    back in place (same absolute paths, so the logged URIs stay valid; mtimes preserved).
    """

    work: Path
    batches: int
    inbox: Path = field(init=False)
    out: Path = field(init=False)
    ck: Path = field(init=False)
    pristine: Path = field(init=False)
    files_by_batch: dict[int, dict[str, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.inbox = self.work / "in"
        self.out = self.work / "out"
        self.ck = self.work / "ck"
        self.pristine = self.work / "pristine"

    @property
    def meta(self) -> Path:
        return self.out / "_spark_metadata"

    def build(self, spark: SparkSession) -> None:
        for i in range(self.batches):
            write_input(self.inbox, i, id_rows(i))
        run_ids_query(spark, self.inbox, self.out, self.ck, mult=1)
        log = batchlog.SinkLog(spark, str(self.out))
        assert log.latest_batch() == self.batches - 1
        for b in range(self.batches):
            paths = [local(p) for p in log.files(b)]
            self.files_by_batch[b] = {p: os.path.getsize(p) for p in paths}
        Pristine.save(self.work, ["out", "ck"])

    def restore(self) -> None:
        Pristine(self.work, ("out", "ck")).restore()
        for f in self.inbox.iterdir():
            if int(f.stem[1:]) >= self.batches:
                f.unlink()

    def expected(self, to_batch: int, upto: int | None = None) -> list[tuple[int, int, int]]:
        """Rows after a rewind to ``to_batch`` and a re-run with v = id * 2."""
        last = self.batches - 1 if upto is None else upto
        return sorted(
            (i, j % 2, i * (2 if b >= to_batch else 1))
            for b in range(last + 1)
            for j, i in enumerate(ids_of_batch(b))
        )


_SHARED: dict[str, IdsSink] = {}


def shared_ids_sink(spark: SparkSession, base: Path, batches: int = 20) -> IdsSink:
    """The stateless sink, built once per test process (both test modules use it).

    Build and use it with ``spark.sql.streaming.fileSink.log.compactInterval=3`` and
    ``...fileSource.log.compactInterval=4`` (see ``IDS_CONFS``).
    """
    key = str(base)
    if key not in _SHARED:
        sink = IdsSink(base / "ids-sink", batches)
        with confs(spark, IDS_CONFS):
            sink.build(spark)
        _SHARED[key] = sink
    _SHARED[key].restore()
    return _SHARED[key]


IDS_CONFS: dict[str, str | None] = {SINK_COMPACT: "3", SOURCE_COMPACT: "4"}


def compact_names(ids: range, interval: int) -> list[str]:
    """Log file names for batch ids ``ids`` of a log compacting every ``interval`` batches."""
    return [f"{i}.compact" if (i + 1) % interval == 0 else str(i) for i in ids]


def assert_sink_exact(spark: SparkSession, sink: IdsSink, to_batch: int, last: int) -> None:
    """After a rewind to ``to_batch`` and a re-run with v = id*2 up to batch ``last``."""
    df = spark.read.parquet(str(sink.out)).withColumn("f", F.input_file_name())
    got = [tuple(r) for r in df.select("id", "p", "v", "f").collect()]
    # every row exactly once, old transformation below to_batch and the new one from it
    assert sorted(r[:3] for r in got) == sink.expected(to_batch, last)
    # and each row sits in a data file named after the batch that read its input file
    assert all(batch_of_name(r[3]) == r[0] // 10 for r in got)

    log = batchlog.SinkLog(spark, str(sink.out))
    assert log.latest_batch() == last
    assert log.batches() == list(range(last + 1))
    # files of the batches before to_batch are the very files the first run wrote
    pristine = snapshot(sink.pristine / "out")
    for b in range(min(to_batch, last + 1)):
        files = {local(p): os.path.getsize(local(p)) for p in log.files(b)}
        assert files == sink.files_by_batch[b]
        for p in files:
            pp = str(sink.pristine / "out" / os.path.relpath(p, sink.out))
            st = os.stat(p)
            assert (st.st_size, st.st_mtime_ns) == pristine[pp]
    # files of the re-run batches are new ones, two per batch (p=0, p=1), named after the batch
    for b in range(to_batch, last + 1):
        files = [local(p) for p in log.files(b)]
        assert len(files) == 2
        assert {batch_of_name(p) for p in files} == {b}
        assert not set(files) & set(sink.files_by_batch.get(b, {}))

    # the raw log: every live line carries its batch as the last field, matching the file name,
    # and the live entries are exactly the data files on disk (nothing orphaned or dangling)
    entries = raw_live_entries(sink.meta)
    assert all(list(e)[-1] == "batchId" for e in entries)
    assert all(e["batchId"] == batch_of_name(e["path"]) for e in entries)
    assert {local(e["path"]): e["size"] for e in entries} == data_files(sink.out)
    assert log_names(sink.meta) == compact_names(range(last + 1), 3)
