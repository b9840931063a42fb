"""batchlog.rewind of stateful queries (windowed counts, each state store provider), and rewinds
cut short by a halt of their JVM after each step (the test kit's ``HaltAfterRewindStep``), then
re-run: the sink refuses writes until the same rewind finishes it, and the output comes out exact.

Uses the 20-batch stateless ids sink of ``rewind_support`` (built once, restored per test).
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import rewind_support as rs
from conftest import read_back_plain
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

# fixtures shared with the other rewind tests: the session conf and the 20-batch ids sink
from rewind_support import (  # noqa: E402, F401
    N_BATCHES,
    _ids_confs,
    assert_sink_exact,
    batchlog,
    sink,
)
from support import MAINTENANCE_S

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
    # the state store maintenance of the stopped query (every MAINTENANCE_S here) uploads a
    # RocksDB snapshot late: the rewind waited for it, so none reappears above the target
    time.sleep(2 * MAINTENANCE_S)
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
    assert (sink.out / "_batchlog" / "_batchlog-rewind.json").exists()

    # a different rewind is refused while the intent exists, changing nothing
    before = rs.snapshot(sink.out, sink.ck)
    with pytest.raises(batchlog.RewindInProgressError) as e:
        batchlog.rewind(spark, str(sink.out), str(sink.ck), CRASH_TO - 1, quiet=True)
    assert f"being rewound to batch {CRASH_TO}" in str(e.value)
    assert rs.snapshot(sink.out, sink.ck) == before

    # (a) the query, given new input so it has batches to write, fails on the half-rewound sink,
    # as it starts (HeadStart), before Spark's sink could skip the log id the rewind claimed.
    rs.write_input(sink.inbox, N_BATCHES, rs.id_rows(N_BATCHES))
    rs.write_input(sink.inbox, N_BATCHES + 1, rs.id_rows(N_BATCHES + 1))
    before = rs.snapshot(sink.out, sink.ck)
    with pytest.raises(StreamingQueryException) as qe:
        rs.run_ids_query(spark, sink.inbox, sink.out, sink.ck, mult=2)
    assert "being rewound" in str(qe.value), str(qe.value)[:3000]
    assert rs.snapshot(sink.out, sink.ck) == before  # no batch ran, none was skipped

    # (b) the same rewind, re-run, finishes the job; the query then writes every row once
    report = batchlog.rewind(spark, str(sink.out), str(sink.ck), CRASH_TO, quiet=True)
    assert report["plan"]["resuming"] is True
    assert not (sink.out / "_batchlog" / "_batchlog-rewind.json").exists()
    rs.run_ids_query(spark, sink.inbox, sink.out, sink.ck, mult=2)
    assert_sink_exact(spark, sink, CRASH_TO, N_BATCHES + 1)


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
    assert not (sink.out / "_batchlog" / "_batchlog-rewind.json").exists()
    rs.run_ids_query(spark, sink.inbox, sink.out, sink.ck, mult=2)
    assert_sink_exact(spark, sink, CRASH_TO, N_BATCHES - 1)


@dataclass
class WindowSink:
    """The windowed query's sink and checkpoint (``WINDOW_FILES`` batches), built once per module
    and put back in place, as built, before each test (``rs.Pristine``); ``reference``: its rows."""

    pristine: rs.Pristine
    reference: list[tuple[Any, ...]]

    @property
    def out(self) -> Path:
        return self.pristine.work / "out"

    @property
    def ck(self) -> Path:
        return self.pristine.work / "ck"


@pytest.fixture(scope="module")
def built_window_sink(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> WindowSink:
    work = tmp_path_factory.mktemp("window-sink")
    window_input(work / "in")
    with rs.confs(spark, rs.IDS_CONFS):  # as every test of the module runs (_ids_confs)
        rs.run_window_query(spark, work / "in", work / "out", work / "ck")
    reference = rs.rows_of(spark.read.parquet(str(work / "out")), "w", "k", "count")
    return WindowSink(rs.Pristine.save(work, ["out", "ck"]), reference)


@pytest.fixture
def window_sink(built_window_sink: WindowSink) -> WindowSink:
    built_window_sink.pristine.restore()
    return built_window_sink


@pytest.mark.parametrize("step", ["fence", "sink-log", "state", "source-logs"])
def test_crash_mid_rewind_of_a_windowed_query_then_resume_replays_exactly(
    spark: SparkSession, window_sink: WindowSink, step: str, testkit_jar: str
) -> None:
    """A SIGKILL-like halt of the rewind command after each step of a stateful rewind, then the
    same rewind re-run: the windowed counts come out exactly as before the rewind."""
    inbox, out, ck = window_sink.pristine.work / "in", window_sink.out, window_sink.ck
    reference = window_sink.reference
    args = ["rewind", str(out), "--checkpoint", str(ck), "--to-batch", "6"]
    crashed = rs.run_cli(*rs.halt_after_rewind_step_confs(step), *args)
    assert crashed.returncode != 0 and f"rewind step '{step}' done" in crashed.stderr
    assert (out / "_batchlog" / "_batchlog-rewind.json").exists()
    report = batchlog.rewind(spark, str(out), str(ck), 6, quiet=True)
    assert report["plan"]["resuming"] is True
    rs.run_window_query(spark, inbox, out, ck)
    assert rs.rows_of(spark.read.parquet(str(out)), "w", "k", "count") == reference
    (plain,) = read_back_plain([("parquet", str(out))])  # plain Spark, no batchlog jar
    assert sorted((r["w"], r["k"], r["count"]) for r in plain["rows"]) == reference
