"""batchlog from PySpark, the awkward cases: errors that name the file at fault, plain Spark and
batchlog writing the same sink in turn, sink paths with special characters."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import batchlog
import pytest
from conftest import (
    VANILLA_FIELDS,
    assert_entry_matches_disk,
    data_files,
    drop_inputs,
    is_tagged_line,
    log_file_names,
    read_back_plain,
    read_log_file,
    row_tuples,
    run_stream,
    tagged_files_by_batch,
    uri,
)
from plugin_support import (
    ALL_LOG_NAMES,
    BATCHES,
    countries_of,
    expected_rows,
    inputs,
    with_plugin,
    without_plugin,
)
from pyspark.sql import SparkSession

# ---- errors ------------------------------------------------------------------------------------


def test_not_a_sink(spark: SparkSession, tmp_path: Path) -> None:
    plain_dir = tmp_path / "just-a-directory"
    plain_dir.mkdir()
    (plain_dir / "data.json").write_text("{}\n")
    for path in (plain_dir, tmp_path / "does-not-exist"):
        with pytest.raises(batchlog.NotASinkError) as info:
            batchlog.SinkLog(spark, str(path))
        assert str(path) in str(info.value)
        assert "_spark_metadata" in str(info.value)
        assert isinstance(info.value, batchlog.BatchLogError)


@pytest.fixture(scope="module")
def small_sink(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A two-batch parquet sink written through batchlog: log files 0 (1 entry), 1 (2 entries)."""
    work = tmp_path_factory.mktemp("small-sink")
    drop_inputs(work / "input", inputs(range(2)))
    with with_plugin(spark):
        assert run_stream(spark, work / "input", work / "out", work / "chk") == [0, 1]
    assert log_file_names(work / "out") == ["0", "1"]
    return work / "out"


