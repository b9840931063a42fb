"""batchlog from PySpark: real streaming queries into file sinks, the log they leave on disk, the
``SinkLog`` API, and what plain Spark (a process without the batchlog jar) reads back."""

from __future__ import annotations

import json
import os
import re
import shutil
from contextlib import AbstractContextManager as ContextManager
from dataclasses import dataclass
from pathlib import Path

import batchlog
import pytest
from conftest import (
    COMMIT_PROTOCOL_KEY,
    COMPACT_INTERVAL_KEY,
    TAGGED_FIELDS,
    UUID_RE,
    VANILLA_COMMIT_PROTOCOL,
    VANILLA_FIELDS,
    assert_entry_matches_disk,
    batch_rows,
    data_files,
    drop_inputs,
    log_file_names,
    raw_log_lines,
    read_back_plain,
    read_log_file,
    row_tuples,
    run_stream,
    session_conf,
    tagged_files_by_batch,
    uri,
)
from pyspark.sql import SparkSession

BATCHES = 8
INTERVAL = 3  # compactions at batches 2 and 5
EXTENSIONS = {"parquet": r"\.c000\.snappy\.parquet", "json": r"\.c000\.json"}


def countries_of(batch: int) -> int:
    """Batch b writes 1, 2 or 3 partitions (so 1, 2 or 3 files): b % 3 + 1."""
    return batch % 3 + 1


def inputs(batches: range) -> dict[int, list[dict[str, object]]]:
    return {b: batch_rows(b, countries_of(b)) for b in batches}


def expected_rows(batches: range) -> list[tuple]:
    return row_tuples(r for rows in inputs(batches).values() for r in rows)


def with_plugin(spark: SparkSession) -> ContextManager[None]:
    return session_conf(
        spark,
        {
            COMMIT_PROTOCOL_KEY: batchlog.COMMIT_PROTOCOL_CLASS,
            COMPACT_INTERVAL_KEY: str(INTERVAL),
        },
    )


def without_plugin(spark: SparkSession) -> ContextManager[None]:
    return session_conf(
        spark,
        {
            COMMIT_PROTOCOL_KEY: VANILLA_COMMIT_PROTOCOL,
            COMPACT_INTERVAL_KEY: str(INTERVAL),
        },
    )


# ---- a plugin-only sink, parquet and json ------------------------------------------------------


@dataclass
class Sink:
    fmt: str
    output: Path
    batches_run: list[int]


@pytest.fixture(scope="module")
def sinks(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Sink]:
    """Two sinks (parquet, json) partitioned by country, written through batchlog: 8 batches,
    compactInterval 3, so the log compacts at batches 2 and 5."""
    work = tmp_path_factory.mktemp("plugin-sinks")
    drop_inputs(work / "input", inputs(range(BATCHES)))
    result = {}
    with with_plugin(spark):
        for fmt in EXTENSIONS:
            out = work / f"out-{fmt}"
            ran = run_stream(spark, work / "input", out, work / f"chk-{fmt}", fmt=fmt)
            result[fmt] = Sink(fmt, out, ran)
    return result


@pytest.fixture(scope="module")
def plain_readback(sinks: dict[str, Sink]) -> dict[str, dict[str, object]]:
    """Both sinks read back by one plain-Spark process without the batchlog jar."""
    fmts = list(sinks)
    results = read_back_plain([(fmt, str(sinks[fmt].output)) for fmt in fmts])
    return dict(zip(fmts, results))


FORMATS = pytest.mark.parametrize("fmt", list(EXTENSIONS))


def test_commit_protocol_class_matches_jvm(spark: SparkSession) -> None:
    jvm_name = spark._jvm.io.batchlog.BatchLogConf.CommitProtocolClass()  # type: ignore[attr-defined]
    assert batchlog.COMMIT_PROTOCOL_CLASS == jvm_name == "io.batchlog.BatchTaggedCommitProtocol"
    assert spark.conf.get(COMMIT_PROTOCOL_KEY) == batchlog.COMMIT_PROTOCOL_CLASS


@FORMATS
def test_data_files_are_named_by_batch(sinks: dict[str, Sink], fmt: str) -> None:
    sink = sinks[fmt]
    assert sink.batches_run == list(range(BATCHES))
    files = data_files(sink.output)
    assert len(files) == sum(countries_of(b) for b in range(BATCHES))
    by_batch: dict[int, list[str]] = {}
    for p in files:
        m = re.fullmatch(rf"part-00000-batch-([0-9]+)-{UUID_RE}{EXTENSIONS[fmt]}", p.name)
        assert m, p.name
        by_batch.setdefault(int(m.group(1)), []).append(p.parent.name)
    assert {b: sorted(dirs) for b, dirs in by_batch.items()} == {
        b: [f"country={c}" for c in ["de", "fr", "jp"][: countries_of(b)]] for b in range(BATCHES)
    }


