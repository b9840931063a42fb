"""Every Python API call answers over Spark Connect exactly what it answers over py4j, edge by edge.

Each case runs the same call on the suite's classic session (py4j, ``io.batchlog.BatchLog``) and on
a Connect client of a real Spark Connect server (batchlog's SQL), on the same sink, and compares the
outcome: the value, or the exception class and message. The edges are the ones a thin SQL facade
gets wrong: batch 0 (a falsy id), an empty sink, a read with no range and with open ranges, a path
with spaces, quotes and non-ASCII characters, and the errors of each code that a call can meet.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import INPUT_SCHEMA, batch_rows, drop_inputs
from connect_support import connect_spark, connect_url  # noqa: F401  (the fixtures)
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.connect.session import SparkSession as ConnectSession
from support import await_query, batchlog

Outcome = tuple[str, Any]


def outcome(call: Callable[[], Any], messages: bool = True) -> Outcome:
    """``("ok", value)`` (a DataFrame as its sorted rows) or ``("error", (class, message))``
    (the message's first line; ``""`` unless ``messages``)."""
    try:
        value = call()
    except batchlog.BatchLogError as e:
        return "error", (type(e).__name__, str(e).split("\n")[0] if messages else "")
    except KeyError as e:
        return "error", ("KeyError", str(e))
    if isinstance(value, DataFrame) or type(value).__name__ == "DataFrame":
        return "ok", sorted(tuple(r) for r in value.collect())
    return "ok", value


def same(
    remote: ConnectSession,
    local: SparkSession,
    call: Callable[[Any], Any],
    messages: bool = True,
) -> Outcome:
    """The outcome of ``call(session)``, asserted the same over Connect and over py4j (the error
    messages too, if ``messages``)."""
    over_connect = outcome(lambda: call(remote), messages)
    over_py4j = outcome(lambda: call(local), messages)
    assert over_connect == over_py4j
    return over_py4j


def write_sink(spark: SparkSession, root: Path, out: Path, batches: int) -> Path:
    """A stateless query writing ``batches`` batches (one input file each) to ``out``."""
    drop_inputs(root / "in", {b: batch_rows(b, 2) for b in range(batches)})
    chk = root / "chk"
    q = (
        spark.readStream.schema(INPUT_SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .json(str(root / "in"))
        .writeStream.format("parquet")
        .option("checkpointLocation", str(chk))
        .trigger(availableNow=True)
        .start(str(out))
    )
    await_query(q, out)
    assert q.exception() is None
    return chk


def test_batch_zero_and_ranges_over_connect_match_py4j(
    connect_spark: ConnectSession, spark: SparkSession, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    write_sink(spark, tmp_path, out, 1)
    p = str(out)
    assert same(connect_spark, spark, lambda s: batchlog.SinkLog(s, p).latest_batch()) == ("ok", 0)
    assert same(connect_spark, spark, lambda s: batchlog.SinkLog(s, p).batches()) == ("ok", [0])
    kind, files = same(connect_spark, spark, lambda s: sorted(batchlog.SinkLog(s, p).files(0)))
    assert kind == "ok" and len(files) == 1
    assert same(connect_spark, spark, lambda s: batchlog.SinkLog(s, p).batch_of(files[0])) == (
        "ok",
        0,
    )
    assert same(connect_spark, spark, lambda s: batchlog.SinkLog(s, p).files(1)) == ("ok", [])
    every_row = same(connect_spark, spark, lambda s: batchlog.read(s, p, "parquet"))
    assert every_row[0] == "ok" and len(every_row[1]) == 4
    for lo, hi in [(0, None), (None, 0), (0, 0)]:
        assert (
            same(connect_spark, spark, lambda s, a=lo, b=hi: batchlog.read(s, p, "parquet", a, b))
            == every_row
        )
    assert same(connect_spark, spark, lambda s: batchlog.read(s, p, "parquet", 1, None)) == (
        "ok",
        [],
    )
    assert same(connect_spark, spark, lambda s: batchlog.SinkLog(s, p).inspect())[0] == "ok"
    assert same(connect_spark, spark, lambda s: batchlog.verify(s, p))[0] == "ok"
    # the history over SQL is the one py4j reads, record for record
    batchlog.vacuum(spark, p, older_than="1h", dry_run=False, quiet=True)
    kind, history = same(connect_spark, spark, lambda s: batchlog.SinkLog(s, p).history(rows=True))
    assert kind == "ok" and [(b.batch_id, b.rows) for b in history.batches] == [(0, 4)]
    assert [(o.operation, o.outcome) for o in history.operations] == [("vacuum", "done")]


def test_empty_sink_over_connect_matches_py4j(
    connect_spark: ConnectSession, spark: SparkSession, tmp_path: Path
) -> None:
    # a query that ran no batch: its sink has an empty _spark_metadata
    (tmp_path / "in").mkdir()
    out = tmp_path / "out"
    write_sink(spark, tmp_path, out, 0)
    assert (out / "_spark_metadata").is_dir()
    p = str(out)
    assert same(connect_spark, spark, lambda s: batchlog.SinkLog(s, p).latest_batch()) == (
        "ok",
        None,
    )
    assert same(connect_spark, spark, lambda s: batchlog.SinkLog(s, p).batches()) == ("ok", [])
    assert same(connect_spark, spark, lambda s: batchlog.SinkLog(s, p).files(0)) == ("ok", [])
    assert same(connect_spark, spark, lambda s: batchlog.SinkLog(s, p).inspect())[0] == "ok"
    assert same(connect_spark, spark, lambda s: batchlog.verify(s, p))[0] == "ok"
    # a vacuum's cutoff is "now - older_than" where it runs: the rest must be the same
    assert (
        same(
            connect_spark,
            spark,
            lambda s: dataclasses.replace(batchlog.vacuum(s, p, dry_run=True), cutoff_time=0),
        )[0]
        == "ok"
    )


def test_path_with_spaces_quotes_and_non_ascii_over_connect(
    connect_spark: ConnectSession, spark: SparkSession, tmp_path: Path
) -> None:
    out = tmp_path / "out dir 'q' \"dq\" \\ äöü 数据"
    chk = write_sink(spark, tmp_path, out, 3)
    p, c = str(out), str(chk)
    assert same(connect_spark, spark, lambda s: batchlog.SinkLog(s, p).latest_batch()) == ("ok", 2)
    assert same(connect_spark, spark, lambda s: batchlog.SinkLog(s, p).batches()) == (
        "ok",
        [0, 1, 2],
    )
    kind, files = same(connect_spark, spark, lambda s: sorted(batchlog.SinkLog(s, p).files(1)))
    assert kind == "ok" and len(files) == 1
    assert same(connect_spark, spark, lambda s: batchlog.SinkLog(s, p).batch_of(files[0])) == (
        "ok",
        1,
    )
    assert same(connect_spark, spark, lambda s: batchlog.read(s, p, "parquet", 1, 2))[0] == "ok"
    assert same(connect_spark, spark, lambda s: batchlog.SinkLog(s, p).inspect(c))[0] == "ok"
    plan = same(connect_spark, spark, lambda s: batchlog.rewind_action(s, p, c, 1).plan())
    assert plan[0] == "ok" and plan[1].affected_batches == [1, 2]
    assert same(connect_spark, spark, lambda s: batchlog.verify(s, p))[0] == "ok"


def test_errors_of_each_code_over_connect_match_py4j(
    connect_spark: ConnectSession, spark: SparkSession, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    chk = write_sink(spark, tmp_path, out, 3)
    p, c = str(out), str(chk)
    cases: list[tuple[str, Callable[[Any], Any]]] = [
        ("NotASinkError", lambda s: batchlog.SinkLog(s, str(tmp_path / "in"))),
        ("NotASinkError", lambda s: batchlog.verify(s, str(tmp_path / "nope"))),
        ("InvalidArgumentError", lambda s: batchlog.rewind_action(s, p, c, 9).plan()),
        ("InvalidArgumentError", lambda s: batchlog.vacuum(s, p, older_than="soon")),
        ("NotACheckpointError", lambda s: batchlog.rewind_action(s, p, str(tmp_path), 1).plan()),
    ]
    for name, call in cases:
        kind, (cls, _) = same(connect_spark, spark, call)
        assert (kind, cls) == ("error", name)
    # another query's checkpoint
    other = tmp_path / "other"
    other_chk = write_sink(spark, other, other / "out", 1)
    kind, (cls, _) = same(
        connect_spark, spark, lambda s: batchlog.rewind_action(s, p, str(other_chk), 1).plan()
    )
    assert (kind, cls) == ("error", "UnsupportedCheckpointError")
    # a file that is not in the log
    kind, (cls, _) = same(
        connect_spark, spark, lambda s: batchlog.SinkLog(s, p).batch_of(p + "/nope.parquet")
    )
    assert (kind, cls) == ("error", "KeyError")
    # a damaged log file, then a missing one
    damaged = out / "_spark_metadata" / "1"
    saved = damaged.read_bytes()
    damaged.write_text("v1\n{not json\n")
    kind, (cls, _) = same(connect_spark, spark, lambda s: batchlog.SinkLog(s, p).files(1))
    assert (kind, cls) == ("error", "CorruptLogError")
    damaged.write_bytes(saved)
    shutil.move(str(damaged), str(tmp_path / "log-1"))
    kind, (cls, _) = same(connect_spark, spark, lambda s: batchlog.SinkLog(s, p).batches())
    assert (kind, cls) == ("error", "MissingLogFileError")


@pytest.mark.parametrize("bad", [(-1, None), (None, -1), (2, 1)])
def test_bad_read_ranges_over_connect_are_invalid_argument(
    connect_spark: ConnectSession,
    spark: SparkSession,
    tmp_path: Path,
    bad: tuple[int | None, int | None],
) -> None:
    out = tmp_path / "out"
    write_sink(spark, tmp_path, out, 2)
    # the py4j call names its argument (from_batch), the data source its option (batches)
    kind, (cls, _) = same(
        connect_spark, spark, lambda s: batchlog.read(s, str(out), "parquet", *bad), messages=False
    )
    assert (kind, cls) == ("error", "InvalidArgumentError")
