"""The training run of the suite's class-data archive (``tests/jvm_archive.py``): one Spark JVM
that loads the classes the suite's JVMs load most, then exits, writing them to the archive
(``-XX:ArchiveClassesAtExit``, set by the caller). A session as ``batchlog.configure`` makes it, a
stateful streaming query through batchlog's committer with a compaction, JSON and parquet, the
Python facade (files, a dry-run rewind, verify) and a read by batch.

    SPARK_SUBMIT_OPTS="... -XX:ArchiveClassesAtExit=ARCHIVE" python class_archive_training.py
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

import batchlog
from pyspark.sql import SparkSession


def main() -> None:
    spark = (
        batchlog.configure(SparkSession.builder.master("local[2]"))
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.streaming.fileSink.log.compactInterval", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    work = Path(tempfile.mkdtemp(prefix="batchlog-class-archive-"))
    try:
        inbox, out, chk = work / "in", str(work / "out"), str(work / "chk")
        inbox.mkdir()
        for b in range(3):
            rows = [
                {"id": b * 10 + i, "country": ["de", "fr"][i % 2], "amount": i} for i in range(4)
            ]
            (inbox / f"{b}.json").write_text("\n".join(json.dumps(r) for r in rows))
        src = (
            spark.readStream.schema("id LONG, country STRING, amount INT")
            .option("maxFilesPerTrigger", 1)
            .json(str(inbox))
        )
        agg = src.groupBy("country").count()
        stateful = (
            agg.writeStream.format("memory")
            .queryName("counts")
            .outputMode("complete")
            .option("checkpointLocation", chk + "-state")
            .trigger(availableNow=True)
            .start()
        )
        batchlog.await_query(stateful)
        query = (
            src.writeStream.format("parquet")
            .option("checkpointLocation", chk)
            .trigger(availableNow=True)
            .start(out)
        )
        batchlog.await_query(query)
        log = batchlog.SinkLog(spark, out)
        assert log.batches() == [0, 1, 2], log.batches()
        log.files(1)
        batchlog.rewind(spark, out, chk, to_batch=1, dry_run=True)
        batchlog.verify(spark, out)
        rows = spark.read.format("batchlog").option("batches", "1-").load(out).collect()
        assert len(rows) == 8, rows
        assert spark.read.parquet(out).count() == 12
        spark.read.json(str(inbox)).write.mode("overwrite").json(str(work / "json"))
    finally:
        shutil.rmtree(work, ignore_errors=True)  # the training's sinks, not kept
    spark.stop()


if __name__ == "__main__":
    main()
    sys.exit(0)
