"""verify, repair and vacuum on real sinks written by real streaming queries."""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import uuid
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from reliability_support import (
    SINK_CONFS,
    TAGGED,
    batchlog,
    check_log,
    local_path,
    read_ids,
    run_cli,
    run_stream,
    snapshot,
    spark_session,
    sql_conf,
    write_input,
)
from support import cli_here

spark = spark_session  # the module's session fixture
INTERVAL_KEY = "spark.sql.streaming.fileSink.log.compactInterval"


def _sink(spark: SparkSession, tmp: Path, files: int) -> tuple[Path, Path, Path, list[int]]:
    inp, out, chk = tmp / "in", tmp / "out", tmp / "chk"
    ids = write_input(inp, 0, files, 4)
    run_stream(spark, inp, out, chk)
    return inp, out, chk, ids


def _logged(out: Path) -> list[dict]:
    return check_log(out, 3)["live"]


def _copy_as_orphan(src: Path, batch: int, age_s: float) -> Path:
    """A copy of data file ``src`` renamed as another task attempt of ``batch``."""
    name = TAGGED.sub(f"part-00000-batch-{batch}-{uuid.uuid4()}", src.name, count=1)
    dst = src.with_name(name)
    shutil.copyfile(src, dst)
    t = time.time() - age_s
    os.utime(dst, (t, t))
    return dst


def test_verify_healthy_then_missing_and_resized_files(spark: SparkSession, tmp_path: Path):
    _, out, _, ids = _sink(spark, tmp_path, 4)
    r = batchlog.verify(spark, str(out))
    assert r["healthy"] is True
    assert (r["latestBatch"], r["orphanCount"], r["missingCount"]) == (3, 0, 0)
    assert r["liveFiles"] == len(_logged(out))

    live = _logged(out)
    gone, resized = local_path(live[0]["path"]), local_path(live[-1]["path"])
    gone.unlink()
    with open(resized, "ab") as f:
        f.write(b"junk")
    orphan = _copy_as_orphan(local_path(live[1]["path"]), 1, 0)
    r = batchlog.verify(spark, str(out))
    assert r["healthy"] is False
    assert [e["path"] for e in r["missing"]] == [live[0]["path"]]
    assert [(e["path"], e["size"], e["actualSize"]) for e in r["sizeMismatch"]] == [
        (live[-1]["path"], live[-1]["size"], live[-1]["size"] + 4)
    ]
    assert [Path(o["path"].removeprefix("file:")) for o in r["orphans"]] == [orphan]
    assert r["orphans"][0]["batchId"] == 1

    cli = cli_here(spark, "verify", str(out))
    assert cli.returncode == 1, cli.stderr[-2000:]
    assert "UNHEALTHY" in cli.stdout
    assert re.search(r"missing \(logged, not on disk\)\s+1\s", cli.stdout), cli.stdout
    assert re.search(r"orphans \(on disk, not logged\)\s+1\s", cli.stdout), cli.stdout
    assert gone.name in cli.stdout and orphan.name in cli.stdout


def test_repair_rebuilds_a_deleted_log_and_the_query_continues(spark: SparkSession, tmp_path: Path):
    inp, out, chk, ids = _sink(spark, tmp_path, 5)  # batches 0..4: 2.compact, 3, 4
    before = {e["path"]: e["batchId"] for e in _logged(out)}
    shutil.rmtree(out / "_spark_metadata")

    # Without its log the sink cannot go on: batch 5 must compact and 2.compact is gone.
    ids += write_input(inp, 5, 1, 4)
    with pytest.raises(Exception, match=r"_spark_metadata/2\.compact"):
        run_stream(spark, inp, out, chk)

    snap = snapshot(out)
    # The log is gone; the sink record, in _batchlog/, gives the query's interval, 3.
    with sql_conf(spark, **SINK_CONFS):
        dry = batchlog.repair(spark, str(out), dry_run=True)
    assert snapshot(out) == snap, "a dry run changed something"
    assert (dry["logExists"], dry["needed"], dry["written"]) == (True, True, False)
    # batch 5's files were written before its commit failed, and deleted when it failed
    assert not list(out.rglob("part-*-batch-5-*"))
    assert dry["latestBatch"] == 4
    assert [f["name"] for f in dry["logFiles"]] == ["2.compact", "3", "4"]
    assert dry["untaggedCount"] == 0 and dry["suspectBatches"] == []

    with sql_conf(spark, **SINK_CONFS):
        r = batchlog.repair(spark, str(out))
    assert r["written"] is True
    assert r.get("movedAside") is None  # the failed run left an empty log: nothing to keep
    state = check_log(out, 3)
    assert state["latest"] == 4
    rebuilt = {e["path"]: e["batchId"] for e in state["live"]}
    assert rebuilt == before
    # the rebuilt compact file has its index, as a compaction writes it: nothing is rebuilt in
    # memory, and reads of a batch in it seek
    assert (out / "_spark_metadata" / "2.compact.index").is_file()
    report = batchlog.verify(spark, str(out))
    assert (report["healthy"], report["indexesRebuiltInMemory"]) == (True, 0), report

    # The checkpoint continues: batch 5 (planned, never committed) runs again, then 6.
    ids += write_input(inp, 6, 1, 4)
    run_stream(spark, inp, out, chk)
    assert check_log(out, 3)["latest"] == 6
    assert read_ids(spark, out) == sorted(ids)
    assert batchlog.repair(spark, str(out))["written"] is False  # healthy: nothing to do


