"""batchlog.read (rows by batch range) and batchlog.adopt (tagging a plain-Spark sink)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import rewind_support as rs
from pyspark.sql import SparkSession

# fixtures shared with the other rewind tests: the session conf and the 20-batch ids sink
from rewind_support import N_BATCHES, _ids_confs, batchlog, sink  # noqa: E402, F401


def rows_of_batches(batches: range) -> list[tuple[int, int, int]]:
    """(id, p, v) rows the first run wrote for ``batches`` (v = id)."""
    return sorted((i, j % 2, i) for b in batches for j, i in enumerate(rs.ids_of_batch(b)))


# ---- read -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("from_batch", "to_batch", "batches"),
    [
        pytest.param(3, 9, range(3, 10), id="3..9-across-compactions"),
        pytest.param(7, 7, range(7, 8), id="one-batch"),
        pytest.param(None, 4, range(0, 5), id="as-of-4"),
        pytest.param(18, None, range(18, 20), id="since-18"),
        pytest.param(None, None, range(0, 20), id="all"),
        pytest.param(0, 19, range(0, 20), id="0..19"),
    ],
)
def test_read_returns_exactly_the_rows_of_the_batches(
    spark: SparkSession,
    sink: rs.IdsSink,
    from_batch: int | None,
    to_batch: int | None,
    batches: range,
) -> None:
    df = batchlog.read(spark, str(sink.out), "parquet", from_batch=from_batch, to_batch=to_batch)
    assert df.schema == spark.read.parquet(str(sink.out)).schema
    assert sorted(df.columns) == ["id", "p", "v"]
    assert rs.rows_of(df, "id", "p", "v") == rows_of_batches(batches)


@pytest.mark.parametrize(
    ("from_batch", "to_batch"),
    [pytest.param(20, None, id="after-latest"), pytest.param(25, 30, id="far-after")],
)
def test_read_of_an_empty_range_is_empty_with_the_sink_schema(
    spark: SparkSession, sink: rs.IdsSink, from_batch: int, to_batch: int | None
) -> None:
    df = batchlog.read(spark, str(sink.out), "parquet", from_batch=from_batch, to_batch=to_batch)
    assert df.schema == spark.read.parquet(str(sink.out)).schema
    assert df.collect() == []


@pytest.mark.parametrize(
    ("from_batch", "to_batch", "fragment"),
    [
        pytest.param(-1, None, "Invalid from_batch = -1: it must be >= 0", id="negative-from"),
        pytest.param(None, -2, "Invalid to_batch = -2: it must be >= 0", id="negative-to"),
        pytest.param(9, 3, "Invalid from_batch = 9: it must be <= to_batch (3)", id="from>to"),
    ],
)
def test_read_refuses_invalid_ranges(
    spark: SparkSession,
    sink: rs.IdsSink,
    from_batch: int | None,
    to_batch: int | None,
    fragment: str,
) -> None:
    with pytest.raises(batchlog.InvalidArgumentError) as e:
        batchlog.read(spark, str(sink.out), "parquet", from_batch=from_batch, to_batch=to_batch)
    assert fragment in str(e.value)


# ---- adopt ------------------------------------------------------------------------------------

PLAIN_BATCHES = 8  # compacts 2 and 5 (interval 3); batch files 0, 1, 3, 4, 6, 7 kept


def build_plain_sink(spark: SparkSession, work: Path) -> tuple[Path, Path, Path]:
    """A sink written by plain Spark (Spark's own commit protocol): no batchId anywhere."""
    inbox, out, ck = work / "in", work / "out", work / "ck"
    for i in range(PLAIN_BATCHES):
        rs.write_input(inbox, i, rs.id_rows(i))
    with rs.confs(spark, {rs.COMMIT_PROTOCOL: rs.VANILLA_PROTOCOL}):
        rs.run_ids_query(spark, inbox, out, ck, mult=1)
    return inbox, out, ck


def plain_batches(meta: Path) -> dict[str, int]:
    """Each data file's batch, worked out from the raw log files plain Spark left."""
    batch: dict[str, int] = {}
    seen: set[str] = set()
    for name in rs.log_names(meta):
        n = int(name.split(".")[0])
        for e in rs.raw_lines(meta / name):
            assert "batchId" not in e
            if e["path"] not in seen:
                batch[e["path"]] = n
                seen.add(e["path"])
    return batch


def test_adopt_tags_a_plain_spark_sink_then_rewind_works(
    spark: SparkSession, tmp_path: Path
) -> None:
    inbox, out, ck = build_plain_sink(spark, tmp_path)
    meta = out / "_spark_metadata"
    assert rs.log_names(meta) == rs.compact_names(range(PLAIN_BATCHES), 3)
    truth = plain_batches(meta)
    assert sorted(truth.values()) == sorted(list(range(PLAIN_BATCHES)) * 2)
    assert not any("-batch-" in p for p in truth)  # plain Spark's file names

    # reads already prove every batch from the log files plain Spark kept (the per-batch files,
    # and by difference the compaction batches), without writing anything
    log = batchlog.SinkLog(spark, str(out))
    assert {p: log.batch_of(p) for p in truth} == truth

    before = rs.snapshot(out, ck)
    dry = batchlog.adopt(spark, str(out), dry_run=True, quiet=True)
    assert rs.snapshot(out, ck) == before
    # 2.compact: batches 0-2 (6 entries); 5.compact: batches 0-5 (12 entries)
    assert dry["compactFiles"] == 2 and dry["compactFilesRewritten"] == 0
    assert (dry["entriesTagged"], dry["entriesUntagged"], dry["untaggedHorizon"]) == (18, 0, 0)

    report = batchlog.adopt(spark, str(out), quiet=True)
    assert report["compactFilesRewritten"] == 2
    assert (report["entriesTagged"], report["entriesUntagged"]) == (18, 0)
    assert report["untaggedHorizon"] == 0
    for name in ("2.compact", "5.compact"):
        entries = rs.raw_lines(meta / name)
        assert [e["batchId"] for e in entries] == [truth[e["path"]] for e in entries]
    log = batchlog.SinkLog(spark, str(out))
    assert {p: log.batch_of(p) for p in truth} == truth
    # plain Spark still reads every row
    assert rs.rows_of(spark.read.parquet(str(out)), "id", "p", "v") == rows_of_batches(
        range(PLAIN_BATCHES)
    )

    # a rewind into the compacted range now works; the query continues with batchlog
    batchlog.rewind(spark, str(out), str(ck), 4, quiet=True)
    rs.run_ids_query(spark, inbox, out, ck, mult=2)
    got = rs.rows_of(spark.read.parquet(str(out)), "id", "p", "v")
    assert got == sorted(
        (i, j % 2, i * (2 if b >= 4 else 1))
        for b in range(PLAIN_BATCHES)
        for j, i in enumerate(rs.ids_of_batch(b))
    )
    log = batchlog.SinkLog(spark, str(out))
    assert log.latest_batch() == PLAIN_BATCHES - 1
    for b in range(4, PLAIN_BATCHES):
        assert {rs.batch_of_name(p) for p in log.files(b)} == {b}


def test_adopt_leaves_unprovable_entries_untagged(spark: SparkSession, tmp_path: Path) -> None:
    inbox, out, ck = build_plain_sink(spark, tmp_path)
    meta = out / "_spark_metadata"
    truth = plain_batches(meta)
    # the proof of batch 0's entries is gone (as after Spark's log cleanup)
    os.remove(meta / "0")
    os.remove(meta / ".0.crc")

    report = batchlog.adopt(spark, str(out), quiet=True)
    # in 2.compact the entries of batch 0 and of batch 2 can no longer be told apart (both are
    # in no other file), and so neither can in 5.compact: 4 + 4 untagged; 2 + 8 tagged. Every
    # file of batches 3 and later is known: the horizon is just above batch 2.
    assert (report["entriesTagged"], report["entriesUntagged"]) == (10, 8)
    assert report["untaggedHorizon"] == 3
    unprovable = {0, 2}
    log = batchlog.SinkLog(spark, str(out))
    for path, b in truth.items():
        assert log.batch_of(path) == (None if b in unprovable else b)
    for name in ("2.compact", "5.compact"):
        for e in rs.raw_lines(meta / name):
            b = truth[e["path"]]
            assert e.get("batchId") == (None if b in unprovable else b)

    before = rs.snapshot(out, ck)
    for to_batch in (0, 1, 2):
        with pytest.raises(batchlog.BeyondHorizonError) as e:
            batchlog.rewind(spark, str(out), str(ck), to_batch, quiet=True)
        msg = str(e.value)
        assert "the oldest batch a rewind can reach is 3" in msg
        assert f"run `python -m batchlog adopt file:{out}`" in msg
    assert rs.snapshot(out, ck) == before
    plan = batchlog.rewind(spark, str(out), str(ck), 3, dry_run=True, quiet=True)["plan"]
    assert plan["sinkHorizon"] == 3
    # a rewind to 3 finds every file of batches 3..7 (batch files 3, 4, 6, 7; 5 by difference)
    assert plan["dataFiles"] == (PLAIN_BATCHES - 3) * 2
    assert rs.rows_of(spark.read.parquet(str(out)), "id", "p", "v") == rows_of_batches(
        range(PLAIN_BATCHES)
    )
