"""batchlog.rewind against real streaming queries (file source -> file sink), local[2].

The stateless sink (20 input files, one per batch, v = id, partitioned by p, sink log compacting
every 3 batches, source log every 4) is built once and restored in place before each test; each
test rewinds it, restarts the same query with a changed transformation (v = id * 2) and checks
the output exactly.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import rewind_support as rs
from batchlog.reports import BatchFiles, LogCut, RewindPlanSummary, SourceLogCut
from pyspark.sql import SparkSession

# fixtures shared with the other rewind tests: the session conf and the 20-batch ids sink
from rewind_support import (  # noqa: E402, F401
    N_BATCHES,
    _ids_confs,
    assert_sink_exact,
    batchlog,
    sink,
)


@pytest.mark.parametrize(
    "to_batch",
    [
        pytest.param(7, id="inside-compacted-range"),
        pytest.param(6, id="compact-boundary-minus-1"),
        pytest.param(8, id="compact-boundary"),
        pytest.param(0, id="batch-0"),
        pytest.param(19, id="latest"),
    ],
)
def test_rewind_then_rerun_with_new_transformation(
    spark: SparkSession, sink: rs.IdsSink, to_batch: int
) -> None:
    report = batchlog.rewind(spark, str(sink.out), str(sink.ck), to_batch, quiet=True)
    redone = N_BATCHES - to_batch
    assert report["result"]["toBatch"] == to_batch
    assert report["result"]["dataFilesDeleted"] == 2 * redone

    # right after the rewind: only the files of batches < to_batch, logs and checkpoint cut back
    kept = {p: s for b in range(to_batch) for p, s in sink.files_by_batch[b].items()}
    assert rs.data_files(sink.out) == kept
    assert batchlog.SinkLog(spark, str(sink.out)).latest_batch() == (
        to_batch - 1 if to_batch > 0 else None
    )
    assert rs.log_names(sink.meta) == rs.compact_names(range(to_batch), 3)
    assert rs.ck_ids(sink.ck, "offsets") == list(range(to_batch + 1))
    assert rs.ck_ids(sink.ck, "commits") == list(range(to_batch))
    # the file source logged one file per batch: log offset == batch id
    assert rs.log_names(sink.ck / "sources" / "0") == rs.compact_names(range(to_batch + 1), 4)
    assert not (sink.out / "_batchlog" / "_batchlog-rewind.json").exists()

    rs.run_ids_query(spark, sink.inbox, sink.out, sink.ck, mult=2)
    assert_sink_exact(spark, sink, to_batch, N_BATCHES - 1)
    assert rs.ck_ids(sink.ck, "offsets") == list(range(N_BATCHES))
    assert rs.ck_ids(sink.ck, "commits") == list(range(N_BATCHES))


def test_rewind_to_latest_plus_one_is_a_noop(spark: SparkSession, sink: rs.IdsSink) -> None:
    before = rs.snapshot(sink.out, sink.ck)
    report = batchlog.rewind(spark, str(sink.out), str(sink.ck), N_BATCHES, quiet=True)
    plan = report["plan"]
    assert plan["affectedBatches"] == []
    assert plan["dataFiles"] == 0
    assert plan["sinkLog"]["delete"] == [] and plan["sinkLog"]["rebuild"] == []
    assert plan["sourceLogs"] == []
    assert plan["offsetsToDelete"] == [] and plan["commitsToDelete"] == []
    assert plan["stateFiles"] == [] and plan["removeStateDir"] is False
    assert report["result"]["dataFilesDeleted"] == 0
    # nothing changed but the rewind's one record in the sink's history
    after = rs.snapshot(sink.out, sink.ck)
    (record,) = [p for p in after if "/_batchlog/_history/" in p]
    assert {p: v for p, v in after.items() if p != record} == before
    (op,) = batchlog.SinkLog(spark, str(sink.out)).history().operations
    assert (op.operation, op.changed["batches"], op.changed["dataFilesDeleted"]) == ("rewind", 0, 0)

    # the query goes on: a new input file becomes batch 20, with the new transformation
    rs.write_input(sink.inbox, N_BATCHES, rs.id_rows(N_BATCHES))
    rs.run_ids_query(spark, sink.inbox, sink.out, sink.ck, mult=2)
    assert_sink_exact(spark, sink, N_BATCHES, N_BATCHES)


def test_dry_run_changes_nothing_and_plans_exactly(spark: SparkSession, sink: rs.IdsSink) -> None:
    before = rs.snapshot(sink.out, sink.ck)
    report = batchlog.rewind(spark, str(sink.out), str(sink.ck), 7, dry_run=True, quiet=True)
    assert rs.snapshot(sink.out, sink.ck) == before
    assert report.result is None
    per_batch = {b: sum(sink.files_by_batch[b].values()) for b in range(7, 20)}
    assert report.plan == RewindPlanSummary(
        sink=f"file:{sink.out}",
        checkpoint=f"file:{sink.ck}",
        to_batch=7,
        sink_latest_batch=19,
        offsets_latest=19,
        commits_latest=19,
        horizon=0,
        sink_horizon=0,
        checkpoint_horizon=0,
        resuming=False,
        query_id=report.plan.query_id,
        force=False,
        affected_batches=list(range(7, 20)),
        data_files=26,
        data_bytes=sum(per_batch.values()),
        orphan_files=0,
        data_files_per_batch=[BatchFiles(b, 2, per_batch[b]) for b in range(7, 20)],
        sink_log=LogCut(
            dir=f"file:{sink.meta}",
            keep_up_to=6,
            rebuild=[],
            delete=list(reversed(rs.compact_names(range(7, 20), 3))),
        ),
        source_logs=[
            SourceLogCut(
                dir=f"file:{sink.ck}/sources/0",
                keep_up_to=7,
                rebuild=[],
                delete=list(reversed(rs.compact_names(range(8, 20), 4))),
                source=0,
            )
        ],
        state_files=[],
        state_bytes=0,
        remove_state_dir=False,
        commits_to_delete=list(range(19, 6, -1)),
        offsets_to_delete=list(range(19, 7, -1)),
    )


def test_cli_dry_run_prints_the_plan_and_changes_nothing(sink: rs.IdsSink) -> None:
    before = rs.snapshot(sink.out, sink.ck)
    confs = [f"--conf={k}={v}" for k, v in rs.IDS_CONFS.items()]
    cli = rs.run_cli(
        *confs,
        "rewind",
        str(sink.out),
        "--checkpoint",
        str(sink.ck),
        "--to-batch",
        "7",
        "--dry-run",
    )
    assert cli.returncode == 0, cli.stderr[-3000:]
    assert f"DRY RUN: would rewind file:{sink.out} to batch 7" in cli.stdout
    assert "batches redone  7..19 (13)" in cli.stdout
    assert "offsets/        delete 8..19 (12)" in cli.stdout
    assert "commits/        delete 7..19 (13)" in cli.stdout
    assert "done:" not in cli.stdout
    assert rs.snapshot(sink.out, sink.ck) == before


# ---- refusals -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("to_batch", "fragments"),
    [
        pytest.param(-1, ["Invalid to_batch = -1", ">= 0"], id="negative"),
        pytest.param(21, ["Invalid to_batch = 21", "latest batch is 19", "20 at most"], id="past"),
    ],
)
def test_refuses_out_of_range_to_batch(
    spark: SparkSession, sink: rs.IdsSink, to_batch: int, fragments: list[str]
) -> None:
    before = rs.snapshot(sink.out, sink.ck)
    with pytest.raises(batchlog.InvalidArgumentError) as e:
        batchlog.rewind(spark, str(sink.out), str(sink.ck), to_batch, quiet=True)
    assert all(f in str(e.value) for f in fragments), str(e.value)
    assert rs.snapshot(sink.out, sink.ck) == before


def test_refuses_a_path_that_is_not_a_sink(spark: SparkSession, sink: rs.IdsSink) -> None:
    before = rs.snapshot(sink.out, sink.ck, sink.inbox)
    with pytest.raises(batchlog.NotASinkError) as e:
        batchlog.rewind(spark, str(sink.inbox), str(sink.ck), 7, quiet=True)
    assert f"{sink.inbox} is not a file-sink output" in str(e.value)
    assert "_spark_metadata" in str(e.value)
    assert rs.snapshot(sink.out, sink.ck, sink.inbox) == before


def test_refuses_a_path_that_is_not_a_checkpoint(
    spark: SparkSession, sink: rs.IdsSink, tmp_path: Path
) -> None:
    (tmp_path / "offsets").mkdir()  # an offsets dir alone is not a checkpoint
    before = rs.snapshot(sink.out, sink.ck, tmp_path)
    for wrong in (tmp_path, sink.out):
        with pytest.raises(batchlog.NotACheckpointError) as e:
            batchlog.rewind(spark, str(sink.out), str(wrong), 7, quiet=True)
        assert f"{wrong} is not a streaming query checkpoint" in str(e.value)
        assert "checkpointLocation" in str(e.value)
    assert rs.snapshot(sink.out, sink.ck, tmp_path) == before


def test_refuses_past_the_checkpoint_horizon(spark: SparkSession, tmp_path: Path) -> None:
    inbox, out, ck = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    for i in range(8):
        rs.write_input(inbox, i, rs.id_rows(i))
    with rs.confs(spark, {rs.MIN_BATCHES: "3"}):
        rs.run_ids_query(spark, inbox, out, ck, mult=1)
        # Spark purged offsets/ and commits/ below batch 4 (latest 7 - minBatchesToRetain 3)
        assert rs.ck_ids(ck, "offsets") == [4, 5, 6, 7]
        assert rs.ck_ids(ck, "commits") == [4, 5, 6, 7]
        before = rs.snapshot(out, ck)
        for to_batch in (0, 3, 4):
            with pytest.raises(batchlog.BeyondHorizonError) as e:
                batchlog.rewind(spark, str(out), str(ck), to_batch, quiet=True)
            msg = str(e.value)
            assert f"Cannot rewind to batch {to_batch}" in msg
            assert "the oldest batch a rewind can reach is 5" in msg
            assert "spark.sql.streaming.minBatchesToRetain = 3" in msg
            assert "raise spark.sql.streaming.minBatchesToRetain" in msg
        assert rs.snapshot(out, ck) == before
        plan = batchlog.rewind(spark, str(out), str(ck), 5, dry_run=True, quiet=True)["plan"]
        assert (plan["horizon"], plan["checkpointHorizon"]) == (5, 5)
        assert rs.snapshot(out, ck) == before
