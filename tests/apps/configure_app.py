"""A PySpark application that builds its session with ``batchlog.configure`` next to another
library's jar and extensions, set the ways users set them (``PYSPARK_SUBMIT_ARGS``,
``spark-defaults.conf``, ``spark-submit --jars/--conf``), and prints what the session ended with
as one JSON line: its jars, its extensions in order, whether each extension answers, and the
rows a batchlog sink it wrote reads back.

    configure_app.py OUTPUT_DIR
"""

from __future__ import annotations

import json
import sys

import batchlog
from pyspark.sql import SparkSession


def main(out: str) -> None:
    spark = batchlog.configure(SparkSession.builder.master("local[2]")).getOrCreate()
    conf = spark.sparkContext.getConf()
    marker = spark.sql("SELECT testkit_marker() AS m").collect()[0]["m"]
    spark.range(0, 6, numPartitions=2).selectExpr("id", "id % 2 AS k").write.mode("overwrite").json(
        out + "-in"
    )
    q = (
        spark.readStream.schema("id LONG, k LONG")
        .json(out + "-in")
        .writeStream.format("parquet")
        .option("checkpointLocation", out + "-chk")
        .trigger(availableNow=True)
        .start(out)
    )
    q.awaitTermination(300)
    latest = spark.sql(f"SELECT * FROM batchlog_latest_batch('{out}')").collect()[0][0]
    print(
        json.dumps(
            {
                "jars": conf.get("spark.jars", ""),
                "extensions": conf.get("spark.sql.extensions", ""),
                "commit_protocol": conf.get(batchlog.COMMIT_PROTOCOL_KEY, ""),
                "marker": marker,
                "latest_batch": latest,
                "rows": sorted(r["id"] for r in spark.read.parquet(out).collect()),
            }
        )
    )
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1])
