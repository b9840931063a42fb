"""The crash tests' stream app, run by spark-submit (batchlog jar and confs on its command line).

    crash_stream_app.py INPUT_DIR OUTPUT_DIR CHECKPOINT_DIR

File source over pre-generated JSON files, one file per micro-batch; a parquet file sink
partitioned by ``part``; runs until all input present at start is processed, then exits 0.
"""

import sys

from pyspark.sql import SparkSession

#: Seconds the query may run; past it the app stops it and exits 4 (the test then fails loudly).
TIMEOUT_S = 300


def main() -> None:
    inp, out, chk = sys.argv[1:4]
    spark = SparkSession.builder.appName("batchlog-crash-app").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    q = (
        spark.readStream.schema("id LONG, part STRING, payload STRING")
        .option("maxFilesPerTrigger", 1)
        .json(inp)
        .writeStream.format("parquet")
        .partitionBy("part")
        .option("checkpointLocation", chk)
        .trigger(availableNow=True)
        .start(out)
    )
    if not q.awaitTermination(TIMEOUT_S):
        q.stop()
        print(f"TIMED-OUT the query ran over {TIMEOUT_S} s", file=sys.stderr, flush=True)
        sys.exit(4)
    print(f"DONE lastBatch={q.lastProgress['batchId'] if q.lastProgress else -1}", flush=True)


if __name__ == "__main__":
    main()
