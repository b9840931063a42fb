"""Rewind figures on a sink with 1,000 batches: a real query writes 1,000 micro-batches (one
input file each) to a partitioned parquet sink through batchlog (compactInterval 10,
minBatchesToRetain 1000 so the whole history is rewindable), then the sink is rewound to batch
500 (inside a compacted range) and the query re-runs batches 500..999. Prints batches, files and
times of the dry run, the rewind and the replay, and checks every row is there exactly once.

Usage: python bench/rewind_1000.py [--batches 1000] [--to-batch 500]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

import batchlog  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=1000)
    ap.add_argument("--to-batch", type=int, default=500)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="batchlog-rewind-"))
    inbox, out, chk = root / "in", root / "out", root / "chk"
    inbox.mkdir()
    for b in range(args.batches):
        f = inbox / f"f{b:05d}.json"
        f.write_text("\n".join(json.dumps({"id": b * 10 + i, "p": i % 4}) for i in range(8)))
        os.utime(f, (1_000_000 + b, 1_000_000 + b))
    spark = (
        batchlog.configure(SparkSession.builder)
        .master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.streaming.minBatchesToRetain", str(args.batches))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")

    def run() -> float:
        t0 = time.time()
        q = (
            spark.readStream.schema("id LONG, p INT")
            .option("maxFilesPerTrigger", 1)
            .json(str(inbox))
            .writeStream.format("parquet")
            .partitionBy("p")
            .option("checkpointLocation", str(chk))
            .trigger(availableNow=True)
            .start(str(out))
        )
        q.awaitTermination()
        return time.time() - t0

    build_s = run()
    log = batchlog.SinkLog(spark, str(out))
    print(f"sink: {log.latest_batch() + 1} batches written in {build_s:.0f} s")
    t0 = time.time()
    plan = batchlog.rewind(spark, str(out), str(chk), args.to_batch, dry_run=True).plan
    dry_s = time.time() - t0
    t0 = time.time()
    result = batchlog.rewind(spark, str(out), str(chk), args.to_batch, quiet=True).result
    assert result is not None
    rewind_s = time.time() - t0
    replay_s = run()
    rows = spark.read.parquet(str(out)).select("id").collect()
    ids = sorted(r.id for r in rows)
    ok = ids == sorted(b * 10 + i for b in range(args.batches) for i in range(8))
    print(f"rewind to batch {args.to_batch}: {len(plan.affected_batches)} batches affected")
    print(f"  dry run                {dry_s:6.2f} s")
    print(
        f"  rewind                 {rewind_s:6.2f} s  ({result.data_files_deleted} data files, "
        f"{plan.data_bytes / 1048576:.1f} MiB; sink log: delete {len(plan.sink_log.delete)}"
        f" files; offsets {len(plan.offsets_to_delete)}, commits {len(plan.commits_to_delete)};"
        f" source log: delete {sum(len(s.delete) for s in plan.source_logs)} files)"
    )
    print(f"  replay of batches {args.to_batch}..{args.batches - 1}  {replay_s:6.1f} s")
    print(f"  rows read back: {len(rows)}, each exactly once: {ok}")
    spark.stop()
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
