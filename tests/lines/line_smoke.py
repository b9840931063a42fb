"""End-to-end check of one Spark line, run by ``dev/line <line> smoke`` in a fresh virtualenv that
holds only pyspark and the batchlog wheel (run from outside the checkout, so ``import batchlog`` is
the installed wheel and ``batchlog.configure`` picks its jar for the installed pyspark).

A real streaming query (file source, one input file per micro-batch, partitioned parquet sink)
through the plugin with ``compactInterval`` 3: seven batches, compactions at batches 2 and 5,
``SinkLog.files(b)`` for every batch, then a rewind to batch 4 with the checkpoint, a restart of
the same query (batches 4..6 run again from the same input), and the output read back by plain
Spark in a second process that has no batchlog jar. Every check compares exact rows or names.

    python line_smoke.py WORKDIR        prints "LINE-SMOKE OK <details>" and exits 0, else fails
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BATCHES = 7
REWIND_TO = 4
COMPACT_INTERVAL = 3


def rows_of(batch: int) -> list[dict[str, Any]]:
    """Input rows of one micro-batch: ids unique across batches, two countries."""
    return [{"id": batch * 100 + i, "country": "NL" if i % 2 else "FR", "batch": batch} for i in range(3)]


def drop_inputs(inbox: Path) -> None:
    """One JSON-lines file per batch, modification times in batch order (the source's order)."""
    inbox.mkdir(parents=True)
    base = int(time.time()) - 3600
    for b in range(BATCHES):
        f = inbox / f"events-{b:03d}.json"
        f.write_text("".join(json.dumps(r) + "\n" for r in rows_of(b)))
        os.utime(f, (base + b, base + b))


def run_query(spark: Any, inbox: Path, out: Path, chk: Path) -> list[int]:
    """Runs the query until the input is consumed (availableNow); returns the batch ids it ran."""
    events = (
        spark.readStream.schema("id LONG, country STRING, batch LONG")
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
    query.awaitTermination(600)
    if query.isActive:
        query.stop()
        raise AssertionError("the query did not finish in 600 s")
    if query.exception() is not None:
        raise AssertionError(f"the query failed: {query.exception()}")
    return [int(p["batchId"]) for p in query.recentProgress]


PLAIN_READER = """
import json, sys
from pyspark.sql import SparkSession
spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
jars = spark.conf.get("spark.jars", "")
try:
    spark._jvm.java.lang.Class.forName("io.batchlog.BatchTaggedCommitProtocol")
    loadable = True
except Exception:
    loadable = False
df = spark.read.parquet(sys.argv[1])
rows = sorted((r["id"], r["country"], r["batch"]) for r in df.collect())
print("PLAIN " + json.dumps({"jars": jars, "loadable": loadable, "rows": rows}))
"""


def read_plain(out: Path) -> list[tuple[int, str, int]]:
    """The sink's rows as plain Spark reads them, in a process without the batchlog jar."""
    env = {k: v for k, v in os.environ.items() if k not in ("BATCHLOG_JAR", "PYSPARK_SUBMIT_ARGS")}
    proc = subprocess.run(
        [sys.executable, "-c", PLAIN_READER, str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    [line] = [ln for ln in proc.stdout.splitlines() if ln.startswith("PLAIN ")]
    result = json.loads(line[len("PLAIN ") :])
    assert result["jars"] == "" and result["loadable"] is False, result
    return [tuple(r) for r in result["rows"]]


def expected(batches: range) -> list[tuple[int, str, int]]:
    return sorted((r["id"], r["country"], r["batch"]) for b in batches for r in rows_of(b))


def log_names(out: Path) -> list[str]:
    meta = out / "_spark_metadata"
    return sorted((p.name for p in meta.iterdir() if not p.name.startswith(".")), key=_log_order)


def _log_order(name: str) -> tuple[int, str]:
    return int(name.split(".")[0]), name


def main(workdir: Path) -> None:
    import batchlog
    import pyspark
    from pyspark.sql import SparkSession

    jar = batchlog.jar_path()
    assert "site-packages" in jar, f"batchlog must come from the installed wheel, not {jar}"
    inbox, out, chk = workdir / "in", workdir / "out", workdir / "chk"
    drop_inputs(inbox)
    builder = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.streaming.fileSink.log.compactInterval", str(COMPACT_INTERVAL))
    )
    spark = batchlog.configure(builder).getOrCreate()
    try:
        assert run_query(spark, inbox, out, chk) == list(range(BATCHES))
        names = log_names(out)
        assert names == ["0", "1", "2.compact", "3", "4", "5.compact", "6"], names
        log = batchlog.SinkLog(spark, str(out))
        assert log.latest_batch() == BATCHES - 1
        for b in range(BATCHES):
            files = log.files(b)
            assert len(files) == 2 and all(f"-batch-{b}-" in f for f in files), (b, files)
            assert all(log.batch_of(f) == b for f in files)
        rows_5 = spark.read.parquet(*log.files(5)).collect()
        assert sorted(r["id"] for r in rows_5) == [500, 501, 502]

        report = batchlog.rewind(spark, str(out), str(chk), REWIND_TO, quiet=True)
        assert report.result is not None and report.result.data_files_deleted == 6, report
        assert log.latest_batch() == REWIND_TO - 1
        assert read_plain(out) == expected(range(REWIND_TO))

        assert run_query(spark, inbox, out, chk) == list(range(REWIND_TO, BATCHES))
        assert log.latest_batch() == BATCHES - 1
        assert read_plain(out) == expected(range(BATCHES))
    finally:
        spark.stop()
    print(
        f"LINE-SMOKE OK pyspark {pyspark.__version__}, jar {Path(jar).name}: "
        f"{BATCHES} batches, log {names}, rewind to {REWIND_TO} and rerun, plain read exact"
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
