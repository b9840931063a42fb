"""``batchlog.arrow``: the reader without Spark gives the JVM's answers (issue 44).

Its contract is docs/format.md and the golden sinks: every golden sink is read without a JVM and
compared with what the JVM said when it wrote it (``expected.json``): latest batch, batches, each
batch's files, every entry's batch, ``batch_of``, and the rows of a read by batch and of the whole
sink. Then damage (bit rot in a compact file that keeps its JSON valid, a bad header, a lost batch
file, a bad index) gets the JVM's error codes, or the JVM's fallback; and live sinks written by
real queries in this run (compactions, a rewind, a repair, retention, S3) are read by both readers
and compared. One test reads a sink in a process where ``pyspark`` cannot be imported at all.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import pytest
from batchlog import arrow
from batchlog.errors import (
    CorruptLogError,
    InvalidArgumentError,
    MissingLogFileError,
    NotASinkError,
)
from conftest import COMPACT_INTERVAL_KEY, batch_rows, drop_inputs, run_stream
from golden_support import SINKS, every_sink_installed, expected, install
from pyspark.sql import SparkSession
from storage_support import RemoteFs, gcs, run_query, s3  # noqa: F401  (the fixtures)
from support import REPO, batchlog, session_conf


@pytest.fixture(scope="module")
def golden() -> Iterator[Path]:
    """Every golden sink put back where it was written (the lock held for the module)."""
    with every_sink_installed() as root:
        yield root


def _rows(table: Any) -> list[str]:
    return sorted(json.dumps(r, sort_keys=True) for r in table.to_pylist())


@pytest.mark.parametrize("name", sorted(SINKS))
def test_a_golden_sink_reads_as_the_jvm_read_it(golden: Path, name: str) -> None:
    want = expected(name)
    log = arrow.SinkLog(str(golden / name / SINKS[name]["out"]))
    assert log.latest_batch() == want["latest_batch"]
    assert log.batches() == want["batches"]
    for b in range(want["latest_batch"] + 2):
        assert sorted(log.files(b)) == sorted(want["files"].get(str(b), [])), b
    assert sorted([e.path, e.batch_id] for e in log.entries()) == sorted(want["entries"])
    for path, batch in want["batch_of"].items():
        assert log.batch_of(path) == batch, path
    # the rows of each batch and of the whole sink, as the batchlog data source read them
    for b, rows in want["read_by_batch"].items():
        assert _rows(log.dataset(batches=b).to_table()) == rows, b
    assert _rows(arrow.dataset(str(golden / name / SINKS[name]["out"])).to_table()) == sorted(
        want["read_all"]
    )


def test_a_sink_named_as_hadoop_or_as_a_relative_path(
    golden: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``file:/x`` (Hadoop's qualified form, as the JVM prints a sink), ``file:///x`` and a path
    relative to the working directory name the same sink."""
    out = golden / "plain" / "out"
    want = expected("plain")["batches"]
    monkeypatch.chdir(golden / "plain")
    for name in (f"file:{out}", f"file://{out}", "out", "./out/"):
        assert arrow.SinkLog(name).batches() == want, name


def test_as_of_batch_and_batch_ranges(golden: Path) -> None:
    out = str(golden / "plain" / "out")
    want = expected("plain")["read_by_batch"]
    upto = sorted(r for b in range(4) for r in want[str(b)])
    assert _rows(arrow.dataset(out, as_of_batch=3).to_table()) == upto
    assert _rows(arrow.dataset(out, batches="0-3").to_table()) == upto
    assert _rows(arrow.dataset(out, batches=(0, 3)).to_table()) == upto
    assert _rows(arrow.dataset(out, batches=2).to_table()) == sorted(want["2"])
    assert arrow.dataset(out, batches="90-99").to_table().num_rows == 0
    for bad in ("3-1", "x", "-1"):
        with pytest.raises(InvalidArgumentError, match="Invalid batches"):
            arrow.dataset(out, batches=bad)
    with pytest.raises(InvalidArgumentError, match="not both"):
        arrow.dataset(out, batches="1", as_of_batch=2)


def _copy(golden: Path, name: str, dst: Path) -> Path:
    """A copy of a golden sink's output (modification times kept: its indexes stay proved)."""
    shutil.copytree(golden / name / SINKS[name]["out"], dst, copy_function=shutil.copy2)
    return dst


