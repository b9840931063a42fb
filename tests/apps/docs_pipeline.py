"""The runbook's ``pipeline.py`` and ``downstream.py`` (docs/runbook/index.md), for
``tests/test_docs_blocks.py``: the query the runbook pages restart, printing how it ended.

    docs_pipeline.py INPUT OUTPUT CHECKPOINT [--trigger SECONDS] [--conf KEY=VALUE ...]

``pipeline``: a JSON file source (one input file a micro-batch) -> a parquet sink partitioned by
``country``, ``availableNow`` (or a processing-time trigger, until it fails); ``downstream``: the
``batchlog`` source over a sink (one upstream batch a micro-batch) -> another parquet sink. The
test runs them in its own session; a run that must die or keep running (a killed driver, a zombie)
runs this file in a process of its own.
"""

from __future__ import annotations

import sys

import batchlog
from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

SCHEMA = "id LONG, country STRING, amount INT"
#: The sink's columns: the data files', then the partition column.
SINK_SCHEMA = "id LONG, amount INT, country STRING"
TIMEOUT_S = 300


def _ended(spark: SparkSession, query: StreamingQuery, out: str) -> str:
    """How the query ended, as the runbook shows it: its error's type and first line, or the
    sink's latest batch."""
    try:
        finished = batchlog.await_query(query, TIMEOUT_S)
    except Exception as e:
        return f"query failed: {type(e).__name__}: {str(e).splitlines()[0]}"
    if not finished:
        query.stop()
        return f"query failed: still running after {TIMEOUT_S} s"
    return f"query stopped; sink's latest batch: {batchlog.SinkLog(spark, out).latest_batch()}"


def pipeline(spark: SparkSession, inp: str, out: str, chk: str, trigger_s: float = 0) -> str:
    writer = (
        spark.readStream.schema(SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .json(inp)
        .writeStream.format("parquet")
        .partitionBy("country")
        .option("checkpointLocation", chk)
    )
    if trigger_s:
        writer = writer.trigger(processingTime=f"{trigger_s} seconds")
    else:
        writer = writer.trigger(availableNow=True)
    return _ended(spark, writer.start(out), out)


def downstream(spark: SparkSession, upstream: str, out: str, chk: str) -> str:
    query = (
        spark.readStream.format("batchlog")
        .schema(SINK_SCHEMA)
        .option("maxBatchesPerTrigger", 1)
        .load(upstream)
        .writeStream.format("parquet")
        .partitionBy("country")
        .option("checkpointLocation", chk)
        .trigger(availableNow=True)
        .start(out)
    )
    return _ended(spark, query, out)


def main() -> None:
    args = sys.argv[1:]
    inp, out, chk = args[:3]
    trigger_s = 0.0
    builder = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
    builder = builder.config("spark.sql.shuffle.partitions", "2")
    rest = args[3:]
    while rest:
        flag, value, rest = rest[0], rest[1], rest[2:]
        if flag == "--trigger":
            trigger_s = float(value)
        else:
            assert flag == "--conf", flag
            key, _, v = value.partition("=")
            builder = builder.config(key, v)
    spark = batchlog.configure(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    print(pipeline(spark, inp, out, chk, trigger_s), flush=True)


if __name__ == "__main__":
    main()
