"""Crash test with real processes: a spark-submit driver writing a batch-tagged sink is killed with
SIGKILL at random points (mid-batch, mid-compaction, during start-up) and restarted with the same
checkpoint until all input is processed.

After every kill the log on disk is checked (complete files only, every line tagged with its batch,
every live logged file present with its size); after every run that completes, plain Spark (a
process without the batchlog jar) must read every input record exactly once.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest
from reliability_support import (
    APPS,
    FAULT_MANAGER,
    batchlog,  # imported there, after <repo>/python is first on sys.path
    check_log,
    plain_read,
    poll,
    spark_submit,
    start_driver,
    write_input,
)

COMPACT_INTERVAL = 3
ROUNDS = 2
FILES_PER_ROUND = 14
ROWS_PER_FILE = 5
MIN_KILLS = 12  # each a driver JVM started (about 5 s of CPU); the kinds take turns
KINDS = ["mid-batch", "mid-compaction", "start-up"]
STALL_MS = 4000
COMPACT_FILE_REGEX = r"_spark_metadata/\d+\.compact$"
SEED = int(os.environ.get("BATCHLOG_CRASH_SEED", "20261122"))


def _cmd(inp: Path, out: Path, chk: Path, jars: str, stall_compact: bool) -> list[str]:
    confs = {
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.streaming.commitProtocolClass": batchlog.COMMIT_PROTOCOL_CLASS,
        "spark.sql.streaming.fileSink.log.compactInterval": str(COMPACT_INTERVAL),
        "spark.sql.streaming.fileSink.log.cleanupDelay": "0",
        "spark.sql.streaming.minBatchesToRetain": "2",
        # Through the Hadoop conf (spark.hadoop.*), where Spark looks the class up.
        "spark.hadoop.spark.sql.streaming.checkpointFileManagerClass": FAULT_MANAGER,
    }
    if stall_compact:
        # Hold every compact file between "fully written to its temp file" and "published":
        # a kill in this window is a kill in the middle of a compaction.
        confs.update(
            {
                "spark.hadoop.spark.batchlog.test.fault.op": "rename",
                "spark.hadoop.spark.batchlog.test.fault.pathRegex": COMPACT_FILE_REGEX,
                "spark.hadoop.spark.batchlog.test.fault.action": "stall",
                "spark.hadoop.spark.batchlog.test.fault.stallMs": str(STALL_MS),
            }
        )
    cmd = [spark_submit(), "--master", "local[2]", "--jars", jars]
    for k, v in confs.items():
        cmd += ["--conf", f"{k}={v}"]
    return cmd + [str(APPS / "crash_stream_app.py"), str(inp), str(out), str(chk)]


def _names(d: Path) -> set[str]:
    return set(os.listdir(d)) if d.is_dir() else set()


def _kill(p: subprocess.Popen[bytes]) -> bool:
    """SIGKILLs the driver's whole process group; True if it was still running."""
    alive = p.poll() is None
    if alive:
        os.killpg(p.pid, signal.SIGKILL)
    p.wait(timeout=30)
    return alive


