"""A spark-submit application: JSON file source -> parquet sink partitioned by ``country``.

It knows nothing of batchlog: the jar and the commit protocol come from spark-submit
(``--jars``, ``--conf spark.sql.streaming.commitProtocolClass=...``). One input file per
micro-batch (``maxFilesPerTrigger`` 1), ``availableNow``, ``compactInterval`` 2.

Usage: spark-submit ... example_stream.py INPUT_DIR OUTPUT_DIR CHECKPOINT_DIR

Prints one line ``EXAMPLE-STREAM-RESULT <json>`` (batch ids run, the commit protocol in force,
the master, the number of executors) and exits 0; exits non-zero if the query fails.
"""

from __future__ import annotations

import json
import sys

from pyspark.sql import SparkSession

#: Seconds the query may run; past it the app stops it and exits non-zero (the test fails).
TIMEOUT_S = 240


def main(input_dir: str, output_dir: str, checkpoint_dir: str) -> None:
    spark = SparkSession.builder.appName("batchlog-example-stream").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    spark.conf.set("spark.sql.streaming.fileSink.log.compactInterval", "2")

    events = (
        spark.readStream.schema("id LONG, country STRING, amount INT")
        .option("maxFilesPerTrigger", 1)
        .json(input_dir)
    )
    query = (
        events.writeStream.format("parquet")
        .partitionBy("country")
        .option("checkpointLocation", checkpoint_dir)
        .trigger(availableNow=True)
        .start(output_dir)
    )
    if not query.awaitTermination(TIMEOUT_S):
        query.stop()
        raise TimeoutError(f"the query ran over {TIMEOUT_S} s")
    if query.exception() is not None:
        raise RuntimeError(f"query failed: {query.exception()}")

    jsc = spark.sparkContext._jsc  # type: ignore[attr-defined]
    executors = len(jsc.sc().statusTracker().getExecutorInfos()) - 1  # minus the driver
    result = {
        "batches": [int(p["batchId"]) for p in query.recentProgress],
        "commitProtocolClass": spark.conf.get("spark.sql.streaming.commitProtocolClass"),
        "master": spark.sparkContext.master,
        "executors": executors,
    }
    print("EXAMPLE-STREAM-RESULT " + json.dumps(result), flush=True)
    spark.stop()


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    main(*sys.argv[1:])