@FORMATS
def test_log_lines_on_disk(sinks: dict[str, Sink], fmt: str) -> None:
    out = sinks[fmt].output
    meta = out / "_spark_metadata"
    assert log_file_names(out) == [
        "0",
        "1",
        "2.compact",
        "3",
        "4",
        "5.compact",
        "6",
        "7",
    ]
    by_batch = tagged_files_by_batch(out)

    for name in log_file_names(out):
        entries = read_log_file(meta / name)
        for e in entries:
            assert list(e) == TAGGED_FIELDS, e  # Spark's fields in Spark's order, batchId last
            assert_entry_matches_disk(e)
            # the batch in the data file's name is the batch in the log line
            assert f"-batch-{e['batchId']}-" in str(e["path"]), e
        n = int(name.split(".")[0])
        if name.endswith(".compact"):
            # every live entry up to and including batch n, in batch order
            assert [e["batchId"] for e in entries] == [
                b for b in range(n + 1) for _ in range(countries_of(b))
            ]
            assert {str(e["path"]) for e in entries} == set().union(
                *(by_batch[b] for b in range(n + 1))
            )
        else:
            assert [e["batchId"] for e in entries] == [n] * countries_of(n)
            assert {str(e["path"]) for e in entries} == by_batch[n]

    # Compaction copies the previous compact file and the batch files since, line for line.
    def lines(name: str) -> list[str]:
        return raw_log_lines(meta / name)

    assert lines("2.compact")[:3] == lines("0") + lines("1")
    assert lines("5.compact")[:9] == lines("2.compact") + lines("3") + lines("4")


@FORMATS
def test_sink_log_api(spark: SparkSession, sinks: dict[str, Sink], fmt: str) -> None:
    out = sinks[fmt].output
    by_batch = tagged_files_by_batch(out)
    log = batchlog.SinkLog(spark, str(out))

    assert log.latest_batch() == BATCHES - 1
    assert log.batches() == list(range(BATCHES))
    for b in range(BATCHES):
        files = log.files(b)
        assert len(files) == countries_of(b)
        assert set(files) == by_batch[b]
        for f in files:
            assert log.batch_of(f) == b
            assert log.batch_of(f[len("file://") :]) == b  # a plain local path works too
    assert log.files(BATCHES) == []
    with pytest.raises(batchlog.InvalidArgumentError, match="batch = -1"):
        log.files(-1)
    missing = str(out / "country=de" / "part-00000-batch-0-not-in-the-log.parquet")
    with pytest.raises(KeyError, match="not a live file"):
        log.batch_of(missing)

    entries = log.entries()
    assert entries.columns == TAGGED_FIELDS
    counts = {r["batchId"]: r["count"] for r in entries.groupBy("batchId").count().collect()}
    assert counts == {b: countries_of(b) for b in range(BATCHES)}
    rows = entries.collect()
    assert {r["path"]: r["batchId"] for r in rows} == {
        p: b for b, paths in by_batch.items() for p in paths
    }

    meta = out / "_spark_metadata"
    log_names = log_file_names(out)
    assert log.inspect() == {
        "outputPath": str(out),
        "metadataPath": f"file:{meta}",
        "latestBatch": BATCHES - 1,
        "compactInterval": INTERVAL,
        "latestCompact": "5.compact",
        "nextCompactionBatch": 8,
        "logFiles": len(log_names),
        "logBytes": sum((meta / n).stat().st_size for n in log_names),
        "untaggedFiles": 0,
        "untaggedBytes": 0,
        "batches": [
            {
                "batchId": b,
                "files": countries_of(b),
                "bytes": sum(Path(p[len("file://") :]).stat().st_size for p in by_batch[b]),
            }
            for b in range(BATCHES)
        ],
        # every entry is tagged, and no checkpoint was given: only the sink's lineage counts;
        # the sink's owner is the query of its checkpoint, from its first batch
        "horizon": {
            "horizon": 0,
            "sinkHorizon": 0,
            "minBatchesToRetain": 100,
            "owner": json.loads((out.parent / f"chk-{fmt}" / "metadata").read_text())["id"],
            "ownerSince": 0,
        },
    }


@FORMATS
def test_plain_spark_reads_the_sink(
    sinks: dict[str, Sink], plain_readback: dict[str, dict[str, object]], fmt: str
) -> None:
    result = plain_readback[fmt]
    assert result["count"] == 4 * BATCHES
    assert row_tuples(result["rows"]) == expected_rows(range(BATCHES))  # type: ignore[arg-type]
    assert sorted(result["columns"]) == ["amount", "country", "id"]  # type: ignore[arg-type]
    # plain Spark reads exactly the files the (compacted) log lists
    all_files = set().union(*tagged_files_by_batch(sinks[fmt].output).values())
    assert set(result["inputFiles"]) == all_files  # type: ignore[arg-type]


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
    crc = bad.parent / ".1.crc"  # Hadoop's checksum would reject the edited file first
    if crc.exists():
        crc.unlink()

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
    assert log_file_names(out) == [
        "0",
        "1",
        "2.compact",
        "3",
        "4",
        "5.compact",
        "6",
        "7",
    ]

    expected = {**vanilla_paths, **tagged_files_by_batch(out)}
    assert sorted(expected) == list(range(BATCHES))
    for name in ["2.compact", "3", "4", "5.compact", "6", "7"]:
        for e in _entries(out, name):
            assert list(e) == TAGGED_FIELDS, (
                name,
                e,
            )  # vanilla entries got their batch
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
    assert log_file_names(out) == [
        "0",
        "1",
        "2.compact",
        "3",
        "4",
        "5.compact",
        "6",
        "7",
    ]
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
        assert list(e) == TAGGED_FIELDS, e
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


def test_module_under_test_is_this_checkout() -> None:
    assert Path(batchlog.__file__).parent == Path(__file__).resolve().parents[1] / "python" / (
        "batchlog"
    )
    assert os.path.basename(batchlog.jar_path()) == "batchlog.jar"


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
