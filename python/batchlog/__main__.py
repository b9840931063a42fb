"""The batchlog command line: ``python -m batchlog COMMAND ...``.

Argument parsing and printing only; every command calls the JVM through the Python API.
"""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from pyspark.sql import SparkSession

import batchlog
from batchlog._cli_util import human_bytes, table


def _session() -> SparkSession:
    spark = (
        batchlog.configure(SparkSession.builder)
        .master("local[2]")
        .appName("batchlog-cli")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def cmd_inspect(spark: SparkSession, args: argparse.Namespace) -> int:
    info = batchlog.SinkLog(spark, args.path).inspect()
    latest = info["latestBatch"]
    print(f"sink            {info['outputPath']}")
    print(f"latest batch    {latest if latest >= 0 else '(none)'}")
    print(
        f"compaction      every {info['compactInterval']} batches; latest "
        f"{info.get('latestCompact') or '(none yet)'}; next at batch {info['nextCompactionBatch']}"
    )
    print(f"log files       {info['logFiles']} ({human_bytes(info['logBytes'])})")
    batches = info["batches"]
    files = sum(b["files"] for b in batches) + info["untaggedFiles"]
    size = sum(b["bytes"] for b in batches) + info["untaggedBytes"]
    print(f"live files      {files} ({human_bytes(size)}) in {len(batches)} batches")
    if info["untaggedFiles"]:
        print(
            f"untagged        {info['untaggedFiles']} files "
            f"({human_bytes(info['untaggedBytes'])}) have no provable batch"
        )
    print()
    rows = [[b["batchId"], b["files"], b["bytes"], human_bytes(b["bytes"])] for b in batches]
    print(table(["batch", "files", "bytes", "size"], rows) if rows else "(no live files)")
    return 0


def cmd_files(spark: SparkSession, args: argparse.Namespace) -> int:
    for path in batchlog.SinkLog(spark, args.path).files(args.batch):
        print(path)
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m batchlog", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("inspect", help="batches, entry counts, sizes and compaction state")
    s.add_argument("path", help="the sink's output directory (holds _spark_metadata)")
    s.set_defaults(fn=cmd_inspect)
    s = sub.add_parser("files", help="the live files one batch wrote")
    s.add_argument("path", help="the sink's output directory")
    s.add_argument("--batch", type=int, required=True, help="micro-batch id")
    s.set_defaults(fn=cmd_files)
    return p


def main(argv: Optional[List[str]] = None) -> int:
    args = parser().parse_args(argv)
    spark = _session()
    try:
        return int(args.fn(spark, args))
    except batchlog.BatchLogError as e:
        print(f"batchlog: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
