"""repair lays the log out for the query's compact interval; lineage survives a vanilla interlude.

Real streaming queries (file source -> parquet sink, one input file per batch, compact interval 3)
write real sinks; the log is damaged on disk, rebuilt by ``repair`` and the same query continues.
What is asserted is what a user sees: the rows plain Spark (without batchlog) reads back, and the
files ``SinkLog.files(b)`` gives for each batch, read as parquet, against the input file of ``b``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Iterable
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from reliability_support import (
    SINK_CONFS,
    TAGGED,
    batchlog,
    check_log,
    local_path,
    plain_read,
    snapshot,
    spark_session,
    sql_conf,
    write_input,
)
from support import await_query

spark = spark_session  # the module's session fixture

INTERVAL_KEY = "spark.sql.streaming.fileSink.log.compactInterval"
PROTOCOL_KEY = "spark.sql.streaming.commitProtocolClass"
VANILLA = "org.apache.spark.sql.execution.streaming.ManifestFileCommitProtocol"
DEFAULT_INTERVAL = {INTERVAL_KEY: "10"}  # Spark's default: not the query's interval
RECORDS = frozenset({"batchlog-sink.json", "batchlog-lease.json"})
ROWS = 3  # rows per input file: ids k*1000 .. k*1000+2, one in each partition p0..p2


# ---- helpers -----------------------------------------------------------------------------------


class Input:
    """The input directory; file ``k`` is read by batch ``k`` (mtimes make the order certain)."""

    def __init__(self, root: Path) -> None:
        self.dir = root
        self.base = time.time() - 3600
        self.ids: dict[int, list[int]] = {}

    def add(self, first: int, n: int) -> None:
        for k in range(first, first + n):
            self.ids[k] = write_input(self.dir, k, 1, ROWS)
            t = self.base + k
            os.utime(self.dir / f"in-{k:04d}.json", (t, t))

    def all_ids(self) -> list[int]:
        return sorted(i for ids in self.ids.values() for i in ids)


def run_query(spark: SparkSession, inp: Input, out: Path, chk: Path, **confs: str) -> None:
    """The query of ``reliability_support.run_stream`` (same checkpoint, same query), with
    ``confs`` on top of its sink confs (e.g. Spark's own commit protocol); raises its error."""
    with sql_conf(spark, **{**SINK_CONFS, **confs}):
        q = (
            spark.readStream.schema("id LONG, part STRING, payload STRING")
            .option("maxFilesPerTrigger", 1)
            .json(str(inp.dir))
            .writeStream.format("parquet")
            .partitionBy("part")
            .option("checkpointLocation", str(chk))
            .trigger(availableNow=True)
            .start(str(out))
        )
        await_query(q, out)


def meta_names(out: Path) -> set[str]:
    """Visible names in ``_spark_metadata`` (no checksums)."""
    return {p.name for p in (out / "_spark_metadata").iterdir() if not p.name.startswith(".")}


def record(out: Path) -> dict:
    return json.loads((out / "_spark_metadata" / "batchlog-sink.json").read_text())


def tagged_on_disk(out: Path) -> dict[int, set[Path]]:
    """Data files on disk by the batch their batch-tagged name gives."""
    by: dict[int, set[Path]] = {}
    for p in out.rglob("part-*"):
        if p.name.endswith(".crc") or "_spark_metadata" in str(p.relative_to(out)):
            continue
        m = TAGGED.search(p.name)
        if m:
            by.setdefault(int(m.group(1)), set()).add(p)
    return by


def ids_by_file(spark: SparkSession, paths: Iterable[str]) -> dict[str, list[int]]:
    """The ids of each given data file, read as parquet files (not through the sink's log)."""
    paths = list(paths)
    if not paths:
        return {}
    df = spark.read.parquet(*paths).select("id", F.input_file_name().alias("f"))
    by: dict[str, list[int]] = {}
    for r in df.collect():
        by.setdefault(str(local_path(r["f"])), []).append(r["id"])
    return by


def assert_batches(
    spark: SparkSession, out: Path, inp: Input, batches: Iterable[int], tagged_names: bool = True
) -> None:
    """``files(b)`` holds exactly batch b's files: their ids are input file b's, and (when every
    batch was written by batchlog) the paths are exactly the data files named for batch b."""
    log = batchlog.SinkLog(spark, str(out))
    files = {b: log.files(b) for b in batches}
    ids = ids_by_file(spark, (p for fs in files.values() for p in fs))
    on_disk = tagged_on_disk(out) if tagged_names else {}
    for b, fs in files.items():
        got = sorted(i for p in fs for i in ids[str(local_path(p))])
        assert got == sorted(inp.ids[b]), f"files({b}) = {fs}"
        assert all(log.batch_of(p) == b for p in fs), b
        if tagged_names:
            assert {local_path(p) for p in fs} == on_disk.get(b, set()), f"batch {b}"


def assert_plain_reads_all(out: Path, inp: Input) -> None:
    got = plain_read(out)
    assert got["ids"] == inp.all_ids()
    assert got["rows"] == len(inp.all_ids())  # every id exactly once


def sink_of_8(spark: SparkSession, tmp: Path) -> tuple[Input, Path, Path]:
    """Batches 0..7 by the interval-3 query: 2.compact, 5.compact, 6, 7."""
    inp, out, chk = Input(tmp / "in"), tmp / "out", tmp / "chk"
    inp.add(0, 8)
    run_query(spark, inp, out, chk)
    assert check_log(out, 3, junk=RECORDS)["latest"] == 7
    assert record(out)["compactInterval"] == 3
    return inp, out, chk


# ---- case 4: repair lays the log out for the query's compact interval ------------------------


def refusals_change_nothing(spark: SparkSession, out: Path, chk: Path) -> None:
    """Every repair refusal that says "Nothing was changed" left the sink byte-identical."""
    meta = out / "_spark_metadata"
    before = snapshot(out)
    for bad in (0, -3):
        with pytest.raises(batchlog.InvalidArgumentError) as e:
            batchlog.repair(spark, str(out), compact_interval=bad)
        assert "compact_interval" in str(e.value) and "Nothing was changed." in str(e.value)
        assert snapshot(out) == before

    now = int(time.time() * 1000)
    lease = meta / "batchlog-lease.json"  # a live writer in another process
    lease.write_text(
        json.dumps(
            {
                "queryId": "other-query",
                "runId": "other-run",
                "host": "elsewhere",
                "pid": 1,
                "batchId": 7,
                "refreshedAtMs": now,
                "timeoutMs": 600_000,
            }
        )
    )
    with_lease = snapshot(out)
    with sql_conf(spark, **DEFAULT_INTERVAL), pytest.raises(batchlog.WriterActiveError) as e:
        batchlog.repair(spark, str(out))
    assert "Nothing was changed." in str(e.value)
    assert snapshot(out) == with_lease
    lease.unlink()

    intent = meta / "batchlog-rewind.json"  # an unfinished rewind
    intent.write_text(
        json.dumps({"toBatch": 3, "sink": str(out), "checkpoint": str(chk), "startedAtMs": now})
    )
    with_intent = snapshot(out)
    with pytest.raises(batchlog.RewindInProgressError) as e:
        batchlog.repair(spark, str(out))
    assert "Nothing was changed." in str(e.value)
    assert snapshot(out) == with_intent
    intent.unlink()
    assert snapshot(out) == before


@pytest.mark.parametrize("damage", ["deleted", "truncated"])
def test_repair_takes_the_interval_from_the_sink_record(
    spark: SparkSession, tmp_path: Path, damage: str
) -> None:
    inp, out, chk = sink_of_8(spark, tmp_path)
    meta = out / "_spark_metadata"
    rec = record(out)
    if damage == "deleted":
        (meta / "5.compact").unlink()
        (meta / ".5.compact.crc").unlink()
    else:
        data = (meta / "5.compact").read_bytes()
        (meta / "5.compact").write_bytes(data[: len(data) // 2])  # cut inside a line
        (meta / ".5.compact.crc").unlink()
    refusals_change_nothing(spark, out, chk)

    with sql_conf(spark, **DEFAULT_INTERVAL):
        r = batchlog.repair(spark, str(out), quiet=True)
    assert r["logHealthy"] is False and r["needed"] is True and r["written"] is True
    assert r["compactInterval"] == 3
    assert r["compactIntervalAssumed"] is False
    assert r["compactIntervalSource"].startswith("the sink record in file:")
    assert r["compactIntervalSource"].endswith(f"{out.name}/_spark_metadata")
    assert [f["name"] for f in r["logFiles"]] == ["2.compact", "5.compact", "6", "7"]
    assert r["movedAside"] and "_spark_metadata.broken-" in r["movedAside"]
    assert meta_names(out) == {"2.compact", "5.compact", "6", "7", "batchlog-sink.json"}
    assert record(out) == {**rec, "epoch": rec["epoch"] + 1}
    state = check_log(out, 3, junk=RECORDS)
    assert sorted({e["batchId"] for e in state["live"]}) == list(range(8))

    # The same query continues through two more compactions of its interval.
    inp.add(8, 4)
    run_query(spark, inp, out, chk)
    assert check_log(out, 3, junk=RECORDS)["latest"] == 11
    assert {"8.compact", "11.compact"} <= meta_names(out)
    assert_plain_reads_all(out, inp)
    assert_batches(spark, out, inp, range(12))
    again = batchlog.repair(spark, str(out), quiet=True)
    assert (again["logHealthy"], again["needed"], again["written"]) == (True, False, False)
    v = batchlog.verify(spark, str(out))
    assert v["healthy"] is True and v["orphanCount"] == 0, v

    # Log lost again: the record the first repair moved aside still gives the interval.
    shutil.rmtree(meta)
    with sql_conf(spark, **DEFAULT_INTERVAL):
        r = batchlog.repair(spark, str(out), quiet=True)
    assert (r["compactInterval"], r["compactIntervalAssumed"], r["written"]) == (3, False, True)
    assert re.fullmatch(
        r"the sink record in file:.*/_spark_metadata\.broken-\d+", r["compactIntervalSource"]
    ), r["compactIntervalSource"]
    assert [f["name"] for f in r["logFiles"]] == ["8.compact", "11.compact"]
    assert meta_names(out) == {"8.compact", "11.compact", "batchlog-sink.json"}
    assert_plain_reads_all(out, inp)
    assert_batches(spark, out, inp, range(12))


def test_repair_without_a_record_assumes_the_session_interval_unless_told(
    spark: SparkSession, tmp_path: Path
) -> None:
    inp, out, chk = sink_of_8(spark, tmp_path)
    shutil.rmtree(out / "_spark_metadata")
    before = snapshot(out)
    with sql_conf(spark, **DEFAULT_INTERVAL):
        dry = batchlog.repair(spark, str(out), dry_run=True, quiet=True)
    assert snapshot(out) == before, "a dry run changed something"
    assert (dry["logExists"], dry["needed"], dry["written"]) == (False, True, False)
    assert dry["compactInterval"] == 10 and dry["compactIntervalAssumed"] is True
    assert INTERVAL_KEY in dry["compactIntervalSource"]
    assert [f["name"] for f in dry["logFiles"]] == [str(b) for b in range(8)]

    with sql_conf(spark, **DEFAULT_INTERVAL):
        r = batchlog.repair(spark, str(out), compact_interval=3, quiet=True)
    assert r["written"] is True and r.get("movedAside") is None
    assert (r["compactInterval"], r["compactIntervalAssumed"]) == (3, False)
    assert r["compactIntervalSource"] == "the compact_interval argument"
    assert [f["name"] for f in r["logFiles"]] == ["2.compact", "5.compact", "6", "7"]
    assert meta_names(out) == {"2.compact", "5.compact", "6", "7", "batchlog-sink.json"}
    rec = record(out)
    assert (rec["compactInterval"], rec["epoch"], rec["owners"]) == (3, 1, [])

    inp.add(8, 4)
    run_query(spark, inp, out, chk)
    assert check_log(out, 3, junk=RECORDS)["latest"] == 11
    assert record(out)["owners"][0]["fromBatch"] == 8  # the restarted query claimed the sink
    assert_plain_reads_all(out, inp)
    assert_batches(spark, out, inp, range(12))
    assert batchlog.verify(spark, str(out))["healthy"] is True


# ---- case 5: lineage after a vanilla interlude -------------------------------------------------


def interlude_sink(spark: SparkSession, tmp: Path, **confs: str) -> tuple[Input, Path, Path]:
    """Batches 0..4 with batchlog, 5..8 with Spark's own commit protocol, 9..13 with batchlog."""
    inp, out, chk = Input(tmp / "in"), tmp / "out", tmp / "chk"
    inp.add(0, 5)
    run_query(spark, inp, out, chk, **confs)
    inp.add(5, 4)
    run_query(spark, inp, out, chk, **{PROTOCOL_KEY: VANILLA, **confs})
    inp.add(9, 5)
    run_query(spark, inp, out, chk, **confs)
    assert batchlog.SinkLog(spark, str(out)).latest_batch() == 13
    return inp, out, chk


def test_lineage_of_vanilla_batches_is_recovered_and_rewind_replays_them(
    spark: SparkSession, tmp_path: Path
) -> None:
    inp, out, chk = interlude_sink(spark, tmp_path)
    meta = out / "_spark_metadata"
    vanilla_files = [p for p in out.rglob("part-*.parquet") if not TAGGED.search(p.name)]
    assert len(vanilla_files) == 4 * ROWS  # batches 5..8 wrote untagged names
    assert_batches(spark, out, inp, range(14), tagged_names=False)
    lines = (meta / "11.compact").read_text().split("\n")
    assert lines[0] == "v1"
    assert len(lines) - 1 == 12 * ROWS  # batches 0..11
    assert all("batchId" in json.loads(line) for line in lines[1:]), lines
    assert batchlog.SinkLog(spark, str(out)).inspect()["horizon"]["sinkHorizon"] == 0
    assert_plain_reads_all(out, inp)

    log = batchlog.SinkLog(spark, str(out))
    replayed_vanilla = [local_path(p) for b in (6, 7, 8) for p in log.files(b)]
    kept_vanilla = [local_path(p) for p in log.files(5)]
    assert len(replayed_vanilla) == 3 * ROWS and len(kept_vanilla) == ROWS
    assert not any(TAGGED.search(p.name) for p in replayed_vanilla + kept_vanilla)
    plan = batchlog.rewind(spark, str(out), str(chk), 6, quiet=True)["plan"]
    assert plan["sinkHorizon"] == 0
    assert not any(p.exists() for p in replayed_vanilla)  # batches 6.. are redone
    run_query(spark, inp, out, chk)
    assert batchlog.SinkLog(spark, str(out)).latest_batch() == 13
    assert_plain_reads_all(out, inp)
    assert_batches(spark, out, inp, range(14), tagged_names=False)
    assert all(p.exists() for p in kept_vanilla)
    log = batchlog.SinkLog(spark, str(out))
    redone = [p for b in (6, 7, 8) for p in log.files(b)]
    assert len(redone) == 3 * ROWS and all(TAGGED.search(p) for p in redone)  # now by batchlog
    assert batchlog.verify(spark, str(out))["healthy"] is True


def test_lineage_is_never_made_up_once_the_proof_is_gone(
    spark: SparkSession, tmp_path: Path
) -> None:
    confs = {
        "spark.sql.streaming.minBatchesToRetain": "2",
        "spark.sql.streaming.fileSink.log.cleanupDelay": "0",
    }
    inp, out, chk = interlude_sink(spark, tmp_path, **confs)
    names = meta_names(out)
    assert not {"5.compact", "6", "7", "8.compact"} & names, names  # the proof is gone
    log = batchlog.SinkLog(spark, str(out))
    vanilla = [
        str(e["path"]) for e in log.entries().collect() if not re.search(r"-batch-\d+-", e["path"])
    ]
    assert len(vanilla) == 4 * ROWS
    assert all(log.batch_of(p) is None for p in vanilla)
    for b in range(5, 9):
        assert log.files(b) == []
    assert_batches(spark, out, inp, [*range(5), *range(9, 14)])
    assert log.inspect()["horizon"]["sinkHorizon"] == 9
    before = snapshot(tmp_path)
    with pytest.raises(batchlog.BeyondHorizonError) as e:
        batchlog.rewind(spark, str(out), str(chk), 6, quiet=True)
    msg = str(e.value)
    assert "Cannot rewind to batch 6" in msg, msg
    assert "the sink's entries of batches below 9 are untagged" in msg, msg
    assert "Nothing was changed." in msg, msg
    assert snapshot(tmp_path) == before
    assert_plain_reads_all(out, inp)


# ---- case 4 (c): a wrong repair, found from the record ---------------------------------------


def test_a_wrong_repair_is_found_and_undone_from_the_record(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Case 4 (c). Fails with the current jar (a product bug, see the report): after a repair
    for the wrong interval (10) left 0..7 without a compact file, the interval-3 query fails at
    batch 8 for want of 5.compact; but ``verify`` and ``repair()`` in a session at the default
    interval call the log healthy, as ``LogLayout.misfit`` only checks the compact files present,
    not the ones the recorded interval needs. Last in the module so that ``-x`` runs the rest."""
    inp, out, chk = sink_of_8(spark, tmp_path)
    wrong = batchlog.repair(spark, str(out), force=True, compact_interval=10, quiet=True)
    assert wrong["written"] is True
    assert meta_names(out) == {str(b) for b in range(8)} | {"batchlog-sink.json"}
    assert record(out)["compactInterval"] == 10

    # Batch 8 compacts for interval 3 and needs 5.compact, which the wrong layout lacks.
    inp.add(8, 1)
    with pytest.raises(StreamingQueryException) as e:
        run_query(spark, inp, out, chk)
    msg = str(e.value)
    assert f"{out}/_spark_metadata/5.compact" in msg, msg
    assert "Batch 8 was not committed; its data files are deleted." in msg, msg
    assert 8 not in tagged_on_disk(out)
    assert "8" not in meta_names(out) and "8.compact" not in meta_names(out)
    assert record(out)["compactInterval"] == 3  # the restarted query recorded its interval

    with sql_conf(spark, **DEFAULT_INTERVAL):
        v = batchlog.verify(spark, str(out))
    assert v["orphanCount"] == 0, v["orphans"]
    # the layout does not fit the query's interval 3 (BUG: verify says healthy)
    assert v["healthy"] is False, v
    assert any("5.compact" in e or "interval 3" in e for e in v["logErrors"]), v["logErrors"]
    with sql_conf(spark, **DEFAULT_INTERVAL):
        r = batchlog.repair(spark, str(out), quiet=True)
    assert r["written"] is True, r
    assert (r["compactInterval"], r["compactIntervalAssumed"]) == (3, False)
    assert [f["name"] for f in r["logFiles"]] == ["2.compact", "5.compact", "6", "7"]

    inp.add(9, 3)
    run_query(spark, inp, out, chk)
    assert check_log(out, 3, junk=RECORDS)["latest"] == 11
    assert_plain_reads_all(out, inp)
    assert_batches(spark, out, inp, range(12))
    assert batchlog.verify(spark, str(out))["healthy"] is True
