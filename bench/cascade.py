"""A pipeline rewind's dry run over 3 hops of 1,000 batches each, beside a single-sink rewind's.

Real queries build the pipeline: bronze (one JSON input file a batch, parquet, partitioned),
silver (the ``batchlog`` source over bronze, one upstream batch a trigger) and gold (the same over
silver), each ``--batches`` batches, with ``minBatchesToRetain`` high enough that every batch is
rewindable. Then, ``--repeat`` times each, from the same state: a dry run of a rewind of bronze
alone to ``--to-batch``, and a dry run of the cascade (``rewind --cascade``) to the same batch,
which plans all three hops. The target: the cascade's dry run under 5 s.

Prints a table; ``--json FILE`` writes every figure for ``bench/report.py``.

Usage: python bench/cascade.py [--batches 1000] [--to-batch 500] [--repeat 3] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))

import batchlog  # noqa: E402
from pyspark.sql import DataFrame  # noqa: E402
from rewind_1000 import bench_session, spread, write_inbox  # noqa: E402

#: the cascade dry run's target, seconds (issue 41)
TARGET_S = 5.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=1000)
    ap.add_argument("--to-batch", type=int, default=500)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="batchlog-cascade-"))
    inbox = root / "in"
    write_inbox(inbox, args.batches)
    spark = bench_session(args.batches, **{"spark.sql.streaming.schemaInference": "true"})

    def run(frame: DataFrame, hop: str, partition: bool = False) -> float:
        t0 = time.time()
        w = frame.writeStream.format("parquet").option("checkpointLocation", str(root / f"{hop}-c"))
        q = (
            (w.partitionBy("p") if partition else w)
            .trigger(availableNow=True)
            .start(str(root / hop))
        )
        q.awaitTermination()
        return time.time() - t0

    def batchlog_source(upstream: str) -> DataFrame:
        return (
            spark.readStream.format("batchlog")
            .option("maxBatchesPerTrigger", 1)
            .load(str(root / upstream))
            .select("id", "p")
        )

    bronze = spark.readStream.schema("id LONG, p INT").option("maxFilesPerTrigger", 1)
    built = {
        "bronze": run(bronze.json(str(inbox)), "bronze", partition=True),
        "silver": run(batchlog_source("bronze"), "silver"),
        "gold": run(batchlog_source("silver"), "gold"),
    }
    for hop, s in built.items():
        latest = batchlog.SinkLog(spark, str(root / hop)).latest_batch()
        print(f"{hop}: {(latest or 0) + 1} batches written in {s:.0f} s")
    sink, chk, n = str(root / "bronze"), str(root / "bronze-c"), args.to_batch

    figures = []

    def record(measure: str, values: list[float]) -> None:
        figures.append(
            {"entries": 0, "measure": measure, "impl": "batchlog", "unit": "s", "values": values}
        )
        print(f"  {measure:<48} best {min(values):7.2f} s  spread {spread(values)}")

    single, cascade = [], []
    for _ in range(args.repeat):
        t0 = time.time()
        batchlog.rewind(spark, sink, chk, n, dry_run=True)
        single.append(time.time() - t0)
        t0 = time.time()
        report = batchlog.rewind(spark, sink, chk, n, dry_run=True, cascade=True)
        cascade.append(time.time() - t0)
    hops = {Path(h.checkpoint).name.removesuffix("-c"): h.to_batch for h in report.hops}
    print(f"cascade to bronze batch {n}: hops {hops}")
    assert hops == {"bronze": n, "silver": n, "gold": n}, hops
    record(f"rewind dry run, one sink ({args.batches:,} batches)", single)
    record(f"cascade dry run, 3 hops ({args.batches:,} batches each)", cascade)
    ok = min(cascade) < TARGET_S
    verdict = "MET" if ok else "NOT MET"
    print(f"cascade dry run {min(cascade):.2f} s: target < {TARGET_S:g} s {verdict}")
    if args.json:
        args.json.write_text(json.dumps({"kind": "cascade", "figures": figures}, indent=1))


if __name__ == "__main__":
    main()
