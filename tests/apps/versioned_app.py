"""Steps on a sink by the batchlog on this process's path: an earlier version's (its package and
jar from ``dev/old-version``, on ``PYTHONPATH``) or this one's (tests/test_upgrade.py).

    python versioned_app.py STEPS_JSON

Each step is one object: ``{"run": [inbox, out, chk]}`` (the tests' stateful query, availableNow,
one input file a batch: dropDuplicates on ``id``, parquet partitioned by ``country``),
``{"read": [out, "4-6"]}`` (the ids of those batches through the ``batchlog`` data source),
``{"rewind": [out, chk, N]}``, ``{"verify": out}``. The first line printed says which batchlog
ran (its package and jar); then one JSON line per step, its result.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import batchlog
from pyspark.sql import SparkSession

COMPACT_INTERVAL_KEY = "spark.sql.streaming.fileSink.log.compactInterval"


def run(spark: SparkSession, inbox: str, out: str, chk: str) -> list[int]:
    events = (
        spark.readStream.schema("id LONG, country STRING, amount LONG")
        .option("maxFilesPerTrigger", 1)
        .json(inbox)
        .dropDuplicates(["id"])
    )
    query = (
        events.writeStream.format("parquet")
        .option("checkpointLocation", chk)
        .partitionBy("country")
        .trigger(availableNow=True)
        .start(out)
    )
    query.awaitTermination(600)
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))
    return [int(p["batchId"]) for p in query.recentProgress]


def main(steps: list[dict[str, Any]]) -> None:
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("batchlog-versioned")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config(COMPACT_INTERVAL_KEY, "3")
    )
    spark = batchlog.configure(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    print(json.dumps({"package": batchlog.__file__, "jar": batchlog.jar_path()}), flush=True)
    for step in steps:
        [(kind, arg)] = step.items()
        if kind == "run":
            result: Any = run(spark, *arg)
        elif kind == "read":
            df = spark.read.format("batchlog").option("batches", arg[1]).load(arg[0])
            result = sorted(int(r.id) for r in df.select("id").collect())
        elif kind == "rewind":
            batchlog.rewind(spark, arg[0], arg[1], to_batch=arg[2], quiet=True)
            result = arg[2]
        elif kind == "verify":
            result = bool(batchlog.verify(spark, arg).healthy)
        else:
            raise ValueError(f"unknown step {kind}")
        print(json.dumps({kind: result}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
