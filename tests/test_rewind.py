"""batchlog.rewind against real streaming queries (file source -> file sink), local[2].

The stateless sink (20 input files, one per batch, v = id, partitioned by p, sink log compacting
every 3 batches, source log every 4) is built once and restored in place before each test; each
test rewinds it, restarts the same query with a changed transformation (v = id * 2) and checks
the output exactly.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import rewind_support as rs
from conftest import read_back_plain
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

# fixtures shared with the other rewind tests: the session conf and the 20-batch ids sink
from rewind_support import N_BATCHES, _ids_confs, batchlog, sink  # noqa: E402, F401


def assert_sink_exact(spark: SparkSession, sink: rs.IdsSink, to_batch: int, last: int) -> None:
    """After a rewind to ``to_batch`` and a re-run with v = id*2 up to batch ``last``."""
    df = spark.read.parquet(str(sink.out)).withColumn("f", F.input_file_name())
    got = [tuple(r) for r in df.select("id", "p", "v", "f").collect()]
    # every row exactly once, old transformation below to_batch and the new one from it
    assert sorted(r[:3] for r in got) == sink.expected(to_batch, last)
    # and each row sits in a data file named after the batch that read its input file
    assert all(rs.batch_of_name(r[3]) == r[0] // 10 for r in got)

    log = batchlog.SinkLog(spark, str(sink.out))
    assert log.latest_batch() == last
    assert log.batches() == list(range(last + 1))
    # files of the batches before to_batch are the very files the first run wrote
    pristine = rs.snapshot(sink.pristine / "out")
    for b in range(min(to_batch, last + 1)):
        files = {rs.local(p): os.path.getsize(rs.local(p)) for p in log.files(b)}
        assert files == sink.files_by_batch[b]
        for p in files:
            pp = str(sink.pristine / "out" / os.path.relpath(p, sink.out))
            st = os.stat(p)
            assert (st.st_size, st.st_mtime_ns) == pristine[pp]
    # files of the re-run batches are new ones, two per batch (p=0, p=1), named after the batch
    for b in range(to_batch, last + 1):
        files = [rs.local(p) for p in log.files(b)]
        assert len(files) == 2
        assert {rs.batch_of_name(p) for p in files} == {b}
        assert not set(files) & set(sink.files_by_batch.get(b, {}))

    # the raw log: every live line carries its batch as the last field, matching the file name,
    # and the live entries are exactly the data files on disk (nothing orphaned or dangling)
    entries = rs.raw_live_entries(sink.meta)
    assert all(list(e)[-1] == "batchId" for e in entries)
    assert all(e["batchId"] == rs.batch_of_name(e["path"]) for e in entries)
    assert {rs.local(e["path"]): e["size"] for e in entries} == rs.data_files(sink.out)
    assert rs.log_names(sink.meta) == rs.compact_names(range(last + 1), 3)


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
    assert not (sink.meta / "batchlog-rewind.json").exists()

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
    assert rs.snapshot(sink.out, sink.ck) == before

    # the query goes on: a new input file becomes batch 20, with the new transformation
    rs.write_input(sink.inbox, N_BATCHES, rs.id_rows(N_BATCHES))
    rs.run_ids_query(spark, sink.inbox, sink.out, sink.ck, mult=2)
    assert_sink_exact(spark, sink, N_BATCHES, N_BATCHES)


def test_dry_run_changes_nothing_and_plans_exactly(spark: SparkSession, sink: rs.IdsSink) -> None:
    before = rs.snapshot(sink.out, sink.ck)
    report = batchlog.rewind(spark, str(sink.out), str(sink.ck), 7, dry_run=True, quiet=True)
    assert rs.snapshot(sink.out, sink.ck) == before
    assert report["result"] is None

    plan = report["plan"]
    assert plan["sink"] == f"file:{sink.out}"
    assert plan["checkpoint"] == f"file:{sink.ck}"
    assert plan["toBatch"] == 7
    assert (plan["sinkLatestBatch"], plan["offsetsLatest"], plan["commitsLatest"]) == (19, 19, 19)
    assert (plan["horizon"], plan["sinkHorizon"], plan["checkpointHorizon"]) == (0, 0, 0)
    assert plan["resuming"] is False
    assert plan["affectedBatches"] == list(range(7, 20))
    assert plan["dataFiles"] == 26
    assert plan["orphanFiles"] == 0
    per_batch = {b: sum(sink.files_by_batch[b].values()) for b in range(7, 20)}
    assert plan["dataBytes"] == sum(per_batch.values())
    assert plan["dataFilesPerBatch"] == [
        {"batchId": b, "files": 2, "bytes": per_batch[b]} for b in range(7, 20)
    ]
    assert plan["sinkLog"] == {
        "dir": f"file:{sink.meta}",
        "keepUpTo": 6,
        "rebuild": [],
        "delete": list(reversed(rs.compact_names(range(7, 20), 3))),
    }
    assert plan["sourceLogs"] == [
        {
            "source": 0,
            "dir": f"file:{sink.ck}/sources/0",
            "keepUpTo": 7,
            "rebuild": [],
            "delete": list(reversed(rs.compact_names(range(8, 20), 4))),
        }
    ]
    assert plan["offsetsToDelete"] == list(range(19, 7, -1))
    assert plan["commitsToDelete"] == list(range(19, 6, -1))
    assert plan["stateFiles"] == [] and plan["stateBytes"] == 0
    assert plan["removeStateDir"] is False


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


# ---- stateful ---------------------------------------------------------------------------------

WINDOW_FILES = 12


def window_input(inbox: Path) -> None:
    # file i: ts i*10 .. i*10+5 (seconds), k = ts % 2
    for i in range(WINDOW_FILES):
        rs.write_input(inbox, i, [{"ts": i * 10 + j, "k": j % 2} for j in range(6)])


STATE_VERSION = re.compile(r"^(\d+)(?:_[0-9a-fA-F-]+)?\.(delta|snapshot|zip|changelog)(\.crc)?$")
#: RocksDB checkpoint format v2 (V_<uuid>.zip, located through commits/N-1's stateUniqueIds)
FORMAT_V2 = {"spark.sql.streaming.stateStore.checkpointFormatVersion": "2"}


def state_versions(ck: Path) -> list[int]:
    versions = []
    for _dir, _, names in os.walk(ck / "state"):
        versions += [int(m.group(1)) for n in names if (m := STATE_VERSION.match(n))]
    return sorted(set(versions))


@pytest.mark.parametrize(
    "provider",
    [
        pytest.param({rs.PROVIDER: rs.HDFS}, id="hdfs"),
        pytest.param({rs.PROVIDER: rs.ROCKSDB, rs.CHANGELOG: "true"}, id="rocksdb-changelog"),
        pytest.param(
            {rs.PROVIDER: rs.ROCKSDB, rs.CHANGELOG: "true", **FORMAT_V2}, id="rocksdb-format-v2"
        ),
    ],
)
def test_stateful_rewind_replays_exactly(
    spark: SparkSession, tmp_path: Path, provider: dict[str, str | None]
) -> None:
    inbox, out, ck = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    window_input(inbox)
    with rs.confs(spark, provider):
        rs.run_window_query(spark, inbox, out, ck)
    reference = rs.rows_of(spark.read.parquet(str(out)), "w", "k", "count")
    # final watermark 115 - 5 = 110: windows ending at or before it, 6 rows per window and key
    assert reference == [(w, k, 6) for w in (0, 20, 40, 60, 80) for k in (0, 1)]
    latest = batchlog.SinkLog(spark, str(out)).latest_batch()
    offsets, commits = rs.ck_ids(ck, "offsets"), rs.ck_ids(ck, "commits")
    # the checkpoint format version is not recorded in the checkpoint: whatever reads or runs
    # against a v2 checkpoint needs the setting
    fmt = {k: v for k, v in provider.items() if k in FORMAT_V2}
    with rs.confs(spark, fmt):
        state_before = rs.rows_of(spark.read.format("statestore").load(str(ck)), "key", "value")
    assert state_before  # window 100 is still open in the state

    to_batch = 6
    report = batchlog.rewind(spark, str(out), str(ck), to_batch, quiet=True)
    plan = report["plan"]
    assert plan["removeStateDir"] is False
    assert plan["stateFiles"]
    assert all(
        int(STATE_VERSION.match(os.path.basename(p)).group(1)) > to_batch  # type: ignore[union-attr]
        for p in plan["stateFiles"]
    )
    assert max(state_versions(ck)) == to_batch
    assert rs.ck_ids(ck, "offsets") == list(range(to_batch + 1))
    assert rs.ck_ids(ck, "commits") == list(range(to_batch))

    # the provider is read from offsets/N: restart with the session default to prove it
    with rs.confs(spark, fmt):
        rs.run_window_query(spark, inbox, out, ck)
    assert rs.rows_of(spark.read.parquet(str(out)), "w", "k", "count") == reference
    assert batchlog.SinkLog(spark, str(out)).latest_batch() == latest
    assert rs.ck_ids(ck, "offsets") == offsets and rs.ck_ids(ck, "commits") == commits
    with rs.confs(spark, fmt):
        state_after = rs.rows_of(spark.read.format("statestore").load(str(ck)), "key", "value")
    assert state_after == state_before


# ---- crash in the middle of a rewind ----------------------------------------------------------

CRASH_TO = 16


@pytest.mark.parametrize(
    "step", ["intent", "fence", "data-files", "sink-log", "source-logs", "commits"]
)
def test_crash_mid_rewind_refuses_writes_then_resumes(
    spark: SparkSession, sink: rs.IdsSink, step: str, testkit_jar: str
) -> None:
    cli = rs.run_cli(
        *rs.halt_after_rewind_step_confs(step),
        *[f"--conf={k}={v}" for k, v in rs.IDS_CONFS.items()],
        "rewind",
        str(sink.out),
        "--checkpoint",
        str(sink.ck),
        "--to-batch",
        str(CRASH_TO),
    )
    # the JVM halted right after the step: the CLI's Python process loses it and fails
    assert cli.returncode != 0
    assert f"rewind step '{step}' done" in cli.stderr
    nxt = rs.REWIND_STEPS[rs.REWIND_STEPS.index(step) + 1]
    assert f"rewind step '{nxt}' done" not in cli.stderr
    assert "Py4JNetworkError" in cli.stderr
    assert "done:" not in cli.stdout
    assert (sink.meta / "batchlog-rewind.json").exists()

    # a different rewind is refused while the intent exists, changing nothing
    before = rs.snapshot(sink.out, sink.ck)
    with pytest.raises(batchlog.RewindInProgressError) as e:
        batchlog.rewind(spark, str(sink.out), str(sink.ck), CRASH_TO - 1, quiet=True)
    assert f"being rewound to batch {CRASH_TO}" in str(e.value)
    assert rs.snapshot(sink.out, sink.ck) == before

    # (a) the query, given new input so it has a batch to write, fails on the half-rewound sink
    rs.write_input(sink.inbox, N_BATCHES, rs.id_rows(N_BATCHES))
    with pytest.raises(StreamingQueryException) as qe:
        rs.run_ids_query(spark, sink.inbox, sink.out, sink.ck, mult=2)
    assert "being rewound" in str(qe.value), str(qe.value)[:3000]

    # (b) the same rewind, re-run, finishes the job; the query then writes every row once
    report = batchlog.rewind(spark, str(sink.out), str(sink.ck), CRASH_TO, quiet=True)
    assert report["plan"]["resuming"] is True
    assert not (sink.meta / "batchlog-rewind.json").exists()
    rs.run_ids_query(spark, sink.inbox, sink.out, sink.ck, mult=2)
    assert_sink_exact(spark, sink, CRASH_TO, N_BATCHES)


def test_crash_resumed_by_the_cli(spark: SparkSession, sink: rs.IdsSink, testkit_jar: str) -> None:
    args = ["rewind", str(sink.out), "--checkpoint", str(sink.ck), "--to-batch", str(CRASH_TO)]
    confs = [f"--conf={k}={v}" for k, v in rs.IDS_CONFS.items()]
    crashed = rs.run_cli(*rs.halt_after_rewind_step_confs("offsets"), *confs, *args)
    assert crashed.returncode != 0
    assert "rewind step 'offsets' done" in crashed.stderr
    assert "rewind step 'done' done" not in crashed.stderr
    resumed = rs.run_cli(*confs, *args)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "(resuming an unfinished rewind)" in resumed.stdout
    assert f"Restart the query with the same checkpoint to re-run batch {CRASH_TO}" in (
        resumed.stdout
    )
    assert not (sink.meta / "batchlog-rewind.json").exists()
    rs.run_ids_query(spark, sink.inbox, sink.out, sink.ck, mult=2)
    assert_sink_exact(spark, sink, CRASH_TO, N_BATCHES - 1)


@pytest.mark.parametrize("step", ["fence", "sink-log", "state", "source-logs"])
def test_crash_mid_rewind_of_a_windowed_query_then_resume_replays_exactly(
    spark: SparkSession, tmp_path: Path, step: str, testkit_jar: str
) -> None:
    """A SIGKILL-like halt of the rewind command after each step of a stateful rewind, then the
    same rewind re-run: the windowed counts come out exactly as before the rewind."""
    inbox, out, ck = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    window_input(inbox)
    rs.run_window_query(spark, inbox, out, ck)
    reference = rs.rows_of(spark.read.parquet(str(out)), "w", "k", "count")
    args = ["rewind", str(out), "--checkpoint", str(ck), "--to-batch", "6"]
    crashed = rs.run_cli(*rs.halt_after_rewind_step_confs(step), *args)
    assert crashed.returncode != 0 and f"rewind step '{step}' done" in crashed.stderr
    assert (out / "_spark_metadata" / "batchlog-rewind.json").exists()
    report = batchlog.rewind(spark, str(out), str(ck), 6, quiet=True)
    assert report["plan"]["resuming"] is True
    rs.run_window_query(spark, inbox, out, ck)
    assert rs.rows_of(spark.read.parquet(str(out)), "w", "k", "count") == reference
    (plain,) = read_back_plain([("parquet", str(out))])  # plain Spark, no batchlog jar
    assert sorted((r["w"], r["k"], r["count"]) for r in plain["rows"]) == reference
