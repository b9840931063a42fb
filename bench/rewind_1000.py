"""Rewind figures on a sink with 1,000 batches.

A real query writes 1,000 micro-batches (one input file each) to a partitioned parquet sink through
batchlog (compactInterval 10, minBatchesToRetain 1000 so the whole history is rewindable). The sink
and checkpoint are then kept as hard links, and from that same state, ``--repeat`` times each:

- a dry run (the plan) of a rewind to ``--to-batch`` (500: inside a compacted range) and to the
  last 10 batches (the cost of a rewind must grow with the batches after the target, not with the
  sink's age);
- the rewind itself, with the time of deleting data files (parallel) reported apart.

Then the query re-runs batches 500..999 after the last rewind, and every row must be there
exactly once. Prints a table; ``--json FILE`` writes every figure for ``bench/report.py``.

Usage: python bench/rewind_1000.py [--batches 1000] [--to-batch 500] [--repeat 3] [--json FILE]
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


def spread(xs: list[float]) -> str:
    return f"{(max(xs) / min(xs) - 1) * 100:.0f}%" if len(xs) > 1 and min(xs) > 0 else "-"


def write_inbox(inbox: Path, batches: int) -> None:
    """One JSON input file a batch (8 rows: ids b*10+i, p = i % 4), oldest first by mtime."""
    inbox.mkdir(parents=True, exist_ok=True)
    for b in range(batches):
        f = inbox / f"f{b:05d}.json"
        f.write_text("\n".join(json.dumps({"id": b * 10 + i, "p": i % 4}) for i in range(8)))
        os.utime(f, (1_000_000 + b, 1_000_000 + b))


def bench_session(batches: int, **conf: str) -> SparkSession:
    """local[2] with batchlog, every batch of ``batches`` kept rewindable, and ``conf``."""
    builder = (
        batchlog.configure(SparkSession.builder)
        .master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.streaming.minBatchesToRetain", str(batches))
    )
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=1000)
    ap.add_argument("--to-batch", type=int, default=500)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="batchlog-rewind-"))
    inbox, out, chk, snap = root / "in", root / "out", root / "chk", root / "snapshot"
    write_inbox(inbox, args.batches)
    spark = bench_session(args.batches)

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
    latest = batchlog.SinkLog(spark, str(out)).latest_batch()
    if latest is None:
        raise SystemExit("the query wrote no batch: see its log above")
    print(f"sink: {latest + 1} batches written in {build_s:.0f} s; best of {args.repeat}")
    for d in (out, chk):  # log and checkpoint files are replaced, never changed in place
        shutil.copytree(d, snap / d.name, copy_function=os.link)

    def restore() -> None:
        for d in (out, chk):
            shutil.rmtree(d)
            shutil.copytree(snap / d.name, d, copy_function=os.link)

    figures = []

    def record(measure: str, unit: str, values: list[float]) -> None:
        figures.append(
            {"entries": 0, "measure": measure, "impl": "batchlog", "unit": unit, "values": values}
        )
        print(f"  {measure:<52} best {min(values):8.2f} {unit}  spread {spread(values)}")

    for to_batch in (args.to_batch, latest - 9):
        after = latest + 1 - to_batch
        dry, total, logs, deletes = [], [], [], []
        for _ in range(args.repeat):
            restore()
            t0 = time.time()
            plan = batchlog.rewind(spark, str(out), str(chk), to_batch, dry_run=True).plan
            dry.append(time.time() - t0)
            restore()
            t0 = time.time()
            result = batchlog.rewind(spark, str(out), str(chk), to_batch, quiet=True).result
            assert result is not None and result.data_files_deleted == plan.data_files
            total.append(time.time() - t0)
            deletes.append(result.data_files_ms / 1000)
            logs.append(total[-1] - deletes[-1])
        print(
            f"rewind to batch {to_batch} ({after} batches after it): {plan.data_files} data files, "
            f"sink log: delete {len(plan.sink_log.delete)}, rebuild {len(plan.sink_log.rebuild)}; "
            f"offsets {len(plan.offsets_to_delete)}, commits {len(plan.commits_to_delete)}"
        )
        tail = f"({after} batches after the target)"
        record(f"rewind dry run {tail}", "s", dry)
        record(f"rewind without data-file deletes {tail}", "s", logs)
        record(f"rewind data-file deletes {tail}", "s", deletes)
        record(f"rewind in all {tail}", "s", total)

    restore()
    batchlog.rewind(spark, str(out), str(chk), args.to_batch, quiet=True)
    replay_s = run()
    rows = spark.read.parquet(str(out)).select("id").collect()
    ids = sorted(r.id for r in rows)
    ok = ids == sorted(b * 10 + i for b in range(args.batches) for i in range(8))
    print(f"replay of batches {args.to_batch}..{args.batches - 1}: {replay_s:.1f} s")
    print(f"rows read back: {len(rows)}, each exactly once: {ok}")
    figures.append(
        {
            "entries": 0,
            "measure": "replay after rewind: rows exactly once",
            "impl": "batchlog",
            "unit": "bool",
            "values": [1.0 if ok else 0.0],
        }
    )
    if args.json:
        args.json.write_text(json.dumps({"kind": "rewind", "figures": figures}, indent=1))
    spark.stop()
    shutil.rmtree(root, ignore_errors=True)
    if not ok:
        sys.exit(1)


if __name__ == "__main__":
    main()
