"""A sink's history (``SinkLog.history()``, ``python -m batchlog history``, ``batchlog_history``):
its live batches from the log, its live compactions, and a record of each maintenance operation
run on it (``_batchlog/_history/``), against a real streaming query, rewound and run again.
"""

from __future__ import annotations

import getpass
import json
import socket
import subprocess
import time
from pathlib import Path

import golden_support as gs
import pytest
import rewind_support as rs
from batchlog.reports import SinkHistory
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from rewind_support import _ids_confs, batchlog  # noqa: F401  (the ids sink's compact intervals)
from support import FAULT_MANAGER, cli_here, jars_with_testkit, run_cli, session_conf

BATCHES = 6


def _build(spark: SparkSession, root: Path) -> tuple[Path, Path, Path]:
    inbox, out, ck = root / "in", root / "out", root / "ck"
    for i in range(BATCHES):
        rs.write_input(inbox, i, rs.id_rows(i))
    rs.run_ids_query(spark, inbox, out, ck, mult=1)
    return inbox, out, ck


def _files_by_batch(out: Path) -> dict[int, list[Path]]:
    found: dict[int, list[Path]] = {}
    for f in out.rglob("part-*"):
        if f.is_file():
            found.setdefault(rs.batch_of_name(str(f)), []).append(f)
    return found


