"""A second writer with a head start elsewhere (issue 22, part 4): query B writes the sink first;
query A, with its own checkpoint, starts with batch ids all at or below B's latest. Spark's file
sink would skip every one of A's batches without calling batchlog (A would end without an error,
none of its rows in the sink); batchlog stops A as it starts, before its first batch.

Real queries on real files; the sink is read back by plain Spark in a process without batchlog.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from reliability_support import (
    SINK_CONFS,
    batchlog,
    plain_read,
    snapshot,
    spark_session,
    sql_conf,
    write_input,
)
from support import QUERY_TIMEOUT_S, await_query, cli_here, run_cli, wait_lease_released

spark = spark_session  # the module's session fixture

ROWS = 4  # rows per input file, ids k*1000+i: input file k is one batch
RECORD = "_batchlog-sink.json"
SPARK_COMMITTER = "org.apache.spark.sql.execution.streaming.ManifestFileCommitProtocol"


def ids_of(files: range) -> list[int]:
    return sorted(k * 1000 + i for k in files for i in range(ROWS))


def start(spark: SparkSession, inp: Path, out: Path, chk: Path):  # type: ignore[no-untyped-def]
    """The file source -> parquet sink query (one input file per batch), started."""
    return (
        spark.readStream.schema("id LONG, part STRING, payload STRING")
        .option("maxFilesPerTrigger", 1)
        .json(str(inp))
        .writeStream.format("parquet")
        .partitionBy("part")
        .option("checkpointLocation", str(chk))
        .trigger(availableNow=True)
        .start(str(out))
    )


def run(spark: SparkSession, inp: Path, out: Path, chk: Path, confs: dict[str, str]) -> None:
    with sql_conf(spark, **confs):
        await_query(start(spark, inp, out, chk), out)


def query_id(chk: Path) -> str:
    qid: str = json.loads((chk / "metadata").read_text())["id"]
    return qid


def log_names(d: Path) -> list[str]:
    return sorted(n for n in os.listdir(d) if n.isdigit()) if d.exists() else []


def refused_start(spark: SparkSession, inp: Path, out: Path, chk: Path) -> Exception:
    """Starts A and awaits it through ``batchlog.await_query``: the error it raises, both a
    ``SinkOwnedByOtherQueryError`` and pyspark's ``StreamingQueryException``."""
    with sql_conf(spark, **SINK_CONFS):
        q = start(spark, inp, out, chk)
        try:
            with pytest.raises(batchlog.SinkOwnedByOtherQueryError) as e:
                batchlog.await_query(q, QUERY_TIMEOUT_S)
        finally:
            if q.isActive:
                q.stop()
    # still pyspark's own error too: code that catches that goes on catching it
    assert isinstance(e.value, StreamingQueryException)
    assert q.exception() is not None and not q.isActive
    return e.value


def expected_message(a: str, out: Path, written_by: str, name: str, latest: int) -> str:
    """A's error: the sink is ``written_by`` its writer, called ``name`` in the way out."""
    sink = f"file:{out}"
    return (
        f"Query {a} cannot write to {sink}: {written_by}; each sink has one writer). "
        "It was stopped as it started, before its batch 0: Spark's file sink skips every "
        f"batch id already in the sink's log (its latest batch is {latest}), so this query's "
        f"batches 0 to {latest} would have been dropped without an error. Give this query its "
        f"own output path; or, if it is meant to replace {name}, stop that one and run "
        f"`python -m batchlog takeover {sink} --checkpoint <this query's checkpoint> "
        "--dry-run`, then without --dry-run. No batch ran: the sink and the checkpoint's "
        "offsets and commits are unchanged."
    )


def owned_by(b: str) -> str:
    return f"the sink is written by another query, query {b} (its batches from 0 on"


