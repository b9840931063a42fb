"""A sink log written as a running sink writes it, driven through the JVM: for the tests of
server-side compaction (``test_s3_compaction.py`` on S3, ``test_gcs_compose.py`` on GCS).

Batch files ``0``, ``1`` (15,000 entries each) and compaction ``2`` (client-side: there is no
previous compact file; ~10 MiB, indexed), batch files ``3``, ``4`` (a few entries) and compaction
``5`` by the log itself (``BatchTaggedFileStreamSinkLog.add``). The batch files are written as
bytes through Hadoop's file system, in the exact form batchlog writes them (the compaction copies
such lines as they are); their paths do not depend on where the log is, so two logs built alike
compact to the same bytes.
"""

from __future__ import annotations

import json

from conftest import COMPACT_INTERVAL_KEY
from pyspark.sql import SparkSession
from support import session_conf

SERVER_SIDE_KEY = "spark.batchlog.compaction.serverSide"
BIG = 15_000  # entries of batches 0 and 1: 2.compact is ~10 MiB (server-side from 8 MiB)


def line(b: int, i: int) -> str:
    """An entry as batchlog writes it (``LogFormat.encode``): a ~250-byte partitioned path."""
    path = (
        f"s3a://data/events/country=c{i % 50:02d}/part-{i % 1000:05d}-batch-{b}-"
        f"{b:08x}-{i:04x}-4b1e-9c3a-{b * 1000003 + i:012x}.c000.snappy.parquet" + "?pad=" + "x" * 80
    )
    return json.dumps(
        {
            "path": path,
            "size": 1000 + i,
            "isDir": False,
            "modificationTime": 1700000000000 + b * 1000,
            "blockReplication": 1,
            "blockSize": 134217728,
            "action": "add",
            "batchId": b,
        },
        separators=(",", ":"),
    )


class Log:
    """Sink log ``<root>/_spark_metadata`` on the store, driven through the JVM."""

    def __init__(self, spark: SparkSession, root: str) -> None:
        self.spark = spark
        self.meta = f"{root}/_spark_metadata"
        jvm = spark._jvm
        assert jvm is not None
        self.jvm = jvm
        conf = spark._jsparkSession.sessionState().newHadoopConf()
        self.fs = jvm.org.apache.hadoop.fs.Path(self.meta).getFileSystem(conf)
        self.log = jvm.io.batchlog.log.BatchTaggedFileStreamSinkLog(
            spark._jsparkSession, self.meta, 2**63 - 1
        )

    def batch_file(self, b: int, n: int) -> None:
        data = ("v1" + "".join("\n" + line(b, i) for i in range(n))).encode()
        out = self.fs.create(self.jvm.org.apache.hadoop.fs.Path(f"{self.meta}/{b}"), False)
        out.write(bytearray(data))
        out.close()

    def compact(self, b: int) -> None:
        empty = self.spark.sparkContext._gateway.new_array(  # type: ignore[union-attr]
            self.jvm.io.batchlog.log.SinkLogEntry, 0
        )
        assert self.log.add(b, empty)

    def path(self, name: str):  # type: ignore[no-untyped-def]
        return self.jvm.org.apache.hadoop.fs.Path(f"{self.meta}/{name}")

    def bytes_of(self, name: str) -> bytes:
        f = self.fs.open(self.jvm.org.apache.hadoop.fs.Path(f"{self.meta}/{name}"))
        try:
            return bytes(self.jvm.org.apache.commons.io.IOUtils.toByteArray(f))
        finally:
            f.close()

    def spark_entries(self) -> int:
        """How many live files Spark's own log reader (``FileStreamSinkLog``) finds."""
        sinks = self.jvm.org.apache.spark.sql.execution.streaming.sinks
        none = getattr(getattr(self.jvm.scala, "None$"), "MODULE$")
        log = sinks.FileStreamSinkLog(1, self.spark._jsparkSession, self.meta, none)
        return len(log.allFiles())


def stats(spark: SparkSession) -> dict[str, int]:
    jvm = spark._jvm
    assert jvm is not None
    return json.loads(jvm.io.batchlog.log.ObjectStoreCopy.statsJson())  # type: ignore[no-any-return]


def delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before[k] for k in after}


def build(
    spark: SparkSession,
    root: str,
    server_side: bool,
    upto: int = 5,
    sizes: tuple[int, int] = (BIG, BIG),
    conf: dict[str, str] | None = None,
) -> Log:
    """Batch files 0, 1 (``sizes`` entries), 3, 4, ... and the compactions 2, 5, ... up to
    ``upto``, with session confs ``conf``."""
    confs = {COMPACT_INTERVAL_KEY: "3", SERVER_SIDE_KEY: str(server_side).lower(), **(conf or {})}
    with session_conf(spark, confs):
        log = Log(spark, root)
        for b in range(upto + 1):
            if b % 3 == 2:
                log.compact(b)
            else:
                log.batch_file(b, sizes[b] if b < 2 else 40 + b)
    return log