def test_bit_rot_in_a_compact_file_is_corrupt_log(golden: Path, tmp_path: Path) -> None:
    """A digit changed in 5.compact: still valid JSON, same length and time. The index's CRC32C
    catches it, as the JVM's does: CORRUPT_LOG naming the file and the batch, from the lookup
    of that batch and from a full read; other batches' lookups (the compaction batch's own
    included) still answer, reading only their runs."""
    out = _copy(golden, "plain", tmp_path / "out")
    compact = out / "_spark_metadata" / "5.compact"
    data = compact.read_bytes()
    st = compact.stat()
    at = data.index(b'"size":') + len(b'"size":')  # the first line: batch 0's
    digit = data[at : at + 1]
    compact.write_bytes(data[:at] + (b"7" if digit != b"7" else b"8") + data[at + 1 :])
    os.utime(compact, ns=(st.st_atime_ns, st.st_mtime_ns))
    log = arrow.SinkLog(str(out))
    with pytest.raises(CorruptLogError, match=r"5\.compact is damaged: the bytes of batch 0 "):
        log.files(0)
    with pytest.raises(CorruptLogError, match="python -m batchlog repair"):
        log.entries()
    assert sorted(log.files(3)) == sorted(expected("plain")["files"]["3"])
    # the compaction batch's own lines too: read through the index, never the whole file
    assert sorted(log.files(5)) == sorted(expected("plain")["files"]["5"])


def test_a_bad_header_a_lost_batch_file_and_no_sink(golden: Path, tmp_path: Path) -> None:
    out = _copy(golden, "plain", tmp_path / "out")
    (out / "_spark_metadata" / "6").write_text('v2\n{"path":"x"}')
    with pytest.raises(CorruptLogError, match="version header is 'v2' but only 'v1'"):
        arrow.SinkLog(str(out)).files(6)
    (out / "_spark_metadata" / "6").unlink()
    (out / "_spark_metadata" / "3").unlink()
    log = arrow.SinkLog(str(out))  # latest 5 now: 5.compact answers everything
    assert log.latest_batch() == 5 and log.batches() == [0, 1, 2, 3, 4, 5]
    with pytest.raises(KeyError, match="not a live file"):
        log.batch_of(str(out / "nope.parquet"))
    (out / "_spark_metadata" / "7").write_text("v1\n")
    with pytest.raises(MissingLogFileError, match=r"_spark_metadata/6 is missing"):
        arrow.SinkLog(str(out)).batches()
    with pytest.raises(NotASinkError, match="has no _spark_metadata"):
        arrow.SinkLog(str(tmp_path))


def test_a_damaged_index_is_not_trusted(golden: Path, tmp_path: Path) -> None:
    """An index truncated, of another compact file, or of a newer version: not used (the compact
    file is read whole instead), never an error, and the answers are the same."""
    want = expected("plain")
    for damage in ("truncate", "other", "newer"):
        out = _copy(golden, "plain", tmp_path / damage)
        index = out / "_spark_metadata" / "5.compact.index"
        if damage == "truncate":
            index.write_bytes(index.read_bytes()[:-40])
        elif damage == "other":
            shutil.copy2(out / "_spark_metadata" / "2.compact.index", index)
        else:
            index.write_text("batchlog-index v9 0000000030\nwhatever\n")
        log = arrow.SinkLog(str(out))
        assert log.batches() == want["batches"], damage
        for b in want["batches"]:
            assert sorted(log.files(b)) == sorted(want["files"][str(b)]), (damage, b)


