"""The ``batchlog`` source's edges (issue 23): retention dropping batches a lagging downstream has
not read, the stream's schema (Spark's inference rule, kept for the life of the checkpoint), a
sink column named ``batchId``, and the named Python error of a failed downstream query.

Real queries over real sinks; rows read back by plain Spark.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import COMPACT_INTERVAL_KEY, batch_rows, drop_inputs, run_stream
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from support import await_query, batchlog, session_conf

INFER = {"spark.sql.streaming.schemaInference": "true"}
COLUMNS = "id BIGINT,amount INT,country STRING"  # the upstream sinks' schema, as DDL


def ids(spark: SparkSession, out: Path) -> list[int]:
    return sorted(int(r[0]) for r in spark.read.parquet(str(out)).select(F.col("id")).collect())


def batch_ids(batches: range) -> list[int]:
    return sorted(b * 100 + i for b in batches for i in range(4))


def upstream(spark: SparkSession, up: Path, batches: range, **conf: str) -> None:
    """Upstream batches ``batches`` (4 rows each) into the sink ``up/out``, compact interval 3."""
    drop_inputs(up / "in", {b: batch_rows(b, 2) for b in batches})
    with session_conf(spark, {COMPACT_INTERVAL_KEY: "3", **conf}):
        run_stream(spark, up / "in", up / "out", up / "chk")


def downstream(
    spark: SparkSession,
    sink: Path,
    root: Path,
    schema: str | None = None,
    infer: bool = True,
    **options: str,
) -> Any:
    """A finished downstream query (``availableNow``): batchlog source -> parquet ``root/out``."""
    with session_conf(spark, INFER if infer else {}):
        r = spark.readStream.format("batchlog").options(**options)
        stream = (r.schema(schema) if schema else r).load(str(sink))
        q = (
            stream.writeStream.format("parquet")
            .option("checkpointLocation", str(root / "chk"))
            .trigger(availableNow=True)
            .start(str(root / "out"))
        )
    try:
        q.awaitTermination(300)
    except StreamingQueryException:
        pass  # the test reads it from q.exception()
    finally:
        if q.isActive:
            q.stop()
    return q


def test_retention_dropping_unread_batches_stops_the_downstream_naming_them(
    spark: SparkSession, tmp_path: Path
) -> None:
    up, down = tmp_path / "up", tmp_path / "down"
    keep2 = {"spark.batchlog.retention.batches": "2"}
    upstream(spark, up, range(2), **keep2)
    q = downstream(spark, up / "out", down, maxBatchesPerTrigger="1")
    assert q.exception() is None and ids(spark, down / "out") == batch_ids(range(2))

    # the upstream writes 2..5 keeping 2 batches: compaction 2 drops batch 0 (read), compaction 5
    # drops 1 (read), 2 and 3 (not read)
    upstream(spark, up, range(2, 6), **keep2)
    assert ids(spark, up / "out") == batch_ids(range(4, 6))
    q = downstream(spark, up / "out", down)
    with pytest.raises(batchlog.BatchesExpiredError) as raised:
        batchlog.await_query(q, 10)
    assert isinstance(raised.value, StreamingQueryException)
    msg = str(raised.value)
    assert "This query must read batches 2 to 3 of the sink" in msg
    assert "the sink's retention dropped them from its log" in msg
    assert "the oldest batch it still holds is 4" in msg
    assert "restart it from a new checkpoint with option startingBatch=4" in msg
    assert "rewound" not in msg
    assert ids(spark, down / "out") == batch_ids(range(2))  # nothing emitted past the drop

    # a new checkpoint below the watermark fails alike; from it, or `earliest`, reads 4 and 5
    q = downstream(spark, up / "out", tmp_path / "from2", startingBatch="2")
    assert "must read batches 2 to 3 of the sink" in str(q.exception())
    for name, opts in {"from4": {"startingBatch": "4"}, "earliest": {}}.items():
        q = downstream(spark, up / "out", tmp_path / name, **opts)
        assert q.exception() is None
        assert ids(spark, tmp_path / name / "out") == batch_ids(range(4, 6)), name


def test_a_read_batch_that_retention_dropped_later_is_no_rewind(
    spark: SparkSession, tmp_path: Path
) -> None:
    up, down = tmp_path / "up", tmp_path / "down"
    keep3 = {"spark.batchlog.retention.batches": "3"}
    upstream(spark, up, range(3), **keep3)
    q = downstream(spark, up / "out", down)  # reads 0..2, the last of them batch 2
    assert q.exception() is None
    # compaction 5 drops batches 0..2, all read: the downstream goes on with 3..5, no rewind
    upstream(spark, up, range(3, 6), **keep3)
    q = downstream(spark, up / "out", down)
    assert q.exception() is None
    assert ids(spark, down / "out") == batch_ids(range(6))


def test_stream_schema_follows_spark_inference_rule(spark: SparkSession, tmp_path: Path) -> None:
    up = tmp_path / "up"
    upstream(spark, up, range(2))
    # spark.sql.streaming.schemaInference is false: a schema must be given, as for Spark's file
    # sources; the error gives the sink's current one
    with pytest.raises(Exception) as raised:
        spark.readStream.format("batchlog").load(str(up / "out"))
    msg = str(raised.value)
    assert "Invalid spark.sql.streaming.schemaInference = false: a stream of" in msg
    assert f'.schema("{COLUMNS}")' in msg and "set spark.sql.streaming.schemaInference=true" in msg
    q = downstream(spark, up / "out", tmp_path / "given", schema=COLUMNS, infer=False)
    assert q.exception() is None and ids(spark, tmp_path / "given" / "out") == batch_ids(range(2))


def test_stream_schema_is_kept_for_the_life_of_the_checkpoint(
    spark: SparkSession, tmp_path: Path
) -> None:
    up, down = tmp_path / "up", tmp_path / "down"
    upstream(spark, up, range(2))
    q = downstream(spark, up / "out", down)  # schema inferred at its first start, and kept
    assert q.exception() is None
    kept = json.loads((down / "chk" / "sources" / "0" / "batchlog-source.json").read_text())
    assert kept["startingBatch"] == 0 and kept["format"] == "parquet"
    assert [f["name"] for f in kept["schema"]["fields"]] == ["id", "amount", "country"]

    # the upstream's batch 2 adds a column: the sink's newest schema changes
    inp = up / "in"
    (inp / "events-002.json").write_text(
        "".join(
            json.dumps({"id": 200 + i, "country": "de", "amount": 2, "note": "n"}) + "\n"
            for i in range(4)
        )
    )
    os.utime(inp / "events-002.json", (time.time(), time.time()))
    with session_conf(spark, {COMPACT_INTERVAL_KEY: "3"}):
        w = spark.readStream.schema("id LONG, country STRING, amount INT, note STRING")
        w = w.option("maxFilesPerTrigger", 1).json(str(inp)).writeStream.format("parquet")
        w = w.partitionBy("country").option("checkpointLocation", str(up / "chk"))
        await_query(w.trigger(availableNow=True).start(str(up / "out")), up / "out")
    q = downstream(spark, up / "out", down)
    msg = str(q.exception())
    assert "but this query's checkpoint" in msg and f"started reading it with {COLUMNS}" in msg
    assert f'give that .schema("{COLUMNS}") to go on with it' in msg
    assert ids(spark, down / "out") == batch_ids(range(2))
    # the way out it names: the kept schema given
    q = downstream(spark, up / "out", down, schema=COLUMNS)
    assert q.exception() is None and ids(spark, down / "out") == batch_ids(range(3))

    # a damaged record is refused, naming it and the way out
    record = down / "chk" / "sources" / "0" / "batchlog-source.json"
    record.write_text('{"version": 1, "startingBatch": ')
    msg = str(downstream(spark, up / "out", down, schema=COLUMNS).exception())
    assert f"its batchlog source record file:{record} is not JSON" in msg
    assert "restore it from a backup, or start the query from a new checkpoint" in msg


def test_a_sink_column_named_batch_id_is_kept_and_with_batch_id_refused(
    spark: SparkSession, tmp_path: Path
) -> None:
    up = tmp_path / "up"
    (up / "in").mkdir(parents=True)
    (up / "in" / "a.json").write_text(
        "".join(json.dumps({"id": i, "BatchId": 70 + i}) + "\n" for i in range(3))
    )
    q = (
        spark.readStream.schema("id LONG, BatchId LONG")
        .json(str(up / "in"))
        .writeStream.format("parquet")
        .option("checkpointLocation", str(up / "chk"))
        .trigger(availableNow=True)
        .start(str(up / "out"))
    )
    await_query(q, up / "out")
    expected = [(0, 70), (1, 71), (2, 72)]
    # without withBatchId the column is the sink's: kept, by batch reads and streams
    rows = spark.read.format("batchlog").load(str(up / "out")).collect()
    assert sorted((r["id"], r["BatchId"]) for r in rows) == expected
    q = downstream(spark, up / "out", tmp_path / "down")
    got = spark.read.parquet(str(tmp_path / "down" / "out")).collect()
    assert q.exception() is None and sorted((r["id"], r["BatchId"]) for r in got) == expected
    # with it, the column it adds would hide the sink's: refused, naming the column
    why = "have a column named 'BatchId', which the batchId column this option adds would hide"
    with pytest.raises(Exception, match=why):
        spark.read.format("batchlog").option("withBatchId", "true").load(str(up / "out"))
    with session_conf(spark, INFER), pytest.raises(Exception, match=why):
        spark.readStream.format("batchlog").option("withBatchId", "true").load(str(up / "out"))
