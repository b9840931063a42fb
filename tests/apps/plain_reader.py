"""Plain Spark reading sinks back, for the tests: a PySpark process without the batchlog jar that
serves reads until its standard input closes (``tests/plain_reader.py`` starts and asks it).

It first prints what proves it plain (``spark.jars``, whether a batchlog class loads, the commit
protocol); then, for each request line (JSON), one answer line. Every line it answers starts with
``PLAIN-READER `` (Spark may print other lines). Requests:

- ``{"op": "sinks", "sinks": [[format, path], ...]}``: each read with
  ``spark.read.format(fmt).load(path)``; per sink ``count``, ``rows`` (dicts), ``columns``,
  ``inputFiles``;
- ``{"op": "ids", "path": ..., "column": ...}``: a parquet sink's ``column`` and ``part``:
  ``rows``, ``ids`` (sorted), ``parts`` (rows per ``part`` value).

Answers are ``{"ok": ...}`` or ``{"error": traceback}``. Each read builds its DataFrame anew, so it
reads the files as they are at that moment: a sink's log is read again, its directory listed
again (Spark caches neither across DataFrames of a path it has no table for).
"""

import json
import sys
import traceback
from typing import Any

from pyspark.sql import SparkSession


def answer(kind: str, value: Any) -> None:
    print("PLAIN-READER " + json.dumps({kind: value}), flush=True)


def sinks(spark: SparkSession, req: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for fmt, path in req["sinks"]:
        df = spark.read.format(fmt).load(path)
        rows = [r.asDict() for r in df.collect()]
        out.append(
            {"count": len(rows), "rows": rows, "columns": df.columns, "inputFiles": df.inputFiles()}
        )
    return out


def ids(spark: SparkSession, req: dict[str, Any]) -> dict[str, Any]:
    hconf = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[union-attr]
    for k, v in req.get("hadoop", {}).items():  # an object store's settings (s3a://)
        hconf.set(k, v)
    rows = spark.read.parquet(req["path"]).select(req["column"], "part").collect()
    parts: dict[str, int] = {}
    for r in rows:
        parts[str(r[1])] = parts.get(str(r[1]), 0) + 1
    return {"rows": len(rows), "ids": sorted(r[0] for r in rows), "parts": parts}


def main() -> None:
    spark = (
        SparkSession.builder.master("local[1]")
        .appName("plain-reader")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.extraClassPath", sys.argv[1] if len(sys.argv) > 1 else "")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        spark._jvm.java.lang.Class.forName("io.batchlog.BatchLogConf")  # type: ignore[union-attr]
        has_batchlog = True
    except Exception:
        has_batchlog = False
    answer(
        "plain",
        {
            "spark.jars": spark.sparkContext.getConf().get("spark.jars", ""),
            "commitProtocolClass": spark.conf.get("spark.sql.streaming.commitProtocolClass"),
            "batchlogClassLoadable": has_batchlog,
        },
    )
    ops = {"sinks": sinks, "ids": ids}
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
            answer("ok", ops[req["op"]](spark, req))
        except Exception:
            answer("error", traceback.format_exc())
    spark.stop()


if __name__ == "__main__":
    main()
