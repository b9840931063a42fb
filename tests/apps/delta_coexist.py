"""A PySpark application with Delta Lake and batchlog in ONE session, run by
``tests/test_delta_coexistence.py`` in a virtualenv that has delta-spark and the pyspark it accepts
from PyPI (``dev/line 4.2_2.13 delta``), with this checkout's ``batchlog`` on ``PYTHONPATH``.

It builds its session with ``batchlog.configure`` over whatever set Delta's jars and extension
(``PYSPARK_SUBMIT_ARGS``, ``spark-submit``, the builder options it is given, Delta's own
``configure_spark_with_delta_pip``), then uses both: a Delta table written, read back, updated,
deleted from, time-travelled and vacuumed (dry run) through Delta's SQL and its Python API; a
streaming query into a parquet sink through batchlog's commit protocol, checked with batchlog's
Python API, its table functions and ``BATCHLOG`` statements; and a stream from that sink (the
``batchlog`` source) into a Delta table. It prints what it saw as one JSON line, the test checks it
exactly.

    delta_coexist.py WORKDIR BUILDER_OPTIONS_JSON [--delta-pip]
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import batchlog
from json_inbox import drop_inputs, start_partitioned_sink
from pyspark.sql import SparkSession

TIMEOUT_S = 300
BATCHES = 3


def run(query: Any) -> list[int]:
    """Waits for an ``availableNow`` query; its batch ids."""
    assert query.awaitTermination(TIMEOUT_S), "query ran over its time"
    assert query.exception() is None, query.exception()
    return [int(p["batchId"]) for p in query.recentProgress]


def one(spark: SparkSession, sql: str) -> dict[str, Any]:
    rows = spark.sql(sql).collect()
    assert len(rows) == 1, rows
    return rows[0].asDict()


def delta_part(spark: SparkSession, work: Path) -> dict[str, Any]:
    """Delta's DataFrame writer and reader, its SQL, its Python API."""
    from delta.tables import DeltaTable

    path = str(work / "people")
    people = spark.range(0, 5, 1, numPartitions=1).selectExpr("id", "concat('p', id) AS name")
    people.write.format("delta").save(path)
    spark.sql(f"CREATE TABLE people USING delta LOCATION '{path}'")
    spark.sql("UPDATE people SET name = 'changed' WHERE id = 2")
    spark.sql("DELETE FROM people WHERE id = 4")
    DeltaTable.forName(spark, "people").delete("id = 0")
    history = spark.sql("DESCRIBE HISTORY people").orderBy("version").collect()
    # Delta's VACUUM, next to BATCHLOG VACUUM: the files the three rewrites left behind
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    vacuum = spark.sql("VACUUM people RETAIN 0 HOURS DRY RUN")
    return {
        "rows": [tuple(r) for r in spark.read.format("delta").load(path).orderBy("id").collect()],
        "version0": sorted(
            r.id for r in spark.sql("SELECT id FROM people VERSION AS OF 0").collect()
        ),
        "history": [(r.version, r.operation) for r in history],
        "detail_format": one(spark, "DESCRIBE DETAIL people")["format"],
        "is_delta": DeltaTable.isDeltaTable(spark, path),
        # Delta's own writer names its files: batchlog's commit protocol is for file sinks only
        "data_files": sorted(
            "batch-tagged" if "-batch-" in f.name else "untagged"
            for f in Path(path).glob("part-*.parquet")
        ),
        "vacuum_dry_run": {"columns": vacuum.columns, "rows": vacuum.count()},
    }


