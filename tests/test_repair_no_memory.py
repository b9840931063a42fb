"""``_spark_metadata`` deleted, ``repair`` run as a user would (no flags, the CLI's session at
Spark's default interval 10), the same query restarted with its own interval: it continues
through two more compactions and plain Spark reads every row exactly once.

Two cases per interval (3, 7, 10): batchlog's records live in ``<out>/_batchlog/``, so the sink
record survives the deletion and gives the query's interval; and a sink whose record was lost
with the log (as it was before records moved out of ``_spark_metadata``), where repair knows no
interval and writes one compact file of the newest batch, which every interval reads.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from reliability_support import batchlog, check_log, run_cli, spark_session, sql_conf
from repair_support import (
    DEFAULT_INTERVAL,
    INTERVAL_KEY,
    Input,
    assert_batches,
    assert_plain_reads_all,
    meta_names,
    record,
    run_query,
    with_indexes,
)
from support import cli_here

spark = spark_session  # the module's session fixture

INTERVALS = [3, 7, 10]
LATEST = 7  # the sinks hold batches 0..7


def derived(configured: int, compact_id: int) -> int:
    """The interval Spark takes from a log whose only compact file is ``compact_id``.compact
    (CompactibleFileStreamLog.deriveCompactInterval): the test's oracle."""
    n = compact_id + 1
    if n <= configured:
        return n
    if configured < n // 2:
        return next(i for i in [*range(configured, n // 2 + 1), n] if n % i == 0)
    return n


def sink_of_8(spark: SparkSession, tmp: Path, interval: int) -> tuple[Input, Path, Path]:
    inp, out, chk = Input(tmp / "in"), tmp / "out", tmp / "chk"
    inp.add(0, LATEST + 1)
    run_query(spark, inp, out, chk, **{INTERVAL_KEY: str(interval)})
    assert check_log(out, interval)["latest"] == LATEST
    assert record(out)["compactInterval"] == interval
    assert not (out / "_spark_metadata" / "batchlog-sink.json").exists()
    return inp, out, chk


def continue_two_compactions(
    spark: SparkSession, inp: Input, out: Path, chk: Path, configured: int, runs_at: int
) -> None:
    """Restarts the query (its own conf: ``configured``) for the batches up to its second
    compaction after batch 7 at ``runs_at``, the interval the log makes it run with."""
    first = (LATEST + runs_at + 1) // runs_at * runs_at - 1  # next compaction after 7
    second = first + runs_at
    inp.add(LATEST + 1, second - LATEST)
    run_query(spark, inp, out, chk, **{INTERVAL_KEY: str(configured)})
    assert check_log(out, runs_at)["latest"] == second
    assert {f"{first}.compact", f"{second}.compact"} <= meta_names(out)
    assert record(out)["compactInterval"] == runs_at
    assert_plain_reads_all(out, inp)
    assert_batches(spark, out, inp, range(second + 1))
    v = batchlog.verify(spark, str(out))
    assert v["healthy"] is True and v["orphanCount"] == 0, v


@pytest.mark.parametrize("interval", INTERVALS)
def test_log_deleted_the_record_gives_the_interval(
    spark: SparkSession, tmp_path: Path, interval: int
) -> None:
    inp, out, chk = sink_of_8(spark, tmp_path, interval)
    rec = record(out)
    shutil.rmtree(out / "_spark_metadata")

    with sql_conf(spark, **DEFAULT_INTERVAL):
        r = batchlog.repair(spark, str(out), quiet=True)
    assert (r["written"], r["compactInterval"], r["compactIntervalAssumed"]) == (
        True,
        interval,
        False,
    )
    assert r["compactIntervalSource"] == f"the sink record in file:{out}/_batchlog"
    assert r.get("movedAside") is None
    compacts = [c for c in range(LATEST + 1) if (c + 1) % interval == 0][-2:]
    after = compacts[-1] + 1 if compacts else 0
    expected = [f"{c}.compact" for c in compacts] + [str(b) for b in range(after, LATEST + 1)]
    assert [f["name"] for f in r["logFiles"]] == expected
    assert meta_names(out) == with_indexes(set(expected))
    assert record(out) == {**rec, "epoch": rec["epoch"] + 1}
    with sql_conf(spark, **{INTERVAL_KEY: str(interval)}):
        assert batchlog.SinkLog(spark, str(out)).batches() == list(range(LATEST + 1))

    continue_two_compactions(spark, inp, out, chk, interval, interval)


@pytest.mark.parametrize("interval", INTERVALS)
def test_log_and_record_lost_repair_lays_out_a_log_every_interval_reads(
    spark: SparkSession, tmp_path: Path, interval: int
) -> None:
    inp, out, chk = sink_of_8(spark, tmp_path, interval)
    shutil.rmtree(out / "_spark_metadata")
    shutil.rmtree(out / "_batchlog")

    cli = run_cli("repair", str(out))  # as a user would: no flags, the CLI's own session
    assert cli.returncode == 0, cli.stdout + cli.stderr[-3000:]
    assert "nothing records the query's interval" in cli.stdout, cli.stdout
    assert f"{LATEST}.compact" in cli.stdout, cli.stdout
    assert "done: restart the query with its checkpoint." in cli.stdout, cli.stdout
    assert meta_names(out) == with_indexes({f"{LATEST}.compact"})
    assert not (out / "_batchlog" / "_batchlog-sink.json").exists()  # no guess recorded
    lines = (out / "_spark_metadata" / f"{LATEST}.compact").read_text().split("\n")
    assert lines[0] == "v1"
    assert sorted({json.loads(x)["batchId"] for x in lines[1:]}) == list(range(LATEST + 1))

    # readers of any interval read it: this session at the query's, plain Spark
    with sql_conf(spark, **{INTERVAL_KEY: str(interval)}):
        assert batchlog.SinkLog(spark, str(out)).batches() == list(range(LATEST + 1))
    assert_plain_reads_all(out, inp)
    again = cli_here(spark, "repair", str(out))  # a JVM's start saved: the command's output
    assert again.returncode == 0 and "nothing to do" in again.stdout, again.stdout

    continue_two_compactions(spark, inp, out, chk, interval, derived(interval, LATEST))