def _corrupt_line_3(text: str) -> str:
    lines = text.split("\n")
    lines[2] = lines[2][: len(lines[2]) // 2]  # a truncated write
    return "\n".join(lines)


def _drop_size(text: str) -> str:
    lines = text.split("\n")
    lines[2] = re.sub(r'"size":[0-9]+,', "", lines[2])
    return "\n".join(lines)


@pytest.mark.parametrize(
    "corrupt, expected",
    [
        (_corrupt_line_3, r"line 3, is not a valid log entry \(malformed JSON"),
        (
            _drop_size,
            r"line 3, is not a valid log entry \(required field 'size' is missing\)",
        ),
        (
            lambda text: "v2" + text[2:],
            r"cannot be read: its version header is 'v2' but only 'v1' is supported",
        ),
    ],
    ids=["truncated-line", "missing-field", "unknown-version"],
)
def test_corrupt_log_names_the_file(
    spark: SparkSession, small_sink: Path, tmp_path: Path, corrupt, expected: str
) -> None:
    out = tmp_path / "out"
    shutil.copytree(small_sink, out)
    bad = out / "_spark_metadata" / "1"
    bad.write_text(corrupt(bad.read_text()))
    # Hadoop's checksum would reject the edited file first (batchlog writes none on a local disk)
    (bad.parent / ".1.crc").unlink(missing_ok=True)

    log = batchlog.SinkLog(spark, str(out))
    assert log.latest_batch() == 1  # finding the latest batch does not read entries
    # files(0) reads only batch 0's log file (the point of the index); files(1) reads the bad one
    assert log.files(0) == batchlog.SinkLog(spark, str(small_sink)).files(0)
    for call in (log.batches, lambda: log.files(1), log.inspect):
        with pytest.raises(batchlog.CorruptLogError, match=expected) as info:
            call()
        assert f"Sink log file file:{bad}" in str(info.value)
    # the intact sink is unaffected
    assert batchlog.SinkLog(spark, str(small_sink)).batches() == [0, 1]


# ---- mixed logs: plain Spark and batchlog writing the same sink ----------------------------------


def _entries(output: Path, name: str) -> list[dict[str, object]]:
    return read_log_file(output / "_spark_metadata" / name)


def test_vanilla_sink_continued_with_plugin(spark: SparkSession, tmp_path: Path) -> None:
    inbox, out, chk = tmp_path / "input", tmp_path / "out", tmp_path / "chk"

    # batches 0, 1 by plain Spark
    drop_inputs(inbox, inputs(range(2)))
    with without_plugin(spark):
        assert run_stream(spark, inbox, out, chk) == [0, 1]
    assert log_file_names(out) == ["0", "1"]
    vanilla = {b: _entries(out, str(b)) for b in range(2)}
    for b, entries in vanilla.items():
        assert len(entries) == countries_of(b)
        for e in entries:
            assert list(e) == VANILLA_FIELDS, e
            assert "-batch-" not in str(e["path"]), e
    vanilla_paths = {b: {str(e["path"]) for e in entries} for b, entries in vanilla.items()}

    # batchlog reads the vanilla log: each entry's batch is its per-batch log file
    log = batchlog.SinkLog(spark, str(out))
    assert log.batches() == [0, 1]
    assert {b: set(log.files(b)) for b in range(2)} == vanilla_paths
    assert log.inspect()["untaggedFiles"] == 0

    # batches 2..7 by batchlog: compacts at 2 and 5
    drop_inputs(inbox, inputs(range(2, BATCHES)))
    with with_plugin(spark):
        assert run_stream(spark, inbox, out, chk) == list(range(2, BATCHES))
    assert log_file_names(out) == ALL_LOG_NAMES

    expected = {**vanilla_paths, **tagged_files_by_batch(out)}
    assert sorted(expected) == list(range(BATCHES))
    for name in ["2.compact", "3", "4", "5.compact", "6", "7"]:
        for e in _entries(out, name):
            assert is_tagged_line(e), (name, e)  # vanilla entries got their batch
            assert str(e["path"]) in expected[int(e["batchId"])], (name, e)  # type: ignore[arg-type]
            assert_entry_matches_disk(e)
    assert [e["batchId"] for e in _entries(out, "5.compact")] == [
        b for b in range(6) for _ in range(countries_of(b))
    ]

    log = batchlog.SinkLog(spark, str(out))
    assert log.latest_batch() == BATCHES - 1
    assert log.batches() == list(range(BATCHES))
    assert {b: set(log.files(b)) for b in range(BATCHES)} == expected
    for b, paths in expected.items():
        for p in paths:
            assert log.batch_of(p) == b
    assert log.inspect()["untaggedFiles"] == 0

    [plain] = read_back_plain([("parquet", str(out))])
    assert plain["count"] == 4 * BATCHES
    assert row_tuples(plain["rows"]) == expected_rows(range(BATCHES))
    assert set(plain["inputFiles"]) == set().union(*expected.values())


def test_plugin_sink_continued_without_plugin_and_back(spark: SparkSession, tmp_path: Path) -> None:
    inbox, out, chk = tmp_path / "input", tmp_path / "out", tmp_path / "chk"

    # batches 0..3 by batchlog (compacts at 2)
    drop_inputs(inbox, inputs(range(4)))
    with with_plugin(spark):
        assert run_stream(spark, inbox, out, chk) == [0, 1, 2, 3]
    tagged = tagged_files_by_batch(out)
    assert sorted(tagged) == [0, 1, 2, 3]

    # batches 4..7 by plain Spark: its compaction at 5 drops every batchId
    drop_inputs(inbox, inputs(range(4, 8)))
    with without_plugin(spark):
        assert run_stream(spark, inbox, out, chk) == [4, 5, 6, 7]
    assert log_file_names(out) == ALL_LOG_NAMES
    compact5 = _entries(out, "5.compact")
    assert all(list(e) == VANILLA_FIELDS for e in compact5)
    vanilla = {b: {str(e["path"]) for e in _entries(out, str(b))} for b in (4, 6, 7)}
    earlier = set().union(*tagged.values(), vanilla[4])
    vanilla[5] = {str(e["path"]) for e in compact5} - earlier
    for b, paths in vanilla.items():
        assert len(paths) == countries_of(b)
        assert all("-batch-" not in p for p in paths)

    # What batchlog proves: 0..3 by file name; 4, 6 and 7 by their per-batch log files, which
    # survive; 5 by difference: its own entries are those of 5.compact that none of the files its
    # compaction merged (2.compact, 3, 4) holds. Nothing is left untagged, nothing guessed.
    log = batchlog.SinkLog(spark, str(out))
    assert log.latest_batch() == 7
    assert log.batches() == list(range(8))
    for b in (0, 1, 2, 3):
        assert set(log.files(b)) == tagged[b]
    for b in (4, 5, 6, 7):
        assert set(log.files(b)) == vanilla[b]
        for p in vanilla[b]:
            assert log.batch_of(p) == b
    info = log.inspect()
    assert info["untaggedFiles"] == 0 and info["horizon"]["sinkHorizon"] == 0
    counts = {r["batchId"]: r["count"] for r in log.entries().groupBy("batchId").count().collect()}
    assert counts == {b: countries_of(b) for b in range(8)}

    # batch 8 by batchlog again: its compaction writes the proven batches into the lines, so
    # they outlive the per-batch log files that proved them
    drop_inputs(inbox, inputs(range(8, 9)))
    with with_plugin(spark):
        assert run_stream(spark, inbox, out, chk) == [8]
    compact8 = _entries(out, "8.compact")
    assert len(compact8) == sum(countries_of(b) for b in range(9))
    by_batch = {**tagged, **vanilla, **tagged_files_by_batch(out)}
    for e in compact8:
        assert is_tagged_line(e), e
        assert str(e["path"]) in by_batch[int(e["batchId"])]  # type: ignore[arg-type]
    log = batchlog.SinkLog(spark, str(out))
    assert log.batches() == list(range(9))
    assert set(log.files(8)) == tagged_files_by_batch(out)[8]
    assert log.inspect()["untaggedFiles"] == 0

    all_files = {uri(p) for p in data_files(out)}
    assert len(all_files) == sum(countries_of(b) for b in range(9))
    [plain] = read_back_plain([("parquet", str(out))])
    assert plain["count"] == 4 * 9
    assert row_tuples(plain["rows"]) == expected_rows(range(9))
    assert set(plain["inputFiles"]) == all_files


# ---- awkward paths -----------------------------------------------------------------------------


def test_sink_paths_with_special_characters(spark: SparkSession, tmp_path: Path) -> None:
    """Output directories and partition values with characters that are special to URIs, to
    Hadoop globs or to comma-separated path lists: every SinkLog call reads exactly the log."""
    inbox, out = tmp_path / "input", tmp_path / "out,v2 [1]{a,b}"
    countries = ["a b", "x%y", "ü"]
    rows = {b: [{"id": b * 10 + i, "country": c, "amount": b} for i, c in enumerate(countries)]
            for b in range(2)}  # fmt: skip
    drop_inputs(inbox, rows)
    with with_plugin(spark):
        assert run_stream(spark, inbox, out, tmp_path / "chk") == [0, 1]

    by_batch = tagged_files_by_batch(out)
    assert {b: len(p) for b, p in by_batch.items()} == {0: 3, 1: 3}
    log = batchlog.SinkLog(spark, str(out))
    assert log.batches() == [0, 1]
    for b in (0, 1):
        logged = log.files(b)
        # as logged: URIs, so the partition directories are percent-encoded
        assert {f.split("/")[-2] for f in logged} == {
            "country=a%20b",
            "country=x%2525y",
            "country=ü",
        }
        for f in logged:
            assert log.batch_of(f) == b
    for p in data_files(out):
        assert log.batch_of(str(p)) == int(p.name.split("-batch-")[1].split("-")[0])

    entries = log.entries().collect()
    assert sorted((r["batchId"], r["path"]) for r in entries) == sorted(
        (b, log_path) for b in (0, 1) for log_path in log.files(b)
    )
