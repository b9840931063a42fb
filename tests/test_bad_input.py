"""Bad input: damaged logs, junk, odd paths and partition values. Each failure must name the file
and the way out and change nothing; odd names must round-trip through the log and plain Spark."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from reliability_support import (
    SINK_CONFS,
    batchlog,
    check_log,
    local_path,
    read_ids,
    run_stream,
    snapshot,
    spark_session,
    sql_conf,
    write_input,
)

spark = spark_session  # the module's session fixture


@pytest.fixture(scope="module")
def pristine(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A sink of 5 batches (2.compact, 3, 4) with its input and checkpoint, written once."""
    root = tmp_path_factory.mktemp("pristine")
    write_input(root / "in", 0, 5, 4)
    run_stream(spark, root / "in", root / "out", root / "chk")
    return root


@pytest.fixture
def sink(pristine: Path, tmp_path: Path) -> Path:
    """A private copy of the pristine sink (``out``, ``in``, ``chk`` under the returned root),
    for reading only: the copied checkpoint's file-source log names the pristine input files."""
    root = tmp_path / "s"
    shutil.copytree(pristine, root)
    return root


@pytest.fixture
def live_sink(spark: SparkSession, tmp_path: Path) -> Path:
    """A sink of 5 batches (2.compact, 3, 4) whose query can be restarted."""
    root = tmp_path / "live"
    write_input(root / "in", 0, 5, 4)
    run_stream(spark, root / "in", root / "out", root / "chk")
    return root


def _edit(log_file: Path, text: str) -> None:
    """Replaces a log file's content; its checksum sidecar goes, as after a hand edit."""
    log_file.write_text(text, encoding="utf-8")
    log_file.with_name(f".{log_file.name}.crc").unlink(missing_ok=True)


def _lines(log_file: Path) -> list[str]:
    return log_file.read_text(encoding="utf-8").split("\n")