def batchlog_part(spark: SparkSession, work: Path) -> dict[str, Any]:
    """A file sink written through batchlog's commit protocol, read back every way batchlog has."""
    inbox, out, chk = work / "inbox", str(work / "sink"), str(work / "sink-chk")
    drop_inputs(inbox, BATCHES, rows=2)
    batches = run(start_partitioned_sink(spark, inbox, out, chk))
    log = batchlog.SinkLog(spark, out)
    data_files = sorted(p.name for p in Path(out).rglob("part-*") if not p.name.endswith(".crc"))
    verify = json.loads(one(spark, f"BATCHLOG VERIFY '{out}'")["report"])
    inspect = json.loads(one(spark, f"BATCHLOG INSPECT '{out}' CHECKPOINT '{chk}'")["report"])
    vacuum = one(spark, f"BATCHLOG VACUUM '{out}' OLDER THAN '0s' DRY RUN")
    return {
        "query_batches": batches,
        "api_batches": log.batches(),
        "api_latest": log.latest_batch(),
        "api_files_per_batch": [len(log.files(b)) for b in log.batches()],
        "api_verify_healthy": batchlog.verify(spark, out).healthy,
        "tagged_file_batches": sorted(int(n.split("-batch-")[1].split("-")[0]) for n in data_files),
        "sql_batches": [
            r.batchId for r in spark.sql(f"SELECT batchId FROM batchlog_batches('{out}')").collect()
        ],
        "sql_latest": one(spark, f"SELECT * FROM batchlog_latest_batch('{out}')")["batchId"],
        "sql_verify": {"healthy": verify["healthy"], "liveFiles": verify["liveFiles"]},
        "sql_inspect_latest": inspect["latestBatch"],
        "sql_vacuum": {
            "operation": vacuum["operation"],
            "dry_run": vacuum["dry_run"],
            "candidateFiles": json.loads(vacuum["report"])["candidateFiles"],
        },
        "rows": sorted(r.id for r in spark.read.parquet(out).collect()),
        "batch1_rows": sorted(
            r.id for r in spark.read.format("batchlog").option("batches", "1").load(out).collect()
        ),
    }


def downstream_part(spark: SparkSession, work: Path) -> dict[str, Any]:
    """The batchlog sink streamed by batch (the ``batchlog`` source) into a Delta table."""
    out, table = str(work / "sink"), str(work / "downstream")
    query = (
        spark.readStream.format("batchlog")
        .schema("id LONG, country STRING")
        .option("maxBatchesPerTrigger", 2)
        .load(out)
        .writeStream.format("delta")
        .option("checkpointLocation", str(work / "downstream-chk"))
        .trigger(availableNow=True)
        .start(table)
    )
    batches = run(query)
    history = spark.sql(f"DESCRIBE HISTORY delta.`{table}`").orderBy("version").collect()
    return {
        "query_batches": batches,
        "rows": sorted(r.id for r in spark.read.format("delta").load(table).collect()),
        "history": [(r.version, r.operation) for r in history],
    }


#: Small-machine settings, none about jars or extensions: Delta's log replay and VACUUM's listing
#: would otherwise run 50 and 10000 tasks on the two cores.
QUIET_AND_SMALL = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.databricks.delta.snapshotPartitions": "1",
    "spark.sql.sources.parallelPartitionDiscovery.parallelism": "2",
}


def main(work: Path, options: dict[str, str], delta_pip: bool) -> None:
    builder = SparkSession.builder.appName("delta-coexist")
    for k, v in QUIET_AND_SMALL.items():
        builder = builder.config(k, v)
    for k, v in options.items():
        builder = builder.config(k, v)
    if delta_pip:
        from delta import configure_spark_with_delta_pip

        builder = configure_spark_with_delta_pip(builder)
    spark = batchlog.configure(builder).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    conf = spark.sparkContext.getConf()
    result: dict[str, Any] = {
        "spark_version": spark.version,
        "jars": conf.get("spark.jars", ""),
        "packages": conf.get("spark.jars.packages", ""),
        "extensions": conf.get("spark.sql.extensions", ""),
        "catalog": conf.get("spark.sql.catalog.spark_catalog", ""),
        "commit_protocol": conf.get(batchlog.COMMIT_PROTOCOL_KEY, ""),
    }
    seconds = {}
    for name, part in (
        ("delta", delta_part),
        ("batchlog", batchlog_part),
        ("downstream", downstream_part),
    ):
        t0 = time.monotonic()
        result[name] = part(spark, work)
        seconds[name] = round(time.monotonic() - t0, 1)
    print(f"DELTA-COEXIST-SECONDS {json.dumps(seconds)}", file=sys.stderr)
    # the driver's, plus those of a local-cluster master's executors, which ran every task above
    result["block_managers"] = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()
    spark.stop()
    print("DELTA-COEXIST " + json.dumps(result))


if __name__ == "__main__":
    main(Path(sys.argv[1]), json.loads(sys.argv[2]), "--delta-pip" in sys.argv[3:])
