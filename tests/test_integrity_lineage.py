"""Lineage survives a vanilla interlude: batches plain Spark wrote are recovered from their files,
and lineage is never made up once the proof is gone.

Real streaming queries (file source -> parquet sink, one input file per batch, compact interval 3)
write real sinks; the log is damaged on disk, rebuilt by ``repair`` and the same query continues.
What is asserted is what a user sees: the rows plain Spark (without batchlog) reads back, and the
files ``SinkLog.files(b)`` gives for each batch, read as parquet, against the input file of ``b``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from reliability_support import (
    TAGGED,
    batchlog,
    local_path,
    snapshot,
    spark_session,
)
from repair_support import (
    PROTOCOL_KEY,
    ROWS,
    VANILLA,
    Input,
    assert_batches,
    assert_plain_reads_all,
    meta_names,
    run_query,
)

spark = spark_session  # the module's session fixture


# ---- case 5: lineage after a vanilla interlude -------------------------------------------------


def interlude_sink(spark: SparkSession, tmp: Path, **confs: str) -> tuple[Input, Path, Path]:
    """Batches 0..4 with batchlog, 5..8 with Spark's own commit protocol, 9..13 with batchlog."""
    inp, out, chk = Input(tmp / "in"), tmp / "out", tmp / "chk"
    inp.add(0, 5)
    run_query(spark, inp, out, chk, **confs)
    inp.add(5, 4)
    run_query(spark, inp, out, chk, **{PROTOCOL_KEY: VANILLA, **confs})
    inp.add(9, 5)
    run_query(spark, inp, out, chk, **confs)
    assert batchlog.SinkLog(spark, str(out)).latest_batch() == 13
    return inp, out, chk


def test_lineage_of_vanilla_batches_is_recovered_and_rewind_replays_them(
    spark: SparkSession, tmp_path: Path
) -> None:
    inp, out, chk = interlude_sink(spark, tmp_path)
    meta = out / "_spark_metadata"
    vanilla_files = [p for p in out.rglob("part-*.parquet") if not TAGGED.search(p.name)]
    assert len(vanilla_files) == 4 * ROWS  # batches 5..8 wrote untagged names
    assert_batches(spark, out, inp, range(14), tagged_names=False)
    lines = (meta / "11.compact").read_text().split("\n")
    assert lines[0] == "v1"
    assert len(lines) - 1 == 12 * ROWS  # batches 0..11
    assert all("batchId" in json.loads(line) for line in lines[1:]), lines
    assert batchlog.SinkLog(spark, str(out)).inspect()["horizon"]["sinkHorizon"] == 0
    assert_plain_reads_all(out, inp)

    log = batchlog.SinkLog(spark, str(out))
    replayed_vanilla = [local_path(p) for b in (6, 7, 8) for p in log.files(b)]
    kept_vanilla = [local_path(p) for p in log.files(5)]
    assert len(replayed_vanilla) == 3 * ROWS and len(kept_vanilla) == ROWS
    assert not any(TAGGED.search(p.name) for p in replayed_vanilla + kept_vanilla)
    plan = batchlog.rewind(spark, str(out), str(chk), 6, quiet=True)["plan"]
    assert plan["sinkHorizon"] == 0
    assert not any(p.exists() for p in replayed_vanilla)  # batches 6.. are redone
    run_query(spark, inp, out, chk)
    assert batchlog.SinkLog(spark, str(out)).latest_batch() == 13
    assert_plain_reads_all(out, inp)
    assert_batches(spark, out, inp, range(14), tagged_names=False)
    assert all(p.exists() for p in kept_vanilla)
    log = batchlog.SinkLog(spark, str(out))
    redone = [p for b in (6, 7, 8) for p in log.files(b)]
    assert len(redone) == 3 * ROWS and all(TAGGED.search(p) for p in redone)  # now by batchlog
    assert batchlog.verify(spark, str(out))["healthy"] is True


def test_lineage_is_never_made_up_once_the_proof_is_gone(
    spark: SparkSession, tmp_path: Path
) -> None:
    confs = {
        "spark.sql.streaming.minBatchesToRetain": "2",
        "spark.sql.streaming.fileSink.log.cleanupDelay": "0",
    }
    inp, out, chk = interlude_sink(spark, tmp_path, **confs)
    names = meta_names(out)
    assert not {"5.compact", "6", "7", "8.compact"} & names, names  # the proof is gone
    log = batchlog.SinkLog(spark, str(out))
    vanilla = [
        str(e["path"]) for e in log.entries().collect() if not re.search(r"-batch-\d+-", e["path"])
    ]
    assert len(vanilla) == 4 * ROWS
    assert all(log.batch_of(p) is None for p in vanilla)
    for b in range(5, 9):
        assert log.files(b) == []
    assert_batches(spark, out, inp, [*range(5), *range(9, 14)])
    assert log.inspect()["horizon"]["sinkHorizon"] == 9
    before = snapshot(tmp_path)
    with pytest.raises(batchlog.BeyondHorizonError) as e:
        batchlog.rewind(spark, str(out), str(chk), 6, quiet=True)
    msg = str(e.value)
    assert "Cannot rewind to batch 6" in msg, msg
    assert "the sink's entries of batches below 9 are untagged" in msg, msg
    assert "Nothing was changed." in msg, msg
    assert snapshot(tmp_path) == before
    assert_plain_reads_all(out, inp)
