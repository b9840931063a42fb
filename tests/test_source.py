"""The ``batchlog`` data source: batch reads by batch, the log as a table, and streaming reads of
an upstream sink by a downstream query (restart exactly once, an upstream rewind detected).

Every sink here is written by a real streaming query with batchlog's commit protocol; rows are
read back and compared exactly, with plain Spark's read of the same sink where it has one.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from conftest import COMPACT_INTERVAL_KEY, batch_rows, drop_inputs, run_stream
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from support import await_query, batchlog, session_conf, wait_until

N = 6  # upstream batches of the shared sinks (compact interval 3: compacts 2 and 5)
#: Streams infer their schema only where Spark's file sources do (a test below checks the rule).
INFER = {"spark.sql.streaming.schemaInference": "true"}


def ids(df: DataFrame, col: str = "id") -> list[int]:
    return sorted(int(r[0]) for r in df.select(F.col(col).cast("long")).collect())


def files_read(df: DataFrame) -> int:
    """The number of files the scan of ``df`` reads: the files of its planned input partitions
    (a V2 file scan), or its ``numFiles`` metric when it ran (a V1 file scan)."""
    plan = df._jdf.queryExecution().executedPlan()
    leaf = plan.collectLeaves().head()
    if leaf.metrics().contains("numFiles"):
        plan.executeCollect()
        return int(leaf.metrics().apply("numFiles").value())
    parts = leaf.inputPartitions()
    return sum(len(parts.apply(i).files()) for i in range(parts.size()))


def batch_ids(batches: range | list[int], rows: int = 4) -> list[int]:
    return sorted(b * 100 + i for b in batches for i in range(rows))


def write_sink(spark: SparkSession, root: Path, fmt: str, batches: int = N) -> Path:
    """A sink of ``fmt`` partitioned by country, one input file (4 rows) a batch."""
    drop_inputs(root / "in", {b: batch_rows(b, 3) for b in range(batches)})
    with session_conf(spark, {COMPACT_INTERVAL_KEY: "3"}):
        events = spark.readStream.schema("id LONG, country STRING, amount INT")
        src = events.option("maxFilesPerTrigger", 1).json(str(root / "in"))
        if fmt == "text":
            src = src.select(F.to_json(F.struct("id", "amount")).alias("value"), "country")
        w = src.writeStream.format(fmt).partitionBy("country")
        q = w.option("checkpointLocation", str(root / "chk")).trigger(availableNow=True)
        query = q.start(str(root / "out"))
        await_query(query, root / "out")
    return root / "out"


def id_column(fmt: str) -> Any:
    if fmt == "csv":
        return F.col("_c0")
    if fmt == "text":
        return F.get_json_object("value", "$.id")
    return F.col("id")


@pytest.fixture(scope="module")
def parquet_sink(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_sink(spark, tmp_path_factory.mktemp("parquet"), "parquet")


# ---- batch reads -------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["parquet", "json", "orc", "csv", "text"])
def test_each_format_reads_exactly_the_rows_of_chosen_batches(
    spark: SparkSession, tmp_path: Path, fmt: str
) -> None:
    out = str(write_sink(spark, tmp_path, fmt))
    plain = spark.read.format(fmt).load(out)
    every = spark.read.format("batchlog").load(out)
    # all batches: the same columns and rows as plain Spark's read of the sink
    assert every.schema == plain.schema
    assert sorted(map(tuple, every.collect())) == sorted(map(tuple, plain.collect()))
    some = spark.read.format("batchlog").option("batches", "2-4").load(out)
    assert ids(some.select(id_column(fmt).alias("id"))) == batch_ids(range(2, 5))
    as_of = spark.read.format("batchlog").option("asOfBatch", 1).load(out)
    assert ids(as_of.select(id_column(fmt).alias("id"))) == batch_ids(range(2))


def test_partition_and_batch_filters_prune_files(spark: SparkSession, parquet_sink: Path) -> None:
    out = str(parquet_sink)
    df = spark.read.format("batchlog").option("withBatchId", "true").load(out)
    assert df.columns == ["id", "amount", "country", "batchId"]
    got = df.where("batchId = 3 and country = 'fr'")
    assert [(r.id, r.batchId, r.country) for r in got.collect()] == [(301, 3, "fr")]
    # both filters are partition filters: of the 18 files, only batch 3's under country=fr is
    # read (the scan's own metric)
    assert files_read(got) == 1 and files_read(df) == 3 * N
    plan = got._jdf.queryExecution().executedPlan().toString()
    assert "PartitionFilters" in plan and "batchId" in plan
    # every row carries the batch that wrote it
    rows = df.select("id", "batchId").collect()
    assert sorted((r.id, r.batchId) for r in rows) == [(i, i // 100) for i in batch_ids(range(N))]
    # column pruning and a data filter pushed to parquet, as on the plain path
    pushed = df.where("amount > 3").select("id")
    assert "PushedFilters: [IsNotNull(amount), GreaterThan(amount,3)]" in (
        pushed._jdf.queryExecution().executedPlan().toString()
    )
    assert ids(pushed) == batch_ids(range(4, N))


def test_sql_view_as_of_a_batch_and_the_log_as_a_table(
    spark: SparkSession, parquet_sink: Path
) -> None:
    out = str(parquet_sink)
    spark.sql(
        "CREATE OR REPLACE TEMPORARY VIEW as_of_2 USING batchlog "
        f"OPTIONS (path '{out}', asOfBatch '2')"
    )
    assert ids(spark.table("as_of_2")) == batch_ids(range(3))
    log = spark.read.format("batchlog").option("log", "true").load(out)
    entries = {r.path: r.batchId for r in log.collect()}
    assert len(entries) == 3 * N
    assert all(f"-batch-{b}-" in p for p, b in entries.items())
    # which batch wrote this file: SQL over the log
    one = next(p for p, b in entries.items() if b == 4)
    spark.read.format("batchlog").option("log", "true").load(out).createOrReplaceTempView("lg")
    assert spark.sql(f"SELECT batchId FROM lg WHERE path = '{one}'").collect()[0][0] == 4
    assert sorted(
        r.batchId
        for r in spark.read.format("batchlog")
        .option("log", "true")
        .option("batches", "1-2")
        .load(out)
        .collect()
    ) == [1, 1, 1, 2, 2, 2]


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ({"batches": "5-2"}, "its first batch 5 is after its last 2"),
        ({"batches": "x"}, "write a batch range as 41-45"),
        ({"batches": "1", "asOfBatch": "2"}, "give either batches or asOfBatch"),
        ({"withBatchId": "yes"}, "Invalid withBatchId = yes: it must be true or false"),
        ({"format": "avro"}, "parquet, orc, json, csv, text"),
    ],
)
def test_bad_options_are_refused_naming_the_option(
    spark: SparkSession, parquet_sink: Path, options: dict[str, str], fragment: str
) -> None:
    with pytest.raises(Exception, match=re.escape(fragment)):
        spark.read.format("batchlog").options(**options).load(str(parquet_sink)).collect()


def test_a_path_that_is_no_sink_is_refused(spark: SparkSession, tmp_path: Path) -> None:
    with pytest.raises(Exception, match="has no _spark_metadata directory"):
        spark.read.format("batchlog").load(str(tmp_path))


# ---- streaming reads ---------------------------------------------------------------------------


def downstream(
    spark: SparkSession, upstream: Path, root: Path, **options: str
) -> tuple[list[dict[str, Any]], Any]:
    """A downstream query: batchlog source over ``upstream`` -> parquet sink ``root/out``, its
    schema inferred (and kept in its checkpoint at its first start)."""
    with session_conf(spark, INFER):
        stream = spark.readStream.format("batchlog").options(**options).load(str(upstream))
        q = (
            stream.writeStream.format("parquet")
            .option("checkpointLocation", str(root / "chk"))
            .trigger(availableNow=True)
            .start(str(root / "out"))
        )
    try:
        q.awaitTermination(300)
    except Exception:
        pass  # the test reads it from q.exception()
    finally:
        if q.isActive:
            q.stop()
    return [p for p in q.recentProgress if p["numInputRows"] > 0], q


def add_upstream_batches(spark: SparkSession, up_root: Path, batches: range) -> None:
    drop_inputs(up_root / "in", {b: batch_rows(b, 3) for b in batches})
    with session_conf(spark, {COMPACT_INTERVAL_KEY: "3"}):
        run_stream(spark, up_root / "in", up_root / "out", up_root / "chk")


def test_stream_reads_each_batch_once_in_order_and_restarts_exactly_once(
    spark: SparkSession, tmp_path: Path
) -> None:
    up = tmp_path / "up"
    add_upstream_batches(spark, up, range(4))
    down = tmp_path / "down"
    progress, q = downstream(spark, up / "out", down, maxBatchesPerTrigger="1", withBatchId="true")
    assert q.exception() is None
    # one upstream batch per trigger, in order: 4 rows each
    assert [p["numInputRows"] for p in progress] == [4, 4, 4, 4]
    got = spark.read.parquet(str(down / "out"))
    assert sorted((r.id, r.batchId) for r in got.collect()) == [
        (i, i // 100) for i in batch_ids(range(4))
    ]
    # more upstream batches (across a compaction), then the downstream restarts from its
    # checkpoint: only the new ones, each once
    add_upstream_batches(spark, up, range(4, 9))
    progress, q = downstream(spark, up / "out", down, maxFilesPerTrigger="7")
    assert q.exception() is None
    # whole batches up to 7 files: 3 files a batch -> 2 batches a trigger (4, 5, 6, 7, 8)
    assert [p["numInputRows"] for p in progress] == [8, 8, 4]
    assert ids(spark.read.parquet(str(down / "out"))) == batch_ids(range(9))
    # nothing new: a restart emits nothing
    progress, q = downstream(spark, up / "out", down)
    assert progress == [] and q.exception() is None
    assert ids(spark.read.parquet(str(down / "out"))) == batch_ids(range(9))


def test_stream_starting_batch(spark: SparkSession, parquet_sink: Path, tmp_path: Path) -> None:
    progress, q = downstream(spark, parquet_sink, tmp_path / "a", startingBatch="4")
    assert q.exception() is None
    assert ids(spark.read.parquet(str(tmp_path / "a" / "out"))) == batch_ids(range(4, N))
    progress, q = downstream(spark, parquet_sink, tmp_path / "b", startingBatch="latest")
    assert q.exception() is None and progress == []


def test_upstream_rewind_stops_the_downstream_until_it_is_rewound_too(
    spark: SparkSession, tmp_path: Path
) -> None:
    up = tmp_path / "up"
    add_upstream_batches(spark, up, range(5))
    down = tmp_path / "down"
    _, q = downstream(spark, up / "out", down, maxBatchesPerTrigger="1")
    assert q.exception() is None  # downstream batch k read upstream batch k, k = 0..4

    # the upstream is rewound to batch 3: batches 3 and 4 are gone
    batchlog.rewind(spark, str(up / "out"), str(up / "chk"), to_batch=3, quiet=True)
    _, q = downstream(spark, up / "out", down)
    err = str(q.exception())
    assert "UPSTREAM_REWOUND" in err or "up to its batch 4, but that batch is gone" in err
    assert "its latest batch is now 2" in err and "startingBatch" in err
    # it names its own sink and first batch that read a rewound one: downstream batch 3
    assert f"{down / 'out'} --checkpoint file:{down / 'chk'} --to-batch 3 --cascade" in err
    # in Python the failure is both the named error and pyspark's StreamingQueryException
    with pytest.raises(batchlog.UpstreamRewoundError) as raised:
        batchlog.await_query(q, 10)
    assert isinstance(raised.value, StreamingQueryException)
    assert "up to its batch 4, but that batch is gone" in str(raised.value)
    failure = batchlog.query_exception(q)
    assert isinstance(failure, batchlog.UpstreamRewoundError)
    assert isinstance(failure, StreamingQueryException)

    # the upstream query runs again: batches 3 and 4 are written anew (new files)
    (up / "in" / "events-003.json").write_text(
        "".join(f'{{"id": {330 + i}, "country": "de", "amount": 3}}\n' for i in range(2))
    )
    with session_conf(spark, {COMPACT_INTERVAL_KEY: "3"}):
        run_stream(spark, up / "in", up / "out", up / "chk")
    _, q = downstream(spark, up / "out", down)
    assert "up to its batch 4, but that batch was rewritten" in str(q.exception())
    # nothing was emitted from the rewritten batches
    assert ids(spark.read.parquet(str(down / "out"))) == batch_ids(range(5))

    # the way out: rewind the downstream to its batch that first read a rewound batch (3)
    batchlog.rewind(spark, str(down / "out"), str(down / "chk"), to_batch=3, quiet=True)
    _, q = downstream(spark, up / "out", down)
    assert q.exception() is None
    expected = ids(spark.read.parquet(str(up / "out")))
    assert ids(spark.read.parquet(str(down / "out"))) == expected
    assert 330 in expected and 300 not in expected


def test_stream_refuses_batch_options(spark: SparkSession, parquet_sink: Path) -> None:
    with pytest.raises(Exception, match="it is an option of batch reads"):
        spark.readStream.format("batchlog").option("batches", "1-2").load(str(parquet_sink))


def test_a_running_downstream_stops_when_its_upstream_is_rewound(
    spark: SparkSession, tmp_path: Path
) -> None:
    up, down = tmp_path / "up", tmp_path / "down"
    add_upstream_batches(spark, up, range(5))

    def start(trigger: dict[str, Any]) -> Any:
        with session_conf(spark, INFER):
            return (
                spark.readStream.format("batchlog")
                .load(str(up / "out"))
                .writeStream.format("parquet")
                .option("checkpointLocation", str(down / "chk"))
                .trigger(**trigger)
                .start(str(down / "out"))
            )

    q = start({"processingTime": "200 milliseconds"})
    try:
        wait_until(
            lambda: batchlog.SinkLog(spark, str(down / "out")).latest_batch() is not None
            and ids(spark.read.parquet(str(down / "out"))) == batch_ids(range(5)),
            120,
            "the downstream to read upstream batches 0..4",
        )
        # while it runs: the upstream is rewound to 3 and its query writes 3 and 4 again
        batchlog.rewind(spark, str(up / "out"), str(up / "chk"), to_batch=3, quiet=True)
        with session_conf(spark, {COMPACT_INTERVAL_KEY: "3"}):
            run_stream(spark, up / "in", up / "out", up / "chk")
        wait_until(lambda: not q.isActive, 120, "the downstream to stop")
        stopped = str(q.exception())
    finally:
        if q.isActive:
            q.stop()
    # It stops either while the rewind runs (it sees the rewind's intent: REWIND_IN_PROGRESS) or
    # after (UPSTREAM_REWOUND). Restarted once the rewind is done, it is told the latter.
    if "is being rewound to batch 3" in stopped:
        assert "then restart this query, which reads it" in stopped, stopped
        with pytest.raises(StreamingQueryException) as again:
            start({"availableNow": True}).awaitTermination(120)
        stopped = str(again.value)
    # Its offset is upstream batch 4, or 5 when it planned the rewind's claim of log id 5 (an
    # empty batch the rewind logs first, so that a writer past its checks loses; then cut).
    assert re.search(r"up to its batch [45], but that batch", stopped), stopped
    # it emitted nothing from the rewound batches
    assert ids(spark.read.parquet(str(down / "out"))) == batch_ids(range(5))


def test_reads_are_datasource_v2_with_v1_where_spark_plans_v1(
    spark: SparkSession, parquet_sink: Path
) -> None:
    """format("batchlog") is a DataSource V2 table scanned by Spark's V2 file scan; with batchlog
    in spark.sql.sources.useV1SourceList (as Spark's own file formats are by default) the same
    read is planned by Spark's V1 file scan: same rows, same pruning."""
    out = str(parquet_sink)

    def read() -> DataFrame:
        return (
            spark.read.format("batchlog")
            .option("withBatchId", "true")
            .load(out)
            .where("batchId = 3 and country = 'fr'")
        )

    v2 = read()
    plan = v2._jdf.queryExecution().executedPlan().toString()
    assert f"BatchScan batchlog.`{out}`" in plan and "ParquetScan" in plan
    assert files_read(v2) == 1
    assert [(r.id, r.batchId) for r in v2.collect()] == [(301, 3)]
    v1_list = spark.conf.get("spark.sql.sources.useV1SourceList") + ",batchlog"
    with session_conf(spark, {"spark.sql.sources.useV1SourceList": v1_list}):
        v1 = read()
        plan = v1._jdf.queryExecution().executedPlan().toString()
        assert "FileScan parquet" in plan and "BatchScan" not in plan
        assert files_read(v1) == 1
        assert [(r.id, r.batchId) for r in v1.collect()] == [(301, 3)]


def test_json_schema_is_inferred_from_every_chosen_file(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Json files leave out null fields: a column null in every row of the newest batch is still
    in the schema of a read of all batches (every chosen file is read, as spark.read.json does),
    and absent from a read of that batch alone."""
    rows = {b: batch_rows(b, 3) for b in range(3)}
    for r in rows[2]:
        r["amount"] = None
    drop_inputs(tmp_path / "in", rows)
    with session_conf(spark, {COMPACT_INTERVAL_KEY: "3"}):
        run_stream(spark, tmp_path / "in", tmp_path / "out", tmp_path / "chk", fmt="json")
    out = str(tmp_path / "out")
    every = spark.read.format("batchlog").load(out)
    assert sorted(every.columns) == ["amount", "country", "id"]
    assert sorted((r.id, r.amount) for r in every.collect()) == sorted(
        (r["id"], r["amount"]) for b in range(3) for r in rows[b]
    )
    newest = spark.read.format("batchlog").option("batches", "2").load(out)
    assert sorted(newest.columns) == ["country", "id"]
    assert sorted(r.id for r in newest.collect()) == batch_ids([2])
