"""batchlog behind a real Spark Connect server (``connect_support``): a streaming query started
from a Connect client runs in the server's JVM, whose configuration makes batchlog's commit
protocol the one every file sink uses; the sink's log is tagged with its batches. The suite's
classic session is up in the same process meanwhile."""

from __future__ import annotations

import json
from pathlib import Path

import batchlog
from conftest import (
    INPUT_SCHEMA,
    batch_rows,
    drop_inputs,
    log_file_names,
    raw_log_lines,
    row_tuples,
    tagged_files_by_batch,
)
from connect_support import connect_spark, connect_url  # noqa: F401  (the fixtures)
from pyspark.sql import SparkSession, is_remote
from pyspark.sql.connect.session import SparkSession as ConnectSession
from support import await_query


def test_streaming_query_through_connect_server_uses_batchlog(
    connect_spark: ConnectSession, spark: SparkSession, tmp_path: Path
) -> None:
    inbox, out, chk = tmp_path / "input", tmp_path / "out", tmp_path / "chk"
    inputs = {0: batch_rows(0, 2, rows=3), 1: batch_rows(1, 3, rows=4)}
    drop_inputs(inbox, inputs)

    # The commit protocol is the server's setting, not the client's.
    assert (
        connect_spark.conf.get("spark.sql.streaming.commitProtocolClass")
        == batchlog.COMMIT_PROTOCOL_CLASS
    )
    events = (
        connect_spark.readStream.schema(INPUT_SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .json(str(inbox))
    )
    query = (
        events.writeStream.format("parquet")
        .option("checkpointLocation", str(chk))
        .partitionBy("country")
        .trigger(availableNow=True)
        .start(str(out))
    )
    await_query(query, out)
    assert query.exception() is None, query.exception()
    assert [int(p["batchId"]) for p in query.recentProgress] == [0, 1]

    expected = row_tuples(r for rows in inputs.values() for r in rows)
    rows = connect_spark.read.parquet(str(out)).collect()
    assert row_tuples(r.asDict() for r in rows) == expected

    # batchlog wrote the sink: batch-tagged file names, and every log line names its batch.
    assert log_file_names(out) == ["0", "1"]
    by_batch = tagged_files_by_batch(out)
    assert {b: len(files) for b, files in by_batch.items()} == {0: 2, 1: 3}  # one per country
    for batch in (0, 1):
        lines = raw_log_lines(out / "_spark_metadata" / str(batch))
        assert lines and all(f'"batchId":{batch}' in line for line in lines), lines
        assert {json.loads(line)["path"] for line in lines} == by_batch[batch]

    # The classic session of the same process is still classic, and reads the same sink.
    assert not is_remote()
    assert row_tuples(r.asDict() for r in spark.read.parquet(str(out)).collect()) == expected