def test_a_head_start_second_writer_is_stopped_before_it_skips_a_batch(
    spark: SparkSession, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    in_b, chk_b, in_a, chk_a = (tmp_path / n for n in ("in-b", "chk-b", "in-a", "chk-a"))
    write_input(in_b, 0, 3, ROWS)
    run(spark, in_b, out, chk_b, SINK_CONFS)  # B: batches 0, 1, 2
    b = query_id(chk_b)
    before = snapshot(out)

    write_input(in_a, 10, 2, ROWS)  # A: batches 0 and 1, both at or below B's latest
    err = refused_start(spark, in_a, out, chk_a)
    a = query_id(chk_a)
    assert expected_message(a, out, owned_by(b), f"query {b}", 2) in str(err)

    # nothing changed in the sink; plain Spark reads exactly B's rows
    wait_lease_released(out)
    assert snapshot(out) == before
    assert plain_read(out)["ids"] == ids_of(range(3))
    assert sorted(r[0] for r in spark.read.parquet(str(out)).select("id").collect()) == ids_of(
        range(3)
    )
    record = json.loads((out / "_batchlog" / RECORD).read_text())
    assert [(o["queryId"], o["fromBatch"]) for o in record["owners"]] == [(b, 0)]
    # A ran no batch: no offsets, no commits in its checkpoint
    assert log_names(chk_a / "offsets") == [] and log_names(chk_a / "commits") == []

    # a restart of A is stopped the same way; B itself restarts and writes on
    err = refused_start(spark, in_a, out, chk_a)
    assert expected_message(a, out, owned_by(b), f"query {b}", 2) in str(err)
    write_input(in_b, 3, 1, ROWS)
    run(spark, in_b, out, chk_b, SINK_CONFS)
    assert plain_read(out)["ids"] == ids_of(range(4))
    assert log_names(chk_a / "offsets") == [] and log_names(chk_a / "commits") == []


def test_the_way_out_a_refusal_names_works_takeover_with_the_refused_checkpoint(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A is refused before its first batch: its checkpoint has Spark's ``metadata`` (its id) and,
    on 4.1+, no ``offsets/`` yet. The takeover the error names accepts that checkpoint; A then
    writes from the batch after B's latest, and plain Spark reads B's rows and A's batch 3."""
    out = tmp_path / "out"
    in_b, chk_b, in_a, chk_a = (tmp_path / n for n in ("in-b", "chk-b", "in-a", "chk-a"))
    write_input(in_b, 0, 3, ROWS)
    run(spark, in_b, out, chk_b, SINK_CONFS)  # B: batches 0, 1, 2
    write_input(in_a, 10, 4, ROWS)  # A: batches 0..3; 0..2 are at or below B's latest
    refused_start(spark, in_a, out, chk_a)
    a = query_id(chk_a)
    # Spark 4.1 creates offsets/ only as the first batch is planned; 4.3 as the query starts.
    # Here as 4.1 leaves it: the takeover needs only `metadata`.
    assert log_names(chk_a / "offsets") == []
    (chk_a / "offsets").rmdir()

    # the dry run on this session; the takeover itself as the error names it, in its own process
    dry = cli_here(spark, "takeover", str(out), "--checkpoint", str(chk_a), "--dry-run")
    assert dry.returncode == 0, dry.stderr[-3000:]
    record = json.loads((out / "_batchlog" / RECORD).read_text())
    assert [o["queryId"] for o in record["owners"]] == [query_id(chk_b)]
    done = run_cli("takeover", str(out), "--checkpoint", str(chk_a))
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads((out / "_batchlog" / RECORD).read_text())
    assert [(o["queryId"], o["fromBatch"]) for o in record["owners"]][-1] == (a, 3)

    run(spark, in_a, out, chk_a, SINK_CONFS)  # its batches 0..2 skipped, batch 3 written
    assert log_names(chk_a / "commits") == ["0", "1", "2", "3"]
    assert batchlog.SinkLog(spark, str(out)).latest_batch() == 3
    assert plain_read(out)["ids"] == sorted(ids_of(range(3)) + ids_of(range(13, 14)))


def test_a_head_start_writer_on_a_sink_without_an_owner_record_is_stopped(
    spark: SparkSession, tmp_path: Path
) -> None:
    """B is plain Spark's committer (no record); A, with batchlog, would skip its batches 0..2
    and then claim the sink: it is stopped as it starts."""
    out = tmp_path / "out"
    in_b, chk_b, in_a, chk_a = (tmp_path / n for n in ("in-b", "chk-b", "in-a", "chk-a"))
    write_input(in_b, 0, 3, ROWS)
    run(spark, in_b, out, chk_b, {**SINK_CONFS, batchlog.COMMIT_PROTOCOL_KEY: SPARK_COMMITTER})
    assert not (out / "_batchlog" / RECORD).exists()
    before = snapshot(out)

    write_input(in_a, 10, 2, ROWS)
    err = refused_start(spark, in_a, out, chk_a)
    owner = (
        "the sink's log was written by another writer, which left no owner record (plain "
        "Spark's file sink, or a log rebuilt by `repair`"
    )
    assert expected_message(query_id(chk_a), out, owner, "that writer", 2) in str(err)
    assert snapshot(out) == before
    assert plain_read(out)["ids"] == ids_of(range(3))
    assert log_names(chk_a / "offsets") == [] and log_names(chk_a / "commits") == []


def test_a_writer_without_batchlogs_committer_is_not_stopped_and_inspect_counts_its_skips(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Not caught at the start: A runs with plain Spark's committer (the check is for queries
    committing through batchlog). Spark's sink skips A's batches 0 and 1 without an error; the
    sink shows no trace of A, and ``inspect --checkpoint`` counts the skipped batches."""
    out = tmp_path / "out"
    in_b, chk_b, in_a, chk_a = (tmp_path / n for n in ("in-b", "chk-b", "in-a", "chk-a"))
    write_input(in_b, 0, 3, ROWS)
    run(spark, in_b, out, chk_b, SINK_CONFS)
    before = snapshot(out)
    write_input(in_a, 10, 2, ROWS)
    run(spark, in_a, out, chk_a, {**SINK_CONFS, batchlog.COMMIT_PROTOCOL_KEY: SPARK_COMMITTER})
    assert log_names(chk_a / "commits") == ["0", "1"]  # both batches "done", both skipped
    assert snapshot(out) == before
    assert plain_read(out)["ids"] == ids_of(range(3))
    assert batchlog.verify(spark, str(out))["healthy"] is True  # no trace in the sink

    h = batchlog.SinkLog(spark, str(out)).inspect(str(chk_a)).horizon
    assert (h.owner, h.checkpoint_query_id) == (query_id(chk_b), query_id(chk_a))
    assert (h.checkpoint_skipped_batches, h.checkpoint_skipped_first) == (2, 0)
    assert h.checkpoint_skipped_last == 1
    proc = cli_here(spark, "inspect", str(out), "--checkpoint", str(chk_a))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (
        "WARNING         2 committed batches of the checkpoint (from 0 to 1) were skipped by "
        "Spark's sink (their ids were already logged by another writer): their rows are not in "
        "the sink"
    ) in proc.stdout, proc.stdout
    # the owner's checkpoint: nothing skipped, no such warning
    h = batchlog.SinkLog(spark, str(out)).inspect(str(chk_b)).horizon
    assert (h.checkpoint_skipped_batches, h.checkpoint_skipped_first) == (0, None)


BARE_APP = """
import sys
from pyspark.sql import SparkSession

jar, inp, out, chk = sys.argv[1:5]
# the bare set-up: the jar in spark.jars, the commit protocol set on the running session
spark = (
    SparkSession.builder.master("local[1]")
    .config("spark.ui.enabled", "false")
    .config("spark.jars", jar)
    .getOrCreate()
)
spark.conf.set("spark.sql.streaming.commitProtocolClass", "io.batchlog.BatchTaggedCommitProtocol")
assert spark.conf.get("spark.sql.extensions", None) is None


def run(chk):
    q = (
        spark.readStream.schema("id LONG, part STRING, payload STRING")
        .option("maxFilesPerTrigger", 1).json(inp)
        .writeStream.format("parquet").option("checkpointLocation", chk)
        .trigger(availableNow=True).start(out)
    )
    try:
        q.awaitTermination(600)
        return "ok"
    except Exception as e:
        return "refused" if "the sink is written by another query" in str(e) else str(e)


print("BARE first:", run(chk))
print("BARE second:", run(chk + "-2"))
print("BARE latest:", spark.sql(f"SELECT * FROM batchlog_latest_batch('{out}')").first()[0])
"""


def test_the_bare_set_up_has_the_start_check_and_the_sql(tmp_path: Path) -> None:
    """PySpark's ``spark.jars`` and ``spark.conf.set`` of the commit protocol, nothing else (no
    ``batchlog.configure``, no ``spark.sql.extensions``): Spark loads batchlog's extension from
    the jar's ``META-INF/services``, so a second query with a head start is stopped and the SQL
    answers. (spark-submit ``--packages`` with the one conf: every line's smoke.)"""
    import subprocess
    import sys

    from plain_reader import plain_env

    inp, out, chk = tmp_path / "in", tmp_path / "out", tmp_path / "chk"
    fed = write_input(inp, 0, 2, ROWS)
    app = tmp_path / "bare_app.py"
    app.write_text(BARE_APP)
    proc = subprocess.run(
        [sys.executable, str(app), batchlog.jar_path(), str(inp), str(out), str(chk)],
        env=plain_env(),
        capture_output=True,
        text=True,
        timeout=QUERY_TIMEOUT_S,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    assert "BARE first: ok" in proc.stdout, proc.stdout + proc.stderr[-4000:]
    assert "BARE second: refused" in proc.stdout, proc.stdout + proc.stderr[-4000:]
    assert "BARE latest: 1" in proc.stdout, proc.stdout
    assert plain_read(out)["ids"] == sorted(fed)