def _damage(kind: str, f: Path) -> tuple[str, type[Exception]]:
    """Damages log file ``f``; returns the expected message fragment and error class."""
    lines = _lines(f)
    n = len(lines)  # the last line's number (the header is line 1)
    if kind == "truncated line":
        _edit(f, "\n".join(lines[:-1] + [lines[-1][: len(lines[-1]) // 2]]))
        return f"line {n}, is not a valid log entry", batchlog.CorruptLogError
    if kind == "corrupt line":
        _edit(f, "\n".join(lines[:-1] + ['{"path": 12, "size": ???}']))
        return f"line {n}, is not a valid log entry", batchlog.CorruptLogError
    if kind in ("v2", "v99"):
        _edit(f, "\n".join([kind] + lines[1:]))
        return f"its version header is '{kind}' but only 'v1' is supported", (
            batchlog.CorruptLogError
        )
    if kind == "empty":
        _edit(f, "")
        return "it is empty (a truncated write)", batchlog.CorruptLogError
    if kind == "deleted compact file":
        f.unlink()
        f.with_name(f".{f.name}.crc").unlink(missing_ok=True)
        return "is missing: the log needs it to read batch 2", batchlog.MissingLogFileError
    raise AssertionError(kind)


@pytest.mark.parametrize(
    "kind,name",
    [
        ("truncated line", "4"),
        ("corrupt line", "4"),
        ("v2", "3"),
        ("v99", "4"),
        ("empty", "4"),
        ("deleted compact file", "2.compact"),
    ],
)
def test_damaged_log_fails_clearly_and_changes_nothing(
    spark: SparkSession, sink: Path, kind: str, name: str
):
    out = sink / "out"
    f = out / "_spark_metadata" / name
    fragment, error = _damage(kind, f)
    before = snapshot(out)
    # The session's compactInterval is the query's (3): without any compact file left, the log
    # can only know from it that batch 2 lives in 2.compact.
    with sql_conf(spark, **SINK_CONFS):
        # files(b) reads only the log file holding batch b (through the compact file's index)
        batch = 1 if name.endswith(".compact") else int(name)
        with pytest.raises(error) as e:
            batchlog.SinkLog(spark, str(out)).files(batch)
        msg = str(e.value)
        names_file = re.compile(rf"_spark_metadata/{re.escape(name)}[ ,]")  # 2.compact, not 2
        assert names_file.search(msg) and fragment in msg, msg
        assert "Nothing was changed" in msg and "python -m batchlog repair" in msg, msg
        r = batchlog.verify(spark, str(out))  # reports, does not crash
        assert r["healthy"] is False and len(r["logErrors"]) == 1
        assert names_file.search(r["logErrors"][0]) and fragment in r["logErrors"][0]
        assert r["orphanCount"] == 0  # with an unreadable log, nothing is called an orphan
        with pytest.raises(type(e.value)):
            batchlog.vacuum(spark, str(out), older_than="0s", dry_run=False)
    assert snapshot(out) == before, "a failed read, verify or vacuum changed the sink"


def test_batch_file_missing_at_compaction_fails_the_query_then_repair(
    spark: SparkSession, live_sink: Path
):
    out, inp, chk = live_sink / "out", live_sink / "in", live_sink / "chk"
    (out / "_spark_metadata" / "3").unlink()
    (out / "_spark_metadata" / ".3.crc").unlink(missing_ok=True)
    meta_before = snapshot(out / "_spark_metadata")
    ids = [json.loads(x)["id"] for p in inp.glob("*.json") for x in p.read_text().splitlines()]
    ids += write_input(inp, 5, 1, 4)  # batch 5 must compact 2.compact, 3 and 4
    with pytest.raises(Exception) as e:
        run_stream(spark, inp, out, chk)
    msg = str(e.value)
    assert "_spark_metadata/3 is missing: the log needs it to read batch 3" in msg, msg
    assert "python -m batchlog repair" in msg
    # what the failure left is said, and true: the batch's files are gone, the log untouched
    assert "Batch 5 was not committed; its data files are deleted." in msg, msg
    assert "Nothing was changed" not in msg, msg
    assert not [p for p in out.rglob("part-*-batch-5-*") if not p.name.endswith(".crc")]
    assert snapshot(out / "_spark_metadata") == meta_before, "the failed compaction left a trace"

    with sql_conf(spark, **SINK_CONFS):
        r = batchlog.repair(spark, str(out))
    assert r["written"] is True and r["latestBatch"] == 4
    assert list(out.glob("_spark_metadata.broken-*/2.compact")), "the damaged log was not kept"
    run_stream(spark, inp, out, chk)
    assert check_log(out, 3)["latest"] == 5
    assert read_ids(spark, out) == sorted(ids)


def test_junk_files_in_the_log_directory_are_ignored(spark: SparkSession, live_sink: Path):
    out, inp, chk = live_sink / "out", live_sink / "in", live_sink / "chk"
    meta = out / "_spark_metadata"
    (meta / "README").write_text("do not touch\n")
    (meta / "foo.tmp").write_text("partial")
    log = batchlog.SinkLog(spark, str(out))
    assert log.latest_batch() == 4 and log.batches() == [0, 1, 2, 3, 4]
    assert batchlog.verify(spark, str(out))["healthy"] is True
    ids = sorted(read_ids(spark, out) + write_input(inp, 5, 2, 4))
    run_stream(spark, inp, out, chk)  # batch 5 compacts past the junk; 6 follows
    assert check_log(out, 3, junk=frozenset({"README", "foo.tmp"}))["latest"] == 6
    assert (meta / "README").read_text() == "do not touch\n" and (meta / "foo.tmp").exists()
    assert read_ids(spark, out) == ids


def test_output_path_with_space_unicode_and_percent(spark: SparkSession, tmp_path: Path):
    root = tmp_path / "dir with space ü 100%25 ½"
    ids = write_input(root / "in", 0, 4, 3)
    out = root / "out 50% é"
    run_stream(spark, root / "in", out, root / "chk")
    live = check_log(out, 3)["live"]  # every logged path decodes to an existing file
    assert all(str(out) in str(local_path(e["path"])) for e in live)
    log = batchlog.SinkLog(spark, str(out))
    assert log.batches() == [0, 1, 2, 3]
    f = log.files(3)[0]
    assert log.batch_of(f) == 3 and log.batch_of(str(local_path(f))) == 3
    assert batchlog.verify(spark, str(out))["healthy"] is True
    assert read_ids(spark, out) == sorted(ids)


def test_partition_values_with_special_characters(spark: SparkSession, tmp_path: Path):
    values = ["a b", "x=y", "50%", "ü½", "it's", 'say "hi"', "a,b"]
    inp = tmp_path / "in"
    inp.mkdir()
    rows = [{"id": i, "part": v, "payload": "p"} for i, v in enumerate(values * 2)]
    for b in range(4):
        (inp / f"in-{b}.json").write_text(
            "\n".join(json.dumps(r) for r in rows[b::4]) + "\n", encoding="utf-8"
        )
    out = tmp_path / "out"
    run_stream(spark, inp, out, tmp_path / "chk")
    check_log(out, 3)
    assert batchlog.verify(spark, str(out))["healthy"] is True
    got = sorted((r.id, r.part) for r in spark.read.parquet(str(out)).collect())
    assert got == sorted((r["id"], r["part"]) for r in rows)
    by_batch = {b: batchlog.SinkLog(spark, str(out)).files(b) for b in range(4)}
    assert sum(len(v) for v in by_batch.values()) == len(check_log(out, 3)["live"])
