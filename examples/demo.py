"""batchlog demo: a real streaming query writing a partitioned parquet sink through batchlog.

JSON files are dropped into an input directory; a file-source query (one file per micro-batch)
writes them to a parquet sink partitioned by ``country`` with the batch-tagged commit protocol
and ``compactInterval`` 4, for 10 batches, so the log compacts twice (batches 3 and 7). Then it
prints, per batch, the files that batch wrote, read back from the compacted log.

Usage: python examples/demo.py [WORK_DIR]
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import batchlog
from pyspark.sql import SparkSession

BATCHES = 10
COMPACT_INTERVAL = 4
COUNTRIES = ["de", "fr", "jp"]


def main(work: Path) -> None:
    shutil.rmtree(work, ignore_errors=True)
    inbox, out, checkpoint = work / "input", work / "output", work / "checkpoint"
    inbox.mkdir(parents=True)
    for b in range(BATCHES):
        rows = [{"id": b * 100 + i, "country": COUNTRIES[i % 3], "amount": i} for i in range(6)]
        (inbox / f"events-{b:03d}.json").write_text("\n".join(json.dumps(r) for r in rows))

    spark = (
        batchlog.configure(SparkSession.builder)
        .master("local[2]")
        .appName("batchlog-demo")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.conf.set("spark.sql.streaming.fileSink.log.compactInterval", str(COMPACT_INTERVAL))

    events = (
        spark.readStream.schema("id LONG, country STRING, amount INT")
        .option("maxFilesPerTrigger", 1)
        .json(str(inbox))
    )
    query = (
        events.writeStream.format("parquet")
        .partitionBy("country")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start(str(out))
    )
    query.awaitTermination()

    log = batchlog.SinkLog(spark, str(out))
    meta = sorted(p.name for p in (out / "_spark_metadata").iterdir() if not p.name.startswith("."))
    print(
        f"\nquery wrote batches 0..{log.latest_batch()}; _spark_metadata holds: {' '.join(meta)}\n"
    )
    for b in log.batches():
        print(f"batch {b}:")
        for f in log.files(b):
            print(f"    {f.split(str(out.resolve()))[-1]}")
    rows = spark.read.parquet(str(out)).count()
    print(f"\nplain spark.read.parquet reads {rows} rows (expected {BATCHES * 6})")
    spark.stop()


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "work-demo").resolve())
