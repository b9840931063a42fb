"""What the chaos campaign (``bench/run chaos``) found, each as a fixed bug with its own test.

Every test replays the shortest sequence of the campaign's operations that showed the bug, with
the interleaving made deterministic, and asserts exact rows read back by plain Spark.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import batchlog
import pytest
from pyspark.sql import SparkSession
from reliability_support import plain_read, run_stream, write_input


def _commit_files(chk: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (chk / "commits").iterdir() if p.name.isdigit()}


def test_a_zombie_commit_renamed_after_the_rewind_runs_its_batch_again(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Seed 11: a writer paused with its ``commits/3`` written to a temporary file; a rewind to 3
    ran under it; the writer resumed and renamed the file into place. The checkpoint then said
    batch 3 was done while the sink's latest was 2: the restart skipped batch 3's input for good
    (or, with more input, failed at every restart: "the next batch must be 3")."""
    inp, out, chk = tmp_path / "in", tmp_path / "out", tmp_path / "chk"
    fed = write_input(inp, 0, 4, 3)
    run_stream(spark, inp, out, chk)
    late_commit = _commit_files(chk)["3"]
    batchlog.rewind(spark, str(out), str(chk), 3, quiet=True)
    assert sorted(_commit_files(chk)) == ["0", "1", "2"]
    (chk / "commits" / "3").write_bytes(late_commit)  # the zombie's rename, after the rewind

    fed += write_input(inp, 4, 1, 3)
    run_stream(spark, inp, out, chk)
    assert sorted(plain_read(out)["ids"]) == sorted(fed)
    log = batchlog.SinkLog(spark, str(out))
    assert log.latest_batch() == 4
    assert [len(log.files(b)) for b in range(5)] == [3, 3, 3, 3, 3]
    assert batchlog.verify(spark, str(out)).healthy


def test_a_last_batch_without_files_that_repair_cannot_rebuild_runs_again(
    spark: SparkSession, tmp_path: Path
) -> None:
    """``_spark_metadata`` deleted and repaired after a batch that wrote no file: the rebuilt log
    ends one batch below the checkpoint's commits, and every restart was refused ("the next batch
    must be 3")."""
    inp, out, chk = tmp_path / "in", tmp_path / "out", tmp_path / "chk"
    fed = write_input(inp, 0, 3, 3)
    (inp / "in-0003.json").write_text("")  # batch 3 reads no row and writes no file
    os.utime(inp / "in-0003.json", (time.time() - 3600 + 3,) * 2)  # read after file 2
    run_stream(spark, inp, out, chk)
    assert batchlog.SinkLog(spark, str(out)).latest_batch() == 3
    shutil.rmtree(out / "_spark_metadata")
    batchlog.repair(spark, str(out), dry_run=False, quiet=True)
    assert batchlog.SinkLog(spark, str(out)).latest_batch() == 2

    fed += write_input(inp, 4, 2, 3)
    run_stream(spark, inp, out, chk)
    assert sorted(plain_read(out)["ids"]) == sorted(fed)
    assert batchlog.SinkLog(spark, str(out)).latest_batch() == 5
    assert batchlog.verify(spark, str(out)).healthy


def test_a_new_owner_cannot_rewind_below_its_takeover(spark: SparkSession, tmp_path: Path) -> None:
    """Seed 5: after a takeover, a rewind with the new owner's checkpoint took the horizon from
    the checkpoint alone (batch 0). Before the new owner ran it was refused as "not the checkpoint
    and sink of one query"; after, a rewind below the takeover would have deleted the old owner's
    batches and written the new owner's skipped ones instead."""
    out = tmp_path / "out"
    in_a, chk_a, in_b, chk_b = (tmp_path / n for n in ("in-a", "chk-a", "in-b", "chk-b"))
    fed = write_input(in_a, 0, 3, 3)  # query A: batches 0..2
    run_stream(spark, in_a, out, chk_a)
    skipped = write_input(in_b, 10, 3, 3)  # query B's batches 0..2: the sink skips them
    with pytest.raises(Exception, match="the sink is written by another query"):
        run_stream(spark, in_b, out, chk_b)
    batchlog.takeover(spark, str(out), str(chk_b))
    log = batchlog.SinkLog(spark, str(out))
    assert log.inspect(str(chk_b)).horizon.horizon == 3
    with pytest.raises(batchlog.BeyondHorizonError, match="took the sink over at batch 3"):
        batchlog.rewind(spark, str(out), str(chk_b), 2, quiet=True)
    batchlog.rewind(spark, str(out), str(chk_b), 3, quiet=True)  # its first batch: nothing to do

    fed += write_input(in_b, 13, 2, 3)  # B's batches 3, 4
    run_stream(spark, in_b, out, chk_b)
    assert sorted(plain_read(out)["ids"]) == sorted(fed)
    with pytest.raises(batchlog.BeyondHorizonError, match="took the sink over at batch 3"):
        batchlog.rewind(spark, str(out), str(chk_b), 1, quiet=True)
    assert sorted(plain_read(out)["ids"]) == sorted(fed)
    batchlog.rewind(spark, str(out), str(chk_b), 3, quiet=True)
    run_stream(spark, in_b, out, chk_b)
    ids = plain_read(out)["ids"]
    assert sorted(ids) == sorted(fed) and not set(ids) & set(skipped)
    assert batchlog.SinkLog(spark, str(out)).latest_batch() == 4