def test_repair_reports_untagged_files_and_cli_dry_run(spark: SparkSession, tmp_path: Path):
    _, out, _, ids = _sink(spark, tmp_path, 2)
    live = _logged(out)
    stray = local_path(live[0]["path"]).with_name("part-00000-not-tagged.snappy.parquet")
    shutil.copyfile(local_path(live[0]["path"]), stray)
    shutil.rmtree(out / "_spark_metadata")
    snap = snapshot(out)
    cli = run_cli("--conf", f"{INTERVAL_KEY}=3", "repair", str(out), "--dry-run")
    assert cli.returncode == 0, cli.stderr[-2000:]
    assert snapshot(out) == snap
    assert "log             missing" in cli.stdout
    assert "compaction      every 3 batches" in cli.stdout
    assert "not batch-tagged (left out, not guessed): 1 files" in cli.stdout
    assert stray.name in cli.stdout
    assert "would write 2 log files" in cli.stdout, cli.stdout
    n1 = sum(1 for e in live if e["batchId"] == 1)
    assert re.search(rf"^1\s+1\s+{n1}$", cli.stdout, re.M), cli.stdout

    with sql_conf(spark, **SINK_CONFS):
        r = batchlog.repair(spark, str(out))
    assert r["written"] is True and r.get("movedAside") is None
    assert [f["name"] for f in r["logFiles"]] == ["0", "1"]
    assert sorted(e["path"] for e in _logged(out)) == sorted(e["path"] for e in live)
    assert read_ids(spark, out) == sorted(ids)
    assert [o["path"] for o in batchlog.verify(spark, str(out))["orphans"]] == [
        "file:" + str(stray)
    ]


def test_vacuum_deletes_only_old_orphans_of_finished_batches(spark: SparkSession, tmp_path: Path):
    _, out, _, ids = _sink(spark, tmp_path, 4)  # latest batch 3
    live = _logged(out)
    src = local_path(next(e for e in live if e["batchId"] == 1)["path"])
    old = _copy_as_orphan(src, 1, 2 * 3600)
    recent = _copy_as_orphan(src, 1, 0)
    running = _copy_as_orphan(src, 4, 2 * 3600)  # batch 4 = latest + 1: may be running ...
    size = src.stat().st_size
    lease = out / "_batchlog" / "_batchlog-lease.json"  # ... as a writer is live
    lease.parent.mkdir(exist_ok=True)
    now_ms = int(time.time() * 1000)
    lease.write_text(
        json.dumps(
            {
                "queryId": "q",
                "runId": "r",
                "host": "elsewhere",
                "pid": 1,
                "batchId": 4,
                "refreshedAtMs": now_ms,
                "timeoutMs": 3_600_000,
            }
        )
    )

    dry = batchlog.vacuum(spark, str(out), older_than="1h")
    assert dry["dryRun"] is True and dry["deletedFiles"] == 0
    assert (dry["orphanFiles"], dry["orphanBytes"]) == (3, 3 * size)
    assert (dry["candidateFiles"], dry["candidateBytes"]) == (1, size)
    assert [c["path"] for c in dry["candidates"]] == ["file:" + str(old)]
    assert (dry["skippedRecentFiles"], dry["skippedRunningFiles"]) == (1, 1)
    assert old.exists()

    cli = cli_here(spark, "vacuum", str(out), "--older-than", "1h")
    assert cli.returncode == 0, cli.stderr[-2000:]
    assert re.search(r"would delete\s+1\s", cli.stdout) and "DRY RUN" in cli.stdout
    assert old.exists()

    r = batchlog.vacuum(spark, str(out), older_than="1h", dry_run=False)
    assert r["deletedFiles"] == 1
    assert not old.exists() and recent.exists() and running.exists()
    assert all(local_path(e["path"]).exists() for e in live)
    assert batchlog.verify(spark, str(out))["healthy"] is True
    assert read_ids(spark, out) == sorted(ids)

    # with no live writer, batch 4's file is what a killed or refused writer left: it goes
    lease.unlink()
    r = batchlog.vacuum(spark, str(out), older_than="1h", dry_run=False)
    assert (r["writerLive"], r["deletedFiles"], r["skippedRunningFiles"]) == (False, 1, 0)
    assert not running.exists() and recent.exists()
    assert read_ids(spark, out) == sorted(ids)

    with pytest.raises(batchlog.InvalidArgumentError, match="older_than"):
        batchlog.vacuum(spark, str(out), older_than="soon")
