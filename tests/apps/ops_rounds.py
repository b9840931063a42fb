"""A PySpark driver that writes a sink, then runs rounds of what a long-lived driver calls on it:
the ``SinkLog`` lookups, reads by batch, ``verify``, a dry-run ``vacuum`` and a dry-run ``rewind``,
or calls that fail (``tests/test_ops_no_growth.py`` counts its JVM's live objects between rounds).

It prints ``READY <jvm pid>`` once its sinks are written (7 batches each, a compact file and its
index at batch 5; one of them damaged) and a query is writing a third, then reads commands on its
standard input: ``round`` runs a round of calls that succeed, ``failing`` one of calls that fail
(``DONE``), ``settle`` lets the JVM free what Python dropped (``SETTLED``), ``exit`` ends it.

    ops_rounds.py WORKDIR     (with tests/ on PYTHONPATH, for its support module)
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import batchlog
from json_inbox import SCHEMA, drop_inputs, start_partitioned_sink
from pyspark.sql import SparkSession
from support import await_query, get_spark, rot_compact, settle

BATCHES = 7


def write_sink(spark: SparkSession, work: Path, name: str = "") -> tuple[str, str]:
    """Seven batches through batchlog's committer, partitioned by country; (sink, checkpoint)."""
    inbox, out, chk = work / f"{name}in", str(work / f"{name}out"), str(work / f"{name}chk")
    drop_inputs(inbox, BATCHES, rows=4)
    await_query(start_partitioned_sink(spark, inbox, out, chk), out)  # and its lease gone
    return out, chk


def start_live(spark: SparkSession, work: Path) -> tuple[Any, str, str]:
    """A query that keeps writing a sink of its own (its one input read, then idle until it is
    stopped); (query, sink, checkpoint) once its first batch is in and reported (a rewind tells
    a query of its session by its progress: QueryActiveError; before, by its lease)."""
    inbox, out, chk = work / "live-in", str(work / "live-out"), str(work / "live-chk")
    drop_inputs(inbox, 1, rows=2)
    q = (
        spark.readStream.schema(SCHEMA)
        .json(str(inbox))
        .writeStream.format("parquet")
        .option("checkpointLocation", chk)
        .trigger(processingTime="1 hour")
        .start(out)
    )
    while q.lastProgress is None or batchlog.SinkLog(spark, out).latest_batch() != 0:
        assert q.isActive, q.exception()
        q.awaitTermination(0.1)
    return q, out, chk


def fails(error: type[Exception], call: Callable[[], object]) -> None:
    try:
        call()
    except error:
        return
    raise AssertionError(f"{call} did not raise {error.__name__}")


def one_round(spark: SparkSession, out: str, chk: str, kept: batchlog.SinkLog) -> None:
    """Every call once, each result checked (a round that failed would count nothing): the
    lookups on a new ``SinkLog`` and on ``kept``, the one the driver keeps for its life."""
    for log in (batchlog.SinkLog(spark, out), kept):
        assert log.batches() == list(range(BATCHES)), log.batches()
        assert log.latest_batch() == BATCHES - 1
        for b in range(BATCHES):
            files = log.files(b)
            assert len(files) == 2, files
            assert log.batch_of(files[0]) == b
    for b in (1, BATCHES - 1):
        rows = batchlog.read(spark, out, "parquet", from_batch=b, to_batch=b).count()
        assert rows == 4, (b, rows)
    assert batchlog.verify(spark, out).healthy
    vacuum = batchlog.vacuum(spark, out, older_than="1m", dry_run=True, quiet=True)
    assert vacuum.candidate_files == 0, vacuum
    plan = batchlog.rewind(spark, out, chk, to_batch=3, dry_run=True, quiet=True)
    assert plan.plan.affected_batches == [3, 4, 5, 6], plan.plan


def failing_round(
    spark: SparkSession, out: str, chk: str, damaged: str, live: str, live_chk: str
) -> None:
    """Calls that fail, each with its named error (or, for ``verify``, its verdict): a rewind
    refused while a query writes the sink, a damaged compact file verified and read, bad
    arguments, a path that is not a sink."""
    fails(
        batchlog.QueryActiveError,
        lambda: batchlog.rewind(spark, live, live_chk, to_batch=0, dry_run=True, quiet=True),
    )
    report = batchlog.verify(spark, damaged)
    assert not report.healthy and [r.batch_id for r in report.damaged_runs] == [3], report
    fails(batchlog.CorruptLogError, lambda: batchlog.SinkLog(spark, damaged).files(3))
    fails(
        batchlog.CorruptLogError,
        lambda: batchlog.read(spark, damaged, "parquet", from_batch=3, to_batch=3).count(),
    )
    fails(
        batchlog.InvalidArgumentError,
        lambda: batchlog.read(spark, out, "parquet", from_batch=5, to_batch=2),
    )
    fails(
        batchlog.InvalidArgumentError,
        lambda: batchlog.rewind(spark, out, chk, to_batch=99, dry_run=True, quiet=True),
    )
    fails(
        batchlog.InvalidArgumentError,
        lambda: batchlog.vacuum(spark, out, older_than="soon", dry_run=True, quiet=True),
    )
    fails(batchlog.NotASinkError, lambda: batchlog.SinkLog(spark, f"{out}-nowhere").batches())


def main(work: Path) -> None:
    spark = get_spark()  # the test suite's session: local[2], batchlog's jar, quiet
    spark.conf.set("spark.sql.streaming.fileSink.log.compactInterval", "3")
    out, chk = write_sink(spark, work)
    damaged, _ = write_sink(spark, work, "damaged-")
    rot_compact(Path(damaged) / "_spark_metadata" / "5.compact", 3, "size")
    query, live, live_chk = start_live(spark, work)
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    kept = batchlog.SinkLog(spark, out)
    print(f"READY {jvm.java.lang.ProcessHandle.current().pid()}", flush=True)
    for line in sys.stdin:
        command = line.strip()
        if command == "exit":
            break
        if command == "settle":
            settle(spark)
            print("SETTLED", flush=True)
        elif command == "failing":
            failing_round(spark, out, chk, damaged, live, live_chk)
            print("DONE", flush=True)
        else:
            one_round(spark, out, chk, kept)
            print("DONE", flush=True)
    query.stop()
    spark.stop()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