def _assert_batches_match_disk(h: SinkHistory, out: Path) -> None:
    on_disk = _files_by_batch(out)
    assert [b.batch_id for b in h.batches] == sorted(on_disk)
    for b in h.batches:
        files = on_disk[b.batch_id]
        assert b.files == len(files)
        assert b.bytes == sum(f.stat().st_size for f in files)
        assert b.time_ms == max(f.stat().st_mtime_ns // 1_000_000 for f in files)


def test_history_shows_batches_compactions_and_who_rewound_and_vacuumed(
    spark: SparkSession, tmp_path: Path
) -> None:
    inbox, out, ck = _build(spark, tmp_path)
    log = batchlog.SinkLog(spark, str(out))
    h = log.history()
    assert h.latest_batch == BATCHES - 1 and h.untagged_files == 0
    _assert_batches_match_disk(h, out)
    # compact interval 3: batches 2 and 5 compacted; the log keeps both files (cleanup delay)
    assert [c.batch_id for c in h.compactions] == [2, 5]
    for c in h.compactions:
        compact = out / "_spark_metadata" / c.file
        assert c.bytes == compact.stat().st_size
        assert c.time_ms == compact.stat().st_mtime_ns // 1_000_000
    assert h.operations == []
    rewound_bytes = sum(b.bytes for b in h.batches if b.batch_id >= 3)

    # dry runs and plans change nothing, and are not history
    batchlog.rewind(spark, str(out), str(ck), 3, dry_run=True, quiet=True)
    batchlog.vacuum(spark, str(out), older_than="0s", quiet=True)
    assert log.history().operations == []
    assert not (out / "_batchlog" / "_history").exists()

    before = int(time.time() * 1000)
    batchlog.rewind(spark, str(out), str(ck), 3, quiet=True)
    batchlog.vacuum(spark, str(out), older_than="0s", dry_run=False, quiet=True)
    after = int(time.time() * 1000)

    h = log.history()
    _assert_batches_match_disk(h, out)
    assert [b.batch_id for b in h.batches] == [0, 1, 2]
    rewind, vacuum = h.operations
    assert rewind.operation == "rewind" and rewind.outcome == "done"
    assert rewind.arguments == {"checkpoint": str(ck), "toBatch": "3", "force": "false"}
    assert rewind.changed == {
        "batches": 3,
        "dataFilesDeleted": 6,
        "dataBytesDeleted": rewound_bytes,
    }
    assert vacuum.operation == "vacuum" and vacuum.outcome == "done"
    assert vacuum.arguments == {"olderThan": "0s", "force": "false"}
    assert vacuum.changed == {"dataFilesDeleted": 0, "orphanFiles": 0}
    for op in (rewind, vacuum):
        assert before <= op.time_ms <= after and 0 <= op.duration_ms <= after - before
        assert op.user == getpass.getuser()
        assert op.host == socket.gethostname()
        assert op.application_id == spark.sparkContext.applicationId
        assert op.batchlog_version == spark._jvm.io.batchlog.BuildInfo.version()  # type: ignore[union-attr]
    assert rewind.time_ms <= vacuum.time_ms
    # one record per operation, written once, hidden from Spark's file index by its `_`
    names = sorted(p.name for p in (out / "_batchlog" / "_history").iterdir())
    assert [n.split("-")[1] for n in names] == ["rewind", "vacuum"]
    assert all(n.startswith("_") and n.endswith(".json") for n in names)

    # the query runs batches 3..5 again: they are back in the history, the operations kept
    rs.run_ids_query(spark, inbox, out, ck, mult=2)
    h = log.history()
    _assert_batches_match_disk(h, out)
    assert [b.batch_id for b in h.batches] == list(range(BATCHES))
    assert [o.operation for o in h.operations] == ["rewind", "vacuum"]
    assert all(b.time_ms >= vacuum.time_ms for b in h.batches if b.batch_id >= 3)
    # plain Spark reads every row once, the rewound batches with the new transformation
    got = sorted(tuple(r) for r in spark.read.parquet(str(out)).select("id", "v").collect())
    assert got == sorted(
        (i, i * (2 if i // 10 >= 3 else 1)) for b in range(6) for i in rs.ids_of_batch(b)
    )

    # each commit recorded its rows (5 a batch: its input file's), its query and its run: the
    # first run wrote batches 0..2, the rewound batches 3..5 are the second run's
    query_id = json.loads((ck / "metadata").read_text())["id"]
    assert [b.rows for b in h.batches] == [5] * BATCHES
    assert [b.query_id for b in h.batches] == [query_id] * BATCHES
    runs = [b.run_id for b in h.batches]
    assert len(set(runs[:3])) == 1 and len(set(runs[3:])) == 1 and runs[0] != runs[3]
    assert all(b.duration_ms is not None and 0 <= b.duration_ms < 120_000 for b in h.batches)
    # counting changes nothing where the commits recorded the rows
    assert log.history(rows=True) == h
    shown = cli_here(spark, "history", str(out)).stdout.splitlines()
    header = next(ln for ln in shown if ln.startswith("time"))
    assert header.split() == [
        "time",
        "event",
        "batch",
        "files",
        "size",
        "rows",
        "took",
        "by",
        "details",
    ]
    batch_rows = [ln.split() for ln in shown if ln[:4].isdigit() and ln.split()[3] == "batch"]
    # date, time, UTC, batch, id, files, size (2), rows, took (2), query (2), run (2)
    assert [r[8] for r in batch_rows] == ["5"] * BATCHES
    assert all(r[10] == "s" and float(r[9]) * 1000 < 120_000 for r in batch_rows)
    assert [r[11:] for r in batch_rows] == [
        ["query", query_id[:8] + ",", "run", run[:8]] for run in runs
    ]

    # the same history as a table, as JSON, and in SQL
    shown = cli_here(spark, "history", str(out))
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].split() == ["sink", str(out)]
    events = [ln.split()[3] for ln in lines if ln[:4].isdigit()]
    assert events.count("batch") == BATCHES and events.count("compaction") == 2
    assert events.count("rewind") == 1 and events.count("vacuum") == 1
    row = next(ln for ln in lines if " rewind " in ln)
    assert f"{getpass.getuser()}@{socket.gethostname()}" in row and "dataFilesDeleted=6" in row
    assert "toBatch=3" in row and row.split()[3] == "rewind"
    as_json = cli_here(spark, "history", str(out), "--json")
    assert json.loads(as_json.stdout) == h.to_dict()
    last_two = cli_here(spark, "history", str(out), "--limit", "2").stdout
    assert "earlier events not shown" in last_two

    rows = spark.sql(f"SELECT * FROM batchlog_history('{out}')").collect()
    assert [r.event for r in rows if r.event not in ("batch", "compaction")] == ["rewind", "vacuum"]
    assert sorted(r.batchId for r in rows if r.event == "batch") == list(range(BATCHES))
    assert sorted(
        (r.batchId, r.rows, r.durationMs, r.queryId, r.runId) for r in rows if r.event == "batch"
    ) == [(b.batch_id, 5, b.duration_ms, query_id, b.run_id) for b in h.batches]
    sql_rewind = next(r for r in rows if r.event == "rewind")
    assert sql_rewind.user == getpass.getuser() and sql_rewind.outcome == "done"
    assert json.loads(sql_rewind.details) == {
        "arguments": rewind.arguments,
        "changed": rewind.changed,
    }
    times = [r.time for r in rows]
    assert times == sorted(times)


def test_a_refused_operation_is_not_history_and_a_non_sink_gets_no_records(
    spark: SparkSession, tmp_path: Path
) -> None:
    _, out, ck = _build(spark, tmp_path)
    for to_batch in (-1, BATCHES + 5):
        with pytest.raises(batchlog.BatchLogError, match="Nothing was changed"):
            batchlog.rewind(spark, str(out), str(ck), to_batch, quiet=True)
    with pytest.raises(batchlog.BatchLogError):
        batchlog.takeover(spark, str(out), str(tmp_path / "no-checkpoint"))
    assert batchlog.SinkLog(spark, str(out)).history().operations == []
    assert not (out / "_batchlog" / "_history").exists()

    empty = tmp_path / "not-a-sink"
    empty.mkdir()
    with pytest.raises(batchlog.NotASinkError):
        batchlog.vacuum(spark, str(empty), dry_run=False, quiet=True)
    with pytest.raises(batchlog.NotASinkError):
        batchlog.SinkLog(spark, str(empty)).history()
    assert list(empty.iterdir()) == []


def test_history_retention_drops_old_operation_records_at_the_next_one(
    spark: SparkSession, tmp_path: Path
) -> None:
    _, out, _ = _build(spark, tmp_path)
    with session_conf(spark, {"spark.batchlog.history.retention": "2s"}):
        batchlog.vacuum(spark, str(out), older_than="1h", dry_run=False, quiet=True)
        batchlog.vacuum(spark, str(out), older_than="2h", dry_run=False, quiet=True)
        assert [
            o.arguments["olderThan"] for o in batchlog.SinkLog(spark, str(out)).history().operations
        ] == [
            "1h",
            "2h",
        ]
        time.sleep(2.5)
        batchlog.vacuum(spark, str(out), older_than="3h", dry_run=False, quiet=True)
        h = batchlog.SinkLog(spark, str(out)).history()
    assert [o.arguments["olderThan"] for o in h.operations] == ["3h"]
    assert h.operations_retention_ms == 2000
    assert len(list((out / "_batchlog" / "_history").iterdir())) == 1
    # the batches' history is the log's, untouched by the records' retention
    assert [b.batch_id for b in h.batches] == list(range(BATCHES))


def test_a_damaged_record_is_skipped_with_the_others_shown(
    spark: SparkSession, tmp_path: Path
) -> None:
    _, out, _ = _build(spark, tmp_path)
    batchlog.vacuum(spark, str(out), older_than="1h", dry_run=False, quiet=True)
    (record,) = (out / "_batchlog" / "_history").iterdir()
    damaged = record.with_name("_0000000000001-repair-damaged.json")
    damaged.write_text('{"operation": "repair", "timeMs": ')
    h = batchlog.SinkLog(spark, str(out)).history()
    assert [o.operation for o in h.operations] == ["vacuum"]
    assert damaged.exists()  # read-only: never removed by a read


def test_sinks_written_before_history_show_their_batches_from_the_log(
    spark: SparkSession,
) -> None:
    with gs.root_lock():
        for name in ("plain", "mixed", "repaired", "retention", "downstream"):
            root = gs.install(name)
            outs = [p.parent for p in root.rglob("_spark_metadata") if p.is_dir()]
            assert outs, name
            for out in outs:
                log = batchlog.SinkLog(spark, str(out))
                h = log.history()
                summary = log.inspect()
                assert h.operations == [], name
                assert [(b.batch_id, b.files, b.bytes) for b in h.batches] == [
                    (b.batch_id, b.files, b.bytes) for b in summary.batches
                ], name
                assert h.untagged_files == summary.untagged_files, name
                assert h.latest_batch == summary.latest_batch, name
                entries = log.entries().collect()
                for b in h.batches:
                    times = [e.modificationTime for e in entries if e.batchId == b.batch_id]
                    assert b.time_ms == max(times), (name, b)
                # written before commits recorded themselves: no rows, run or duration to show,
                # and the rows are counted from the live files on request
                assert all(
                    (b.rows, b.duration_ms, b.query_id, b.run_id) == (None,) * 4 for b in h.batches
                ), name
                if name == "plain":  # counted against plain Spark's rows per file
                    counted = log.history(rows=True).batches
                    batch_of = {e.path: e.batchId for e in entries}
                    per_file = spark.read.parquet(str(out)).groupBy(F.input_file_name()).count()
                    plain: dict[int, int] = {}
                    for f, n in per_file.collect():
                        plain[batch_of[f]] = plain.get(batch_of[f], 0) + n
                    assert sorted((b.batch_id, b.rows) for b in counted) == sorted(plain.items())
            gs.clean(name)


def test_history_over_the_cli_in_its_own_process(spark: SparkSession, tmp_path: Path) -> None:
    _, out, ck = _build(spark, tmp_path)
    batchlog.rewind(spark, str(out), str(ck), 4, quiet=True)
    done = run_cli("history", str(out), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == batchlog.SinkLog(spark, str(out)).history().to_dict()


def test_a_takeover_and_an_adopt_are_recorded_with_what_they_changed(
    spark: SparkSession, tmp_path: Path
) -> None:
    from reliability_support import (
        SINK_CONFS,
        await_query,
        plain_read,
        run_stream,
        sql_conf,
        start_stream,
        write_input,
    )

    out = tmp_path / "out"
    in_a, chk_a, in_b, chk_b = (tmp_path / n for n in ("in-a", "chk-a", "in-b", "chk-b"))
    fed = write_input(in_a, 0, 3, 3)  # query A: batches 0..2
    run_stream(spark, in_a, out, chk_a)
    write_input(in_b, 10, 3, 3)  # query B's batches 0..2: the sink skips them
    with pytest.raises(Exception, match="the sink is written by another query"):
        run_stream(spark, in_b, out, chk_b)
    batchlog.takeover(spark, str(out), str(chk_b))
    (op,) = batchlog.SinkLog(spark, str(out)).history().operations
    assert (op.operation, op.outcome) == ("takeover", "done")
    assert op.arguments == {"checkpoint": str(chk_b), "force": "false"}
    assert (op.changed["done"], op.changed["fromBatch"]) == (1, 3)
    fed += write_input(in_b, 13, 2, 3)
    run_stream(spark, in_b, out, chk_b)  # the new owner writes batches 3, 4
    assert sorted(plain_read(out)["ids"]) == sorted(fed)
    h = batchlog.SinkLog(spark, str(out)).history()
    assert [b.batch_id for b in h.batches] == [0, 1, 2, 3, 4]
    assert [o.operation for o in h.operations] == ["takeover"]

    # a sink plain Spark wrote: adopt tags its entries, and says so in its history
    plain, plain_chk, plain_in = tmp_path / "plain", tmp_path / "plain-chk", tmp_path / "in-p"
    write_input(plain_in, 0, 4, 3)
    vanilla = {**SINK_CONFS, "spark.sql.streaming.commitProtocolClass": rs.VANILLA_PROTOCOL}
    with sql_conf(spark, **vanilla):
        await_query(start_stream(spark, plain_in, plain, plain_chk, "part"), plain)
    before = batchlog.SinkLog(spark, str(plain)).history()
    assert before.operations == []
    adopted = batchlog.adopt(spark, str(plain), quiet=True)
    (op,) = batchlog.SinkLog(spark, str(plain)).history().operations
    assert (op.operation, op.outcome, op.arguments) == ("adopt", "done", {"force": "false"})
    assert op.changed == {
        "entriesTagged": adopted.entries_tagged,
        "entriesUntagged": adopted.entries_untagged,
        "compactFilesRewritten": adopted.compact_files_rewritten,
    }


def _vacuum_with_fault(out: Path, op: str, action: str) -> subprocess.CompletedProcess[str]:
    """``vacuum --apply`` in a CLI process whose store fails (``fail``), or applies and then
    fails (``lose``), the ``op`` calls on the sink's history records."""
    confs = {
        "spark.jars": jars_with_testkit(),
        "spark.sql.streaming.checkpointFileManagerClass": FAULT_MANAGER,
        "spark.batchlog.test.fault.op": op,
        "spark.batchlog.test.fault.pathRegex": r"_batchlog/_history/",
        "spark.batchlog.test.fault.action": action,
    }
    args = [f"--conf={k}={v}" for k, v in confs.items()]
    return run_cli(*args, "vacuum", str(out), "--older-than", "0s", "--apply")


def test_a_record_the_store_refuses_leaves_the_operation_done(
    spark: SparkSession, tmp_path: Path
) -> None:
    inbox, out, _ = _build(spark, tmp_path)
    before = _files_by_batch(out)
    orphan = out / "p=0" / "part-00009-batch-2-00000000-0000-0000-0000-000000000000.c000.parquet"
    orphan.write_bytes(next(iter(before[2])).read_bytes())

    # the store fails every write of the record: the vacuum did its work and says so
    done = _vacuum_with_fault(out, "createAtomic", "fail")
    assert done.returncode == 0, done.stderr[-3000:]
    assert not orphan.exists()
    assert _files_by_batch(out) == before
    assert batchlog.SinkLog(spark, str(out)).history().operations == []
    assert not list((out / "_batchlog").glob("_history/*.json"))

    # the store writes the record and loses its answer: the record is there once
    orphan.write_bytes(next(iter(before[2])).read_bytes())
    done = _vacuum_with_fault(out, "rename", "lose")
    assert done.returncode == 0, done.stderr[-3000:]
    assert not orphan.exists()
    ops = batchlog.SinkLog(spark, str(out)).history().operations
    assert [(o.operation, o.outcome, o.changed["dataFilesDeleted"]) for o in ops] == [
        ("vacuum", "done", 1)
    ]
    got = sorted(r[0] for r in spark.read.parquet(str(out)).select("id").collect())
    assert got == sorted(i for b in range(BATCHES) for i in rs.ids_of_batch(b))
