"""Per-batch commit latency of a real streaming query, with and without batchlog.

The same query (JSON file source, one input file per batch, parquet sink partitioned by a
column, compactInterval 10) runs over the same input twice per round, once with Spark's
ManifestFileCommitProtocol and once with batchlog's, alternating which goes first. For each
batch it takes the sink's ``addBatch`` duration from the query's progress (what the commit
protocol adds to), and prints mean and median per configuration and the batchlog/vanilla ratio.

``--baseline REV`` also compares batchlog with itself at commit REV of this repository (built by
``dev/old-version``): each round runs the query once with each, in a driver process of its own
(the two jars cannot share a JVM), alternating which goes first, and prints now/REV.

Usage: python bench/e2e_latency.py [--batches 60] [--rounds 3] [--json FILE] [--baseline REV]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if "--child" in sys.argv:  # the batchlog package of the version under test, before any import
    sys.path.insert(0, sys.argv[sys.argv.index("--child") + 1])
else:
    sys.path.insert(0, str(REPO / "python"))

import batchlog  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

VANILLA = "org.apache.spark.sql.execution.streaming.ManifestFileCommitProtocol"


def run(spark: SparkSession, inbox: Path, work: Path, protocol: str) -> list[float]:
    shutil.rmtree(work, ignore_errors=True)
    spark.conf.set("spark.sql.streaming.commitProtocolClass", protocol)
    df = (
        spark.readStream.schema("id LONG, country STRING")
        .option("maxFilesPerTrigger", 1)
        .json(str(inbox))
    )
    q = (
        df.writeStream.format("parquet")
        .partitionBy("country")
        .option("checkpointLocation", str(work / "ck"))
        .trigger(availableNow=True)
        .start(str(work / "out"))
    )
    q.awaitTermination()
    return [float(p["durationMs"]["addBatch"]) for p in q.recentProgress if p["numInputRows"] > 0]


def session(batches: int) -> SparkSession:
    spark = (
        batchlog.configure(SparkSession.builder)
        .master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.streaming.numRecentProgressUpdates", str(batches + 10))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.conf.set("spark.sql.streaming.fileSink.log.compactInterval", "10")
    return spark


def child(inbox: Path, work: Path, batches: int) -> None:
    """One driver: a warm-up run, then the measured one, both batchlog; prints the latencies."""
    spark = session(batches)
    run(spark, inbox, work / "warmup", batchlog.COMMIT_PROTOCOL_CLASS)
    print(json.dumps(run(spark, inbox, work / "run", batchlog.COMMIT_PROTOCOL_CLASS)))
    spark.stop()


def baseline(rev: str, inbox: Path, root: Path, args: argparse.Namespace) -> dict[str, list[float]]:
    """Per-batch latencies of batchlog now and at `rev`, each run in a driver of its own."""
    old = subprocess.run(
        [str(REPO / "dev" / "old-version"), rev], check=True, capture_output=True, text=True
    ).stdout.strip()
    packages = [("batchlog", REPO / "python"), (f"batchlog@{rev}", Path(old) / "python")]
    lat: dict[str, list[float]] = {name: [] for name, _ in packages}
    for r in range(args.rounds):
        for name, pkg in packages if r % 2 == 0 else reversed(packages):
            work = root / f"child-{r}"
            shutil.rmtree(work, ignore_errors=True)
            done = subprocess.run(
                [sys.executable, __file__, "--child", str(pkg), "--inbox", str(inbox)]
                + ["--work", str(work), "--batches", str(args.batches)],
                check=True,
                capture_output=True,
                text=True,
            )
            lat[name] += json.loads(done.stdout.strip().splitlines()[-1])
    return lat


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batches", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--baseline", help="also compare with batchlog at this commit")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--inbox", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.inbox, args.work, args.batches)
        return
    root = Path(tempfile.mkdtemp(prefix="batchlog-e2e-"))
    inbox = root / "in"
    inbox.mkdir()
    for b in range(args.batches):
        f = inbox / f"f{b:04d}.json"
        f.write_text(
            "\n".join(json.dumps({"id": b * 100 + i, "country": f"c{i % 4}"}) for i in range(100))
        )
        os.utime(f, (1_000_000 + b, 1_000_000 + b))
    spark = session(args.batches)
    run(spark, inbox, root / "warmup", VANILLA)  # JIT and caches warm for both
    lat: dict[str, list[float]] = {"vanilla": [], "batchlog": []}
    round_medians: dict[str, list[float]] = {"vanilla": [], "batchlog": []}
    for r in range(args.rounds):
        order = [("vanilla", VANILLA), ("batchlog", batchlog.COMMIT_PROTOCOL_CLASS)]
        for name, proto in order if r % 2 == 0 else reversed(order):
            xs = run(spark, inbox, root / name, proto)
            lat[name] += xs
            round_medians[name].append(statistics.median(xs))
    print(f"\nper-batch addBatch latency, {args.batches} batches x {args.rounds} rounds")
    print(f"{'':10} {'mean ms':>9} {'median ms':>10} {'batches':>8}")
    for name, xs in lat.items():
        print(f"{name:10} {statistics.mean(xs):9.1f} {statistics.median(xs):10.1f} {len(xs):8d}")
    ratio = statistics.mean(lat["batchlog"]) / statistics.mean(lat["vanilla"])
    med = statistics.median(lat["batchlog"]) / statistics.median(lat["vanilla"])
    print(f"ratio batchlog/vanilla: mean {ratio:.3f}, median {med:.3f}")
    verdict = "MET" if med <= 1.05 else "NOT MET"
    print(f"target: per-batch commit latency within 5% of vanilla (median): {verdict}")
    spark.stop()
    if args.baseline:
        own = baseline(args.baseline, inbox, root, args)
        print(f"\nbatchlog now vs at {args.baseline}, each in a driver of its own")
        print(f"{'':20} {'mean ms':>9} {'median ms':>10} {'batches':>8}")
        for name, xs in own.items():
            print(
                f"{name:20} {statistics.mean(xs):9.1f} {statistics.median(xs):10.1f} {len(xs):8d}"
            )
        now, then = own.values()
        print(
            f"ratio now/{args.baseline}: mean {statistics.mean(now) / statistics.mean(then):.3f}, "
            f"median {statistics.median(now) / statistics.median(then):.3f}"
        )
    if args.json:
        figures = [
            {
                "entries": 0,
                "measure": "commit latency (addBatch, median of a round)",
                "impl": name,
                "unit": "ms",
                "values": xs,
            }
            for name, xs in round_medians.items()
        ]
        args.json.write_text(json.dumps({"kind": "e2e", "figures": figures}, indent=1))
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
