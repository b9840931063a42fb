"""A sink knows its readers (issue 41, item 1): a query that reads a batchlog sink, with the
``batchlog`` source or Spark's file source over its path, registers itself with that sink as it
starts (``_batchlog/_readers/``), once per run; ``inspect`` lists the readers, stale ones marked.

Real queries on real files; the registration happens in the reading query's own session.
"""

from __future__ import annotations

import time
from pathlib import Path

from pyspark.sql import SparkSession
from reliability_support import (
    SINK_CONFS,
    batchlog,
    run_stream,
    spark_session,
    sql_conf,
    write_input,
)
from support import await_query, run_cli

spark = spark_session  # the module's session fixture

INFER = {"spark.sql.streaming.schemaInference": "true"}


def _downstream(spark: SparkSession, frame, out: Path, chk: Path) -> None:  # type: ignore[no-untyped-def]
    with sql_conf(spark, **SINK_CONFS):
        q = (
            frame.writeStream.format("parquet")
            .option("checkpointLocation", str(chk))
            .trigger(availableNow=True)
            .start(str(out))
        )
        await_query(q, out)


def _batchlog_source(spark: SparkSession, *ups: Path):  # type: ignore[no-untyped-def]
    with sql_conf(spark, **INFER):
        frames = [spark.readStream.format("batchlog").load(str(up)) for up in ups]
    out = frames[0]
    for f in frames[1:]:
        out = out.unionByName(f)
    return out


def test_readers_register_as_they_start_and_inspect_lists_them(
    spark: SparkSession, tmp_path: Path
) -> None:
    up, up2 = tmp_path / "up", tmp_path / "up2"
    write_input(tmp_path / "in", 0, 2, 3)
    write_input(tmp_path / "in2", 10, 1, 3)
    run_stream(spark, tmp_path / "in", up, tmp_path / "up-chk")
    run_stream(spark, tmp_path / "in2", up2, tmp_path / "up2-chk")

    # a: the batchlog source over up (source 0) and up2 (source 1); b: Spark's file source over up
    _downstream(spark, _batchlog_source(spark, up, up2), tmp_path / "a", tmp_path / "a-chk")
    plain = spark.readStream.schema("id LONG, payload STRING, part STRING").parquet(str(up))
    _downstream(spark, plain, tmp_path / "b", tmp_path / "b-chk")

    readers = batchlog.SinkLog(spark, str(up)).inspect().readers
    got = sorted(
        (Path(r.checkpoint.removeprefix("file:")).name, r.source_index, r.kind, r.stale)
        for r in readers
    )
    assert got == [("a-chk", 0, "batchlog", False), ("b-chk", 0, "file", False)]
    assert {Path((r.sink or "").removeprefix("file:")).name for r in readers} == {"a", "b"}
    (a2,) = batchlog.SinkLog(spark, str(up2)).inspect().readers
    assert (Path(a2.checkpoint).name, a2.source_index, a2.kind) == ("a-chk", 1, "batchlog")
    assert a2.query_id == next(r.query_id for r in readers if r.kind == "batchlog")

    # a restart registers again, once: the first time is kept, the last moves on
    before = {(r.query_id, r.source_index): r for r in readers}
    time.sleep(0.01)
    _downstream(spark, _batchlog_source(spark, up, up2), tmp_path / "a", tmp_path / "a-chk")
    after = batchlog.SinkLog(spark, str(up)).inspect().readers
    assert len(after) == 2
    for r in after:
        b = before[(r.query_id, r.source_index)]
        assert r.since_ms == b.since_ms and (r.seen_ms > b.seen_ms) == (r.kind == "batchlog")

    # unseen longer than the setting: stale
    with sql_conf(spark, **{"spark.batchlog.readers.staleAfter": "1ms"}):
        time.sleep(0.01)
        assert all(r.stale for r in batchlog.SinkLog(spark, str(up)).inspect().readers)

    # the records are no data: verify, vacuum and plain Spark do not see them
    assert batchlog.verify(spark, str(up)).healthy
    vacuum = batchlog.vacuum(spark, str(up), older_than="0s", dry_run=True, quiet=True)
    assert (vacuum.orphan_files, vacuum.candidate_files) == (0, 0)
    assert sorted(r.id for r in spark.read.parquet(str(up)).collect()) == sorted(
        k * 1000 + i for k in range(2) for i in range(3)
    )

    cli = run_cli("inspect", str(up))
    assert cli.returncode == 0, cli.stderr[-3000:]
    assert "reader query" in cli.stdout and "a-chk" in cli.stdout and "b-chk" in cli.stdout


def test_a_query_reading_plain_files_registers_nowhere(spark: SparkSession, tmp_path: Path) -> None:
    """Only sinks batchlog writes get a record: a file source over plain JSON input writes
    nothing beside that input."""
    write_input(tmp_path / "in", 0, 1, 3)
    run_stream(spark, tmp_path / "in", tmp_path / "up", tmp_path / "up-chk")
    assert not (tmp_path / "in" / "_batchlog").exists()
    assert batchlog.SinkLog(spark, str(tmp_path / "up")).inspect().readers == []