def test_sink_survives_sigkill_at_random_points(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], testkit_jar: str, jvm_tmpdir: Path
):
    jars = f"{batchlog.jar_path()},{testkit_jar}"  # the fault manager is in the test kit
    rng = random.Random(SEED)
    inp, out, chk = tmp_path / "in", tmp_path / "out dir", tmp_path / "chk"
    log = tmp_path / "driver.log"
    started = time.monotonic()
    expected: list[int] = []
    kills = dict.fromkeys([*KINDS, "timed-out"], 0)
    completions = 0
    cycle: list[str] = []
    latest_seen = -1

    def batch_running() -> bool:
        """A batch is being written: a new planned batch or a new data file in the output."""
        if any(n.isdigit() for n in _names(chk / "offsets") - offsets_before):
            return True
        return any(
            f.name.startswith("part-") and f.name not in data_before
            for d in out.glob("part=*")
            for f in d.iterdir()
        )

    def compact_in_temp_file() -> bool:
        return any(
            n.startswith(".") and ".compact." in n and n.endswith(".tmp")
            for n in _names(out / "_spark_metadata") - meta_before
        )

    for rnd in range(ROUNDS):
        expected += write_input(inp, rnd * FILES_PER_ROUND, FILES_PER_ROUND, ROWS_PER_FILE)
        quota = MIN_KILLS * (rnd + 1) // ROUNDS  # kills wanted by the end of this round
        while True:
            mode = "complete"
            if sum(kills.values()) < quota:
                # every kind of kill in turn (each round of three in a random order), so that
                # each gets its share of the kills
                cycle = cycle or rng.sample(KINDS, len(KINDS))
                mode = cycle.pop()
            offsets_before = _names(chk / "offsets")
            meta_before = _names(out / "_spark_metadata")
            data_before = {f.name for f in out.glob("part=*/part-*")}
            p = start_driver(_cmd(inp, out, chk, jars, stall_compact=mode == "mid-compaction"), log)
            # The random sleeps below choose *when* to kill (they wait for no event): each kill
            # lands at a random point after the event that was polled for.
            if mode == "mid-batch":
                # A batch (maybe the re-run of the killed one) is running: kill it somewhere inside.
                if not poll(lambda: p.poll() is not None or batch_running(), timeout=90):  # noqa: B023
                    mode = "timed-out"
                time.sleep(rng.uniform(0.0, 0.6))
            elif mode == "mid-compaction":
                # The compact file is fully in its temp file and stalled before its rename.
                if not poll(
                    lambda: p.poll() is not None or compact_in_temp_file(),  # noqa: B023
                    timeout=90,
                ):
                    mode = "timed-out"
                time.sleep(rng.uniform(0.0, 1.5))
            elif mode == "start-up":
                # Anywhere in JVM start-up, query restart and recovery, or the first batch.
                time.sleep(rng.uniform(1.0, 4.0))
            else:
                p.wait(timeout=180)

            if mode != "complete" and _kill(p):
                kills[mode] += 1
                state = (
                    check_log(out, COMPACT_INTERVAL) if (out / "_spark_metadata").is_dir() else None
                )
                if state:
                    assert state["latest"] >= latest_seen, "the log went backwards"
                    latest_seen = state["latest"]
                continue
            # The run ended by itself: all input present at its start is processed.
            assert p.returncode == 0, log.read_text(errors="replace")[-4000:]
            completions += 1
            state = check_log(out, COMPACT_INTERVAL)
            latest_seen = state["latest"]
            got = plain_read(out)
            assert got["rows"] == len(expected)
            assert got["ids"] == sorted(expected), "a record is missing or duplicated"
            assert got["parts"] == {
                f"p{k}": sum(1 for i in expected if i % 3 == k) for k in range(3)
            }
            break

    total = sum(kills.values())
    elapsed = time.monotonic() - started
    with capsys.disabled():
        print(
            f"\n[crash test] survived {total} SIGKILLs ({kills}); {completions} completed runs; "
            f"{len(expected)} records in {latest_seen + 1} batches, each read back exactly once; "
            f"{elapsed:.0f} s; seed {SEED}"
        )
    # One batch per committed query batch. Usually one per input file, but not always: Spark's
    # file source logs its next file list (sources/0/N) before the query writes offsets/N, so a
    # kill between the two makes the restarted query's next batch take two files (rows are still
    # read once, as asserted above).
    committed = max(int(n) for n in _names(chk / "commits") if n.isdigit())
    assert latest_seen == committed
    assert ROUNDS * FILES_PER_ROUND // 2 <= latest_seen + 1 <= ROUNDS * FILES_PER_ROUND
    assert total >= MIN_KILLS
    assert all(kills[k] >= 3 for k in KINDS), kills
    # The killed drivers ran no shutdown hook: their block managers stay, in the JVMs' temporary
    # folder of the suite (conftest.jvm_tmpdir), which pytest's rotation removes, not in /tmp.
    killed_running = kills["mid-batch"] + kills["mid-compaction"]
    assert len(list(jvm_tmpdir.glob("blockmgr-*"))) >= killed_running, os.listdir(jvm_tmpdir)
