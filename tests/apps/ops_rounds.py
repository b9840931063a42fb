"""A PySpark driver that writes a sink, then runs rounds of what a long-lived driver calls on it:
the ``SinkLog`` lookups, reads by batch, ``verify``, a dry-run ``vacuum`` and a dry-run ``rewind``
(``tests/test_ops_no_growth.py`` counts its JVM's live objects between rounds).

It prints ``READY <jvm pid>`` once the sink is written (7 batches, a compact file and its index at
batch 5), then reads commands on its standard input: ``round`` runs a round (``DONE``),
``settle`` lets the JVM free what Python dropped (``SETTLED``), ``exit`` ends it.

    ops_rounds.py WORKDIR     (with tests/ on PYTHONPATH, for its support module)
"""

from __future__ import annotations

import sys
from pathlib import Path

import batchlog
from json_inbox import drop_inputs, start_partitioned_sink
from pyspark.sql import SparkSession
from support import await_query, get_spark, settle

BATCHES = 7


def write_sink(spark: SparkSession, work: Path) -> tuple[str, str]:
    """Seven batches through batchlog's committer, partitioned by country; (sink, checkpoint)."""
    inbox, out, chk = work / "in", str(work / "out"), str(work / "chk")
    drop_inputs(inbox, BATCHES, rows=4)
    await_query(start_partitioned_sink(spark, inbox, out, chk), out)  # and its lease gone
    return out, chk


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


def main(work: Path) -> None:
    spark = get_spark()  # the test suite's session: local[2], batchlog's jar, quiet
    spark.conf.set("spark.sql.streaming.fileSink.log.compactInterval", "3")
    out, chk = write_sink(spark, work)
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
        else:
            one_round(spark, out, chk, kept)
            print("DONE", flush=True)
    spark.stop()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
