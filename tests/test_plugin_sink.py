"""batchlog from PySpark: real streaming queries into file sinks (parquet and json) through the
plugin, the log they leave on disk, the ``SinkLog`` API, and what plain Spark (a process without the
batchlog jar) reads back."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import batchlog
import pyspark
import pytest
from batchlog.reports import BatchFiles, HorizonReport, SinkSummary
from conftest import (
    COMMIT_PROTOCOL_KEY,
    COMMITTED_FIELDS,
    TAGGED_FIELDS,
    UUID_RE,
    assert_entry_matches_disk,
    data_files,
    drop_inputs,
    log_file_names,
    raw_log_lines,
    read_back_plain,
    read_log_file,
    row_tuples,
    run_stream,
    tagged_files_by_batch,
)
from plugin_support import (
    ALL_LOG_NAMES,
    BATCHES,
    EXTENSIONS,
    INTERVAL,
    countries_of,
    expected_rows,
    inputs,
    with_plugin,
)
from pyspark.sql import SparkSession

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
    assert log_file_names(out) == ALL_LOG_NAMES
    by_batch = tagged_files_by_batch(out)

    commits: dict[int, object] = {}
    for name in log_file_names(out):
        entries = read_log_file(meta / name)
        for i, e in enumerate(entries):
            b = int(e["batchId"])  # type: ignore[call-overload]
            # Spark's fields in Spark's order, batchId last; a batch's first line says what its
            # commit knew: query, run, the rows its tasks wrote, how long its write took
            first = i == 0 or entries[i - 1]["batchId"] != b
            assert list(e) == (COMMITTED_FIELDS if first else TAGGED_FIELDS), e
            if first:
                commit = e["commit"]
                assert commits.setdefault(b, commit) == commit, (name, e)  # compaction keeps it
                assert isinstance(commit, dict) and list(commit) == [
                    "queryId",
                    "runId",
                    "rows",
                    "durationMs",
                ], e
                assert commit["rows"] == len(inputs(range(b, b + 1))[b]), e
                assert 0 <= commit["durationMs"] < 300_000, e
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
    # one query, one run wrote every batch
    assert sorted(commits) == list(range(BATCHES))
    assert len({(c["queryId"], c["runId"]) for c in commits.values()}) == 1  # type: ignore[index]

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
    assert log.inspect() == SinkSummary(
        output_path=str(out),
        metadata_path=f"file:{meta}",
        latest_batch=BATCHES - 1,
        compact_interval=INTERVAL,
        latest_compact="5.compact",
        next_compaction_batch=8,
        log_files=len(log_names),
        log_bytes=sum((meta / n).stat().st_size for n in log_names),
        untagged_files=0,
        untagged_bytes=0,
        batches=[
            BatchFiles(
                batch_id=b,
                files=countries_of(b),
                bytes=sum(Path(p[len("file://") :]).stat().st_size for p in by_batch[b]),
            )
            for b in range(BATCHES)
        ],
        # every entry is tagged, and no checkpoint was given: only the sink's lineage counts;
        # the sink's owner is the query of its checkpoint, from its first batch
        horizon=HorizonReport(
            sink_horizon=0,
            checkpoint_horizon=None,
            horizon=0,
            min_batches_to_retain=100,
            owner=json.loads((out.parent / f"chk-{fmt}" / "metadata").read_text())["id"],
            owner_since=0,
            checkpoint_query_id=None,
            checkpoint_skipped_batches=None,
            checkpoint_skipped_first=None,
            checkpoint_skipped_last=None,
        ),
        log_publish="hard link of a temp file (local disk)",
        compaction="client-side copy (not an object store that publishes whole uploads)",
        readers=[],
        lease=None,  # the query stopped: it removed its lease
        retained_from=0,  # no retention set: the log holds every entry
    )


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


@FORMATS
def test_a_glob_read_with_base_path_skips_batchlogs_records(
    spark: SparkSession, sinks: dict[str, Sink], fmt: str
) -> None:
    """``basePath`` + a glob of every entry of the output makes ``_batchlog`` a root path of its
    own; Spark skips only ``_spark_metadata`` as such, so batchlog's records there must be names
    Spark's listing skips, or the read fails with CONFLICTING_DIRECTORY_STRUCTURES (Spark's own
    ``FileStreamSinkSuite``, "partitioned writing and batch reading with 'basePath'")."""
    out = sinks[fmt].output
    assert sorted(p.name for p in (out / "_batchlog").iterdir() if not p.name.startswith(".")) == [
        "_batchlog-sink.1.json",
        "_batchlog-sink.json",
    ]
    rows = spark.read.option("basePath", str(out)).format(fmt).load(f"{out}/*").collect()
    assert row_tuples(r.asDict() for r in rows) == expected_rows(range(BATCHES))


def test_module_under_test_is_this_checkout() -> None:
    assert Path(batchlog.__file__).parent == Path(__file__).resolve().parents[1] / "python" / (
        "batchlog"
    )
    # the jar for the installed pyspark's line, built from this checkout
    line = ".".join(pyspark.__version__.split(".")[:2])
    assert os.path.basename(batchlog.jar_path()) == f"batchlog-spark-{line}_2.13.jar"
