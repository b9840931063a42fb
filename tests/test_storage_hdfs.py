"""batchlog on HDFS: a single-node HDFS started by the test (``storage_support.hdfs``), the sink
and the checkpoint on it, the input on the local disk. Everything a sink's owner does — a query
with compactions, reading by batch, verify, a rewind of the checkpoint and its replay exactly
once, vacuum, the CLI — and the rows read back exactly."""

from __future__ import annotations

from pathlib import Path

import batchlog
from conftest import (
    COMMIT_PROTOCOL_KEY,
    COMPACT_INTERVAL_KEY,
    batch_rows,
    drop_inputs,
    row_tuples,
    run_stream,
    session_conf,
)
from pyspark.sql import SparkSession
from storage_support import RemoteFs, hdfs  # noqa: F401  (the fixture)
from support import LEASE_FILE, run_cli, wait_until

BATCHES = 6  # compactInterval 2: compact files 1, 3, 5


def _run(spark: SparkSession, fs: RemoteFs, inbox: Path, out: str, chk: str) -> list[int]:
    """``run_stream`` to an hdfs:// sink, then waits for its writer lease to go (on HDFS)."""
    batches = run_stream(spark, inbox, out, chk)  # type: ignore[arg-type]
    lease = f"{out}/_spark_metadata/{LEASE_FILE}"
    wait_until(lambda: not fs.exists(lease), 30, f"{lease} to go after its query")
    return batches


def _rows(spark: SparkSession, out: str) -> list[tuple]:
    return row_tuples(r.asDict() for r in spark.read.parquet(out).collect())


def test_query_rewind_replay_verify_vacuum_cli_on_hdfs(
    spark: SparkSession,
    hdfs: str,
    tmp_path: Path,  # noqa: F811
) -> None:
    inbox = tmp_path / "in"
    out, chk = f"{hdfs}/sinks/events/out", f"{hdfs}/sinks/events/chk"
    fs = RemoteFs(spark, hdfs)
    inputs = {b: batch_rows(b, b % 3 + 1) for b in range(BATCHES)}
    drop_inputs(inbox, inputs)
    confs = {COMMIT_PROTOCOL_KEY: batchlog.COMMIT_PROTOCOL_CLASS, COMPACT_INTERVAL_KEY: "2"}
    everything = row_tuples(r for rows in inputs.values() for r in rows)
    with session_conf(spark, confs):
        assert _run(spark, fs, inbox, out, chk) == list(range(BATCHES))
        assert fs.log_names(out) == ["0", "1.compact", "2", "3.compact", "4", "5.compact"]
        assert "5.compact.index" in fs.names(f"{out}/_spark_metadata")

        # read by batch: exactly the files each batch wrote, from the log on HDFS
        log = batchlog.SinkLog(spark, out)
        written = fs.data_files_by_batch(out)
        assert sorted(written) == list(range(BATCHES))
        assert {b: set(log.files(b)) for b in range(BATCHES)} == written
        some = sorted(written[4])[0]
        assert log.batch_of(some) == 4
        assert log.entries().count() == sum(len(v) for v in written.values())
        assert _rows(spark, out) == everything

        report = batchlog.verify(spark, out)
        assert report.healthy and not report.orphans, report

        # rewind to 3 (sink and checkpoint on HDFS), then the same query replays 3..5 exactly once
        dry = batchlog.rewind(spark, out, chk, to_batch=3, dry_run=True, quiet=True)
        assert dry.plan.affected_batches == [3, 4, 5]
        assert dry.plan.data_files == sum(len(written[b]) for b in (3, 4, 5))
        assert fs.data_files_by_batch(out) == written  # a dry run changes nothing
        batchlog.rewind(spark, out, chk, to_batch=3, quiet=True)
        assert sorted(fs.data_files_by_batch(out)) == [0, 1, 2]
        assert fs.log_names(out) == ["0", "1.compact", "2"]
        assert _run(spark, fs, inbox, out, chk) == [3, 4, 5]
        assert _rows(spark, out) == everything
        replayed = fs.data_files_by_batch(out)
        assert sorted(replayed) == list(range(BATCHES))
        assert {b: replayed[b] for b in (0, 1, 2)} == {b: written[b] for b in (0, 1, 2)}
        assert {b: set(batchlog.SinkLog(spark, out).files(b)) for b in range(BATCHES)} == replayed

        vac = batchlog.vacuum(spark, out, older_than="0s", quiet=True)
        assert (vac.live_files, vac.orphan_files, vac.deleted_files) == (
            sum(len(v) for v in replayed.values()),
            0,
            0,
        )

    # the CLI, in its own process, on the hdfs:// path
    cli = run_cli("files", out, "--batch", "4")
    assert cli.returncode == 0, cli.stderr[-3000:]
    assert set(line.strip() for line in cli.stdout.splitlines()) >= replayed[4]
    cli = run_cli("verify", out)
    assert cli.returncode == 0, cli.stdout + cli.stderr[-3000:]
