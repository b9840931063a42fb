"""The Python API over a real Spark Connect session (no py4j gateway): every call goes through the
server's batchlog SQL (``BATCHLOG`` statements, ``batchlog_*`` table functions) and the
``batchlog`` data source, and answers what it answers over py4j."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import INPUT_SCHEMA, batch_rows, drop_inputs
from connect_support import connect_spark, connect_url  # noqa: F401  (the fixtures)
from pyspark.sql import SparkSession
from pyspark.sql.connect.session import SparkSession as ConnectSession
from support import await_query, batchlog

BATCHES = 5


def run_upstream(cs: ConnectSession, root: Path) -> None:
    """A stateless query through the Connect server: input files -> parquet, one file a batch."""
    events = (
        cs.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1).json(str(root / "in"))
    )
    q = (
        events.writeStream.format("parquet")
        .option("checkpointLocation", str(root / "chk"))
        .partitionBy("country")
        .trigger(availableNow=True)
        .start(str(root / "out"))
    )
    await_query(q, root / "out")
    assert q.exception() is None


def ids_of(rows: list) -> list[int]:
    return sorted(int(r["id"]) for r in rows)


def expected_ids(batches: range) -> list[int]:
    return sorted(b * 100 + i for b in batches for i in range(4))


def test_sinklog_reads_over_connect_match_py4j(
    connect_spark: ConnectSession, spark: SparkSession, tmp_path: Path
) -> None:
    drop_inputs(tmp_path / "in", {b: batch_rows(b, 3) for b in range(BATCHES)})
    run_upstream(connect_spark, tmp_path)
    out, chk = str(tmp_path / "out"), str(tmp_path / "chk")
    remote, local = batchlog.SinkLog(connect_spark, out), batchlog.SinkLog(spark, out)
    assert remote.latest_batch() == local.latest_batch() == BATCHES - 1
    assert remote.batches() == local.batches() == list(range(BATCHES))
    for b in range(BATCHES):
        assert sorted(remote.files(b)) == sorted(local.files(b)) and len(local.files(b)) == 3
    f = local.files(2)[0]
    assert remote.batch_of(f) == 2
    with pytest.raises(KeyError):
        remote.batch_of(out + "/nope.parquet")
    entries = remote.entries().collect()
    assert sorted((r["path"], r["batchId"]) for r in entries) == sorted(
        (p, b) for b in range(BATCHES) for p in local.files(b)
    )
    assert remote.inspect(chk) == local.inspect(chk)
    assert batchlog.verify(connect_spark, out) == batchlog.verify(spark, out)
    # reads by batch: the helper and the data source
    rows = batchlog.read(connect_spark, out, "parquet", from_batch=1, to_batch=2).collect()
    assert ids_of(rows) == expected_ids(range(1, 3))
    src = connect_spark.read.format("batchlog").option("asOfBatch", 1).load(out).collect()
    assert ids_of(src) == expected_ids(range(2))


def test_rewind_and_maintenance_over_connect(
    connect_spark: ConnectSession, spark: SparkSession, tmp_path: Path
) -> None:
    drop_inputs(tmp_path / "in", {b: batch_rows(b, 3) for b in range(BATCHES)})
    run_upstream(connect_spark, tmp_path)
    out, chk = str(tmp_path / "out"), str(tmp_path / "chk")
    action = batchlog.rewind_action(connect_spark, out, chk, to_batch=3)
    plan = action.plan()
    assert plan == batchlog.rewind_action(spark, out, chk, to_batch=3).plan()
    assert plan.affected_batches == [3, 4]
    dry = batchlog.rewind(connect_spark, out, chk, to_batch=3, dry_run=True)
    assert dry.result is None and batchlog.SinkLog(spark, out).latest_batch() == BATCHES - 1
    done = batchlog.rewind(connect_spark, out, chk, to_batch=3)
    assert done.result is not None and done.result.data_files_deleted == 6
    assert batchlog.SinkLog(connect_spark, out).latest_batch() == 2
    # the query reruns batches 3 and 4, once
    run_upstream(connect_spark, tmp_path)
    assert ids_of(connect_spark.read.parquet(out).collect()) == expected_ids(range(BATCHES))

    orphan = (
        tmp_path
        / "out"
        / "country=de"
        / ("part-00000-batch-9-00000000-0000-0000-0000-000000000000.c000.snappy.parquet")
    )
    orphan.write_bytes(b"x")
    assert batchlog.vacuum(connect_spark, out, older_than="0s").candidate_files == 1
    assert orphan.exists()
    assert batchlog.vacuum(connect_spark, out, older_than="0s", dry_run=False).deleted_files == 1
    assert not orphan.exists()
    assert batchlog.repair(connect_spark, out, dry_run=True).written is False
    assert batchlog.adopt(connect_spark, out, dry_run=True).entries_untagged == 0
    assert batchlog.takeover(connect_spark, out, chk, dry_run=True).already_owner is True


def test_errors_over_connect_are_batchlog_errors(
    connect_spark: ConnectSession, tmp_path: Path
) -> None:
    with pytest.raises(batchlog.NotASinkError, match="has no _spark_metadata directory"):
        batchlog.SinkLog(connect_spark, str(tmp_path))
    with pytest.raises(batchlog.NotASinkError):
        batchlog.verify(connect_spark, str(tmp_path))
    drop_inputs(tmp_path / "in", {b: batch_rows(b, 3) for b in range(2)})
    run_upstream(connect_spark, tmp_path)
    with pytest.raises(batchlog.InvalidArgumentError, match="a rewind can go to batch 2 at most"):
        batchlog.rewind(connect_spark, str(tmp_path / "out"), str(tmp_path / "chk"), to_batch=9)


def run_downstream(cs: ConnectSession, root: Path) -> None:
    """The ``batchlog`` source over ``out``, two upstream batches a trigger, to ``down``."""
    stream = cs.readStream.format("batchlog").option("maxBatchesPerTrigger", 2)
    # a stream infers its schema only where Spark's file sources would
    cs.conf.set("spark.sql.streaming.schemaInference", "true")
    try:
        q = (
            stream.load(str(root / "out"))
            .writeStream.format("parquet")
            .option("checkpointLocation", str(root / "down-chk"))
            .trigger(availableNow=True)
            .start(str(root / "down"))
        )
    finally:
        cs.conf.unset("spark.sql.streaming.schemaInference")
    await_query(q, root / "down")
    assert q.exception() is None


def test_downstream_stream_over_connect(
    connect_spark: ConnectSession, spark: SparkSession, tmp_path: Path
) -> None:
    drop_inputs(tmp_path / "in", {b: batch_rows(b, 3) for b in range(BATCHES)})
    run_upstream(connect_spark, tmp_path)
    run_downstream(connect_spark, tmp_path)
    # two upstream batches a trigger: downstream batches 0, 1, 2
    assert batchlog.SinkLog(connect_spark, str(tmp_path / "down")).batches() == [0, 1, 2]
    rows = connect_spark.read.parquet(str(tmp_path / "down")).collect()
    assert ids_of(rows) == expected_ids(range(BATCHES))

    # a pipeline rewind over Connect: the plan py4j gives, then carried out; the downstream
    # (registered as it started on the server) goes back to its batch 1, which read batch 3
    out, chk = str(tmp_path / "out"), str(tmp_path / "chk")
    plan = batchlog.cascade_action(connect_spark, out, chk, 3).plan()
    assert plan == batchlog.cascade_action(spark, out, chk, 3).plan()
    assert [(h.kind, h.to_batch) for h in plan.hops] == [("root", 3), ("batchlog", 1)]
    done = batchlog.rewind(connect_spark, out, chk, to_batch=3, cascade=True)
    assert done.results is not None and [r.to_batch for r in done.results if r] == [3, 1]
    run_downstream(connect_spark, tmp_path)  # before its upstream: it waits, reads nothing
    run_upstream(connect_spark, tmp_path)
    run_downstream(connect_spark, tmp_path)
    rows = connect_spark.read.parquet(str(tmp_path / "down")).collect()
    assert ids_of(rows) == expected_ids(range(BATCHES))
