"""A PySpark driver that writes a sink, then runs rounds of what a long-lived driver calls on it:
the ``SinkLog`` lookups, reads by batch, ``verify``, a dry-run ``vacuum`` and a dry-run ``rewind``
(``tests/test_ops_no_growth.py`` counts its JVM's live objects between rounds).

It prints ``READY <jvm pid>`` once the sink is written (7 batches, a compact file and its index at
batch 5), then reads commands on its standard input: ``round`` runs a round (``DONE``),
``settle`` lets the JVM free what Python dropped (``SETTLED``), ``exit`` ends it.

    ops_rounds.py WORKDIR     (with tests/ on PYTHONPATH, for its support module)
"""

from __future__ import annotations

import gc
import linecache
import sys
import threading
import time
from pathlib import Path

import batchlog
from json_inbox import drop_inputs, start_partitioned_sink
from py4j.clientserver import FinalizerWorker
from pyspark.sql import SparkSession
from support import await_query, get_spark

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


def settle(spark: SparkSession) -> None:
    """Lets the JVM free what Python no longer holds. py4j frees a JVM object once Python drops
    its proxy; a proxy whose methods were called sits in a reference cycle (its cached methods
    name it), which Python's cycle collector breaks on its own schedule, or now. The frees go to
    the JVM from py4j's finalizer thread, one request at a time: all of them have landed once its
    queue is empty and the thread is back in its idle wait (a sleep, not a request)."""
    # Spark's events of an ended execution hold its plan (the read's table and file index) until
    # every listener has had them, on the listener bus's threads
    spark.sparkContext._jsc.sc().listenerBus().waitUntilEmpty(30000)  # type: ignore[union-attr]
    gc.collect()
    queue = spark.sparkContext._gateway._gateway_client.finalizer_deque  # type: ignore[union-attr]
    (worker,) = [t for t in threading.enumerate() if isinstance(t, FinalizerWorker)]

    def idle() -> bool:
        frame = sys._current_frames().get(worker.ident or -1)
        return (
            not queue
            and frame is not None
            and "sleep" in linecache.getline(frame.f_code.co_filename, frame.f_lineno)
        )

    deadline = time.monotonic() + 30
    while not idle():
        assert time.monotonic() < deadline, "py4j's finalizer thread did not go idle in 30 s"
        time.sleep(0.05)


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
