"""Reads a sink back with plain Spark (no batchlog jar) and prints one JSON line:
``{"rows": N, "ids": [...sorted...], "parts": {...}}``.

    plain_read.py OUTPUT_DIR [ID_COLUMN]
"""

import json
import sys

from pyspark.sql import SparkSession


def main() -> None:
    out = sys.argv[1]
    col = sys.argv[2] if len(sys.argv) > 2 else "id"
    spark = (
        SparkSession.builder.master("local[1]")
        .appName("plain-read")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    jars = spark.conf.get("spark.jars", "")
    assert "batchlog" not in jars, jars
    rows = spark.read.parquet(out).select(col, "part").collect()
    parts: dict[str, int] = {}
    for r in rows:
        parts[str(r[1])] = parts.get(str(r[1]), 0) + 1
    print(json.dumps({"rows": len(rows), "ids": sorted(r[0] for r in rows), "parts": parts}))
    spark.stop()


if __name__ == "__main__":
    main()
