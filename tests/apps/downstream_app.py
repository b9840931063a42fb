"""The downstream kill test's app, run by spark-submit (batchlog jar, test kit and confs on its
command line).

    downstream_app.py MODE UPSTREAM BASE NAME=START [NAME=START ...]

One downstream query per NAME: ``readStream.format("batchlog")`` over the sink UPSTREAM with
option ``startingBatch`` START and one upstream batch a trigger, into a parquet sink
``BASE/NAME/out`` (checkpoint ``BASE/NAME/chk``). MODE ``run``: every query runs on a 100 ms
trigger until the process is killed (the test halts each at its kill point with the test kit's
stall); MODE ``finish``: every query runs with ``availableNow`` to the end, then the app exits 0
(3 if a query failed, 4 if one ran over its time).
"""

import sys
import time

from pyspark.sql import SparkSession

#: Seconds the app may run; past it, it exits 4 (the test then fails loudly).
TIMEOUT_S = 300


def main() -> None:
    mode, upstream, base = sys.argv[1:4]
    starts = dict(a.split("=", 1) for a in sys.argv[4:])
    spark = SparkSession.builder.appName("batchlog-downstream-app").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    queries = {}
    for name, start in starts.items():
        w = (
            spark.readStream.format("batchlog")
            .option("startingBatch", start)
            .option("maxBatchesPerTrigger", 1)
            .load(upstream)
            .writeStream.format("parquet")
            .option("checkpointLocation", f"{base}/{name}/chk")
        )
        w = (
            w.trigger(availableNow=True)
            if mode == "finish"
            else w.trigger(processingTime="100 milliseconds")
        )
        queries[name] = w.start(f"{base}/{name}/out")
    deadline = time.monotonic() + TIMEOUT_S
    if mode == "run":
        while time.monotonic() < deadline:  # until killed
            time.sleep(0.5)
        sys.exit(4)
    for name, q in queries.items():
        if not q.awaitTermination(max(1, int(deadline - time.monotonic()))):
            print(f"TIMED-OUT {name}", file=sys.stderr, flush=True)
            sys.exit(4)
        if q.exception() is not None:
            print(f"FAILED {name}: {q.exception()}", file=sys.stderr, flush=True)
            sys.exit(3)
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
