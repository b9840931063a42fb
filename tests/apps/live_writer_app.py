"""A long-running writer for the integrity tests, run by spark-submit (batchlog jar and confs on
its command line).

    live_writer_app.py INPUT_DIR OUTPUT_DIR CHECKPOINT_DIR CONTROL_DIR

File source (one file per micro-batch, a trigger every 200 ms) -> parquet sink partitioned by
``part``. It runs until ``CONTROL_DIR/stop`` exists (then stops the query and exits 0) or the
query fails (then prints ``QUERY-FAILED <message>`` and exits 3). With ``CONTROL_DIR/linger``, the
driver lives on after it stopped the query (a driver that goes on with other work) until
``CONTROL_DIR/exit`` exists. A test holds a batch in the
middle of its tasks by creating ``CONTROL_DIR/hold-<id>``: the row with that id then creates
``held-<id>`` and waits for ``go-<id>``.
"""

import os
import sys
import time

from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql.functions import col, udf

#: Seconds the writer may run without being told to stop; past it, it exits 4 (tests fail).
TIMEOUT_S = 900


def main() -> None:
    inp, out, chk, control = sys.argv[1:5]
    spark = SparkSession.builder.appName("batchlog-live-writer").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")

    def gate(rid: int) -> int:
        if os.path.exists(os.path.join(control, f"hold-{rid}")):
            open(os.path.join(control, f"held-{rid}"), "w").close()
            end = time.monotonic() + 300
            while not os.path.exists(os.path.join(control, f"go-{rid}")):
                if time.monotonic() > end:
                    raise TimeoutError(f"no go-{rid} within 300 s")
                time.sleep(0.05)
        return rid

    q = (
        spark.readStream.schema("id LONG, part STRING, payload STRING")
        .option("maxFilesPerTrigger", 1)
        .json(inp)
        .withColumn("id", udf(gate, "long")(col("id")))
        .writeStream.format("parquet")
        .partitionBy("part")
        .option("checkpointLocation", chk)
        .trigger(processingTime="200 milliseconds")
        .start(out)
    )
    print(f"STARTED {q.id}", flush=True)
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while q.isActive and not os.path.exists(os.path.join(control, "stop")):
            if time.monotonic() > deadline:
                q.stop()
                print(f"TIMED-OUT no stop within {TIMEOUT_S} s", flush=True)
                sys.exit(4)
            q.awaitTermination(0.1)
    except StreamingQueryException as e:
        print(f"QUERY-FAILED {e}", flush=True)
        sys.exit(3)
    q.stop()
    print("STOPPED", flush=True)
    if os.path.exists(os.path.join(control, "linger")):
        end = time.monotonic() + TIMEOUT_S
        while not os.path.exists(os.path.join(control, "exit")):
            if time.monotonic() > end:
                print(f"TIMED-OUT no exit within {TIMEOUT_S} s", flush=True)
                sys.exit(4)
            time.sleep(0.05)
    spark.stop()


if __name__ == "__main__":
    main()