def test_it_reads_without_pyspark(golden: Path) -> None:
    """In a process where ``import pyspark`` fails, ``batchlog.arrow`` (and ``batchlog`` itself)
    import and read a sink, and the CLI's ``files`` answers; nothing of pyspark or py4j is
    loaded."""
    out = golden / "plain" / "out"
    script = f"""
import importlib.abc, sys
class NoSpark(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in ("pyspark", "py4j"):
            raise ImportError("no " + name + " here")
sys.meta_path.insert(0, NoSpark())
from batchlog import arrow
log = arrow.SinkLog({str(out)!r})
print(log.latest_batch(), log.batches(), len(log.files(3)))
print(arrow.dataset({str(out)!r}, batches="3").to_table().num_rows)
from batchlog.__main__ import main  # the CLI's files on a local sink: no JVM either
assert main(["files", {str(out)!r}, "--batch", "3"]) == 0
print(sorted(m for m in sys.modules if m.split(".")[0] in ("pyspark", "py4j")))
"""
    env = {**os.environ, "PYTHONPATH": str(REPO / "python")}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    files3 = len(expected("plain")["files"]["3"])
    lines = done.stdout.split("\n")
    assert lines[:2] == [f"6 [0, 1, 2, 3, 4, 5, 6] {files3}", "4"]
    assert sorted(lines[2 : 2 + files3]) == sorted(expected("plain")["files"]["3"])
    assert lines[2 + files3] == "[]"


# ---- live sinks written in this run: both readers give the same answers ----------------------


def _same_answers(spark: SparkSession, out: str, fs: pafs.FileSystem | None = None) -> int:
    """``batchlog.arrow`` and the JVM's ``batchlog.SinkLog`` agree on ``out``: latest batch,
    batches, each batch's files, every entry's batch, ``batch_of``, and each batch's rows (the
    ``batchlog`` data source's against the pyarrow dataset's). Returns the latest batch."""
    jvm, log = batchlog.SinkLog(spark, out), arrow.SinkLog(out, fs)
    latest = jvm.latest_batch()
    assert latest is not None and log.latest_batch() == latest
    assert log.batches() == jvm.batches()
    for b in range(latest + 2):
        assert sorted(log.files(b)) == sorted(jvm.files(b)), b
    want = sorted((r.path, r.batchId) for r in jvm.entries().collect())
    assert sorted((e.path, e.batch_id) for e in log.entries()) == want
    for path, b in want:
        assert log.batch_of(path) == b, path
    for b in jvm.batches():
        spark_rows = spark.read.format("batchlog").option("batches", f"{b}-{b}").load(out)
        assert _rows(log.dataset(batches=b).to_table()) == sorted(
            json.dumps(r.asDict(), sort_keys=True) for r in spark_rows.collect()
        ), b
    return latest


def test_a_live_sink_compacted_rewound_and_repaired(spark: SparkSession, tmp_path: Path) -> None:
    inbox, out, chk = tmp_path / "in", tmp_path / "out", tmp_path / "chk"
    drop_inputs(inbox, {b: batch_rows(b, 1 + b % 3) for b in range(8)})
    with session_conf(spark, {COMPACT_INTERVAL_KEY: "3"}):
        run_stream(spark, inbox, out, chk)
        assert _same_answers(spark, str(out)) == 7  # compact files 2 and 5 (v3 indexes), 6, 7
        batchlog.rewind(spark, str(out), str(chk), to_batch=4, quiet=True)
        assert _same_answers(spark, str(out)) == 3
        drop_inputs(inbox, {8: batch_rows(8, 2)})
        run_stream(spark, inbox, out, chk)  # 4..8 again
        assert _same_answers(spark, str(out)) == 8
        shutil.rmtree(out / "_spark_metadata")  # lost: rebuilt from the data files' names
        batchlog.repair(spark, str(out))
        assert _same_answers(spark, str(out)) == 8


def test_a_live_sink_under_retention(spark: SparkSession, tmp_path: Path) -> None:
    inbox, out, chk = tmp_path / "in", tmp_path / "out", tmp_path / "chk"
    drop_inputs(inbox, {b: batch_rows(b, 2) for b in range(9)})
    conf = {COMPACT_INTERVAL_KEY: "3", "spark.batchlog.retention.batches": "2"}
    with session_conf(spark, conf):
        run_stream(spark, inbox, out, chk)
        assert _same_answers(spark, str(out)) == 8
    assert arrow.SinkLog(str(out)).batches() == [7, 8]  # two batches kept


@pytest.fixture(params=["s3", "gcs"])
def store(request: pytest.FixtureRequest, spark: SparkSession) -> tuple[str, pafs.FileSystem]:
    """An object store the JVM writes to (moto, fake-gcs-server), and pyarrow's file system of
    it: ``S3FileSystem`` or ``GcsFileSystem`` at the same server."""
    root: str = request.getfixturevalue(request.param)
    hconf = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[union-attr]
    if request.param == "s3":
        endpoint = hconf.get("fs.s3a.endpoint").removeprefix("http://")
        fs: pafs.FileSystem = pafs.S3FileSystem(
            endpoint_override=endpoint,
            scheme="http",
            access_key="testing",
            secret_key="testing",
            region="us-east-1",
        )
    else:
        endpoint = hconf.get("fs.gs.storage.root.url").removeprefix("http://")
        fs = pafs.GcsFileSystem(anonymous=True, endpoint_override=endpoint, scheme="http")
    return root, fs


def test_a_live_sink_on_an_object_store(
    spark: SparkSession, store: tuple[str, pafs.FileSystem], tmp_path: Path
) -> None:
    """On S3 and on Google Cloud Storage, through pyarrow's file systems: the same answers as the
    JVM, and the compact file's index proved on the store (the modification time pyarrow reports
    is the one the connector recorded in the index)."""
    root, fs = store
    out, chk = f"{root}/arrow-{tmp_path.name}/out", f"{root}/arrow-{tmp_path.name}/chk"
    drop_inputs(tmp_path / "in", {b: batch_rows(b, 2) for b in range(7)})
    with session_conf(spark, {COMPACT_INTERVAL_KEY: "3"}):
        run_query(spark, RemoteFs(spark, root), tmp_path / "in", out, chk, stateful=False)
    assert _same_answers(spark, out, fs) == 6
    log = arrow.SinkLog(out, fs)
    assert log._proved_runs(log._layout(), 5) is not None  # 5.compact's index proved on the store


def test_an_old_sink_continued_by_this_version(spark: SparkSession, golden: Path) -> None:
    """The golden sink ``plain`` (an earlier version's, ``v2`` indexes) continued by this version
    for three batches (compaction 8 writes a ``v3`` index), then read by both (put back after)."""
    root = golden / "plain"
    try:
        drop_inputs(root / "in", {b: batch_rows(b, 2) for b in range(7, 10)})
        with session_conf(spark, {COMPACT_INTERVAL_KEY: "3"}):
            run_stream(spark, root / "in", root / "out", root / "chk")
        assert (
            (root / "out" / "_spark_metadata" / "8.compact.index")
            .read_text()
            .startswith("batchlog-index v3")
        )
        assert _same_answers(spark, str(root / "out")) == 9
    finally:
        install("plain")


def test_a_log_file_compacted_away_between_listing_and_read(golden: Path, tmp_path: Path) -> None:
    """A writer compacts while the reader reads: the reader listed the log at batch 3 (2.compact
    and 3), then the writer logged 4, 5.compact and 6 and deleted 2.compact and 3 before the
    reader opened them. As Spark's allFiles() does, the reader lists again and reads the newer
    compaction: batch 6's answers. The same deletion with no newer compaction is a missing file."""
    full = _copy(golden, "plain", tmp_path / "full")
    meta = full / "_spark_metadata"
    later = {n: meta / n for n in ("4", "5.compact", "5.compact.index", "6")}

    class Racing(arrow.SinkLog):
        """Lists the log at batch 3; the writer's step happens right after that listing."""

        def __init__(self, path: str, newer: bool) -> None:
            self.listings, self.newer = 0, newer
            super().__init__(path)

        def _layout(self) -> Any:
            self.listings += 1
            if self.listings == 1:
                aside = {n: f.read_bytes() for n, f in later.items()}
                stats = {n: f.stat() for n, f in later.items()}
                for f in later.values():
                    f.unlink()
                listed = super()._layout()
                if self.newer:  # the writer's batches 4..6, with their compaction's times
                    for n, f in later.items():
                        f.write_bytes(aside[n])
                        os.utime(f, ns=(stats[n].st_atime_ns, stats[n].st_mtime_ns))
                for gone in ("2.compact", "2.compact.index", "3"):
                    (meta / gone).unlink()
                return listed
            return super()._layout()

    want = expected("plain")
    log = Racing(str(full), newer=True)
    assert log.batches() == want["batches"] and log.listings == 2
    shutil.rmtree(full)
    full = _copy(golden, "plain", tmp_path / "full")
    with pytest.raises(MissingLogFileError, match=r"_spark_metadata/2\.compact is missing"):
        Racing(str(full), newer=False).batches()
