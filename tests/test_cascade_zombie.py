"""A zombie writer wakes between two hops' fences of a cascade (issue 41, item 3).

The pipeline: an upstream sink written in this process, and a downstream that reads it with the
``batchlog`` source (one upstream batch a trigger), written by a ``spark-submit`` driver. That
driver is caught in the publish of its batch 3's log file (the test kit's fault manager holds the
rename until a file exists), then SIGSTOPped past its lease: a zombie. The cascade from the
upstream plans (the downstream's latest batch is 2 then), fences the upstream, and pauses (the test
kit's ``PauseAfterRewindStep``); the test wakes the zombie, whose publish goes through. The
cascade must then stop at the downstream, before it deletes anything there, naming the command;
run again once the zombie is dead, it finishes, and both sinks, restarted, hold each input row
exactly once as plain Spark reads them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import COMPACT_INTERVAL_KEY, batch_rows, drop_inputs, run_stream
from pyspark.sql import SparkSession
from reliability_support import (
    APPS,
    FAULT_MANAGER,
    PYTHON,
    REPO,
    batchlog,
    poll,
    spark_submit,
)
from support import (
    PYTHON_DIR,
    jars_with_testkit,
    pause_after_rewind_step_confs,
    session_conf,
)

#: The writers' lease timeout (upstream, the zombie, its restart). The zombie must keep its lease
#: through batches 0 to 3 of a cold ``spark-submit`` driver: on a loaded machine (2 CI cores shared
#: with other test processes and builds) its JVM can go seconds without a refresh as it warms up,
#: and a 4 s lease was lost there at batch 0. A longer one costs only time: the cascade watches the
#: stopped zombie's lease for its whole timeout (its re-run too, if the killed zombie left it).
LEASE = "20s"
CONFS = {
    "spark.sql.streaming.commitProtocolClass": batchlog.COMMIT_PROTOCOL_CLASS,
    COMPACT_INTERVAL_KEY: "3",
    "spark.batchlog.writer.leaseTimeout": LEASE,
}


def _submit(
    mode: str, up: Path, base: Path, faults: dict[str, str], log: Path
) -> subprocess.Popen[bytes]:
    """The downstream app (``downstream_app.py``): query ``down`` over ``up``, from batch 0."""
    confs = {
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "1",
        "spark.sql.streaming.schemaInference": "true",
        **CONFS,
        **faults,
    }
    cmd = [spark_submit(), "--master", "local[2]", "--jars", jars_with_testkit()]
    for k, v in confs.items():
        cmd += ["--conf", f"{k}={v}"]
    env = dict(os.environ, PYSPARK_PYTHON=PYTHON, PYSPARK_DRIVER_PYTHON=PYTHON)
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    with open(log, "ab") as f:
        return subprocess.Popen(
            [*cmd, str(APPS / "downstream_app.py"), mode, str(up / "out"), str(base), "down=0"],
            stdout=f,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            cwd=REPO,
        )


def _cli(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=str(PYTHON_DIR))
    with open(log, "ab") as f:
        return subprocess.Popen(
            [sys.executable, "-m", "batchlog", *args],
            stdout=f,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=REPO,
        )


def _upstream(spark: SparkSession, up: Path) -> None:
    with session_conf(spark, CONFS):
        run_stream(spark, up / "in", up / "out", up / "chk")


def test_a_zombie_publishing_between_two_hops_fences_stops_the_cascade_cleanly(
    spark: SparkSession, tmp_path: Path
) -> None:
    up, base, pause = tmp_path / "up", tmp_path / "down", tmp_path / "pause"
    down_out, down_chk = base / "down" / "out", base / "down" / "chk"
    pause.mkdir()
    driver_log, cli_log = tmp_path / "driver.log", tmp_path / "cli.log"
    drop_inputs(up / "in", {b: batch_rows(b, 2) for b in range(6)})
    _upstream(spark, up)  # upstream batches 0..5

    go = tmp_path / "go"
    faults = {
        "spark.hadoop.spark.sql.streaming.checkpointFileManagerClass": FAULT_MANAGER,
        "spark.hadoop.spark.batchlog.test.fault.op": "rename",
        "spark.hadoop.spark.batchlog.test.fault.pathRegex": "/down/out/_spark_metadata/3$",
        "spark.hadoop.spark.batchlog.test.fault.action": "await",
        "spark.hadoop.spark.batchlog.test.fault.awaitFile": str(go),
        "spark.hadoop.spark.batchlog.test.fault.stallMs": "240000",
    }
    zombie = _submit("run", up, base, faults, driver_log)
    cli = None
    try:
        held = poll(
            lambda: zombie.poll() is not None
            or "awaiting" in driver_log.read_text(errors="replace"),
            240,
        )
        assert held and zombie.poll() is None, driver_log.read_text(errors="replace")[-4000:]
        os.killpg(zombie.pid, signal.SIGSTOP)  # mid-publish of its batch 3, its lease to expire
        assert (
            sorted(int(p.name) for p in (down_chk / "commits").iterdir() if p.name.isdigit())[-1]
            == 2
        )

        args = ["rewind", str(up / "out"), "--checkpoint", str(up / "chk"), "--to-batch", "1"]
        cli = _cli([*pause_after_rewind_step_confs("0:fence", pause), *args, "--cascade"], cli_log)
        assert poll(lambda: (pause / "paused").exists() or cli.poll() is not None, 240), cli_log
        assert cli.poll() is None, cli_log.read_text(errors="replace")[-4000:]
        # between the two fences: the zombie wakes and its publish of batch 3 goes through
        os.killpg(zombie.pid, signal.SIGCONT)
        go.touch()
        meta3 = down_out / "_spark_metadata" / "3"
        assert poll(lambda: meta3.exists() or zombie.poll() is not None, 60)
        (pause / "resume").touch()
        assert cli.wait(timeout=300) != 0
        said = cli_log.read_text(errors="replace")
        assert f"{down_out}" in said and "--cascade" in said, said[-4000:]
        # nothing deleted in the downstream: its files of batches 1..3 are all there
        assert {b for b in range(4) if list(down_out.rglob(f"part-*-batch-{b}-*"))} == {0, 1, 2, 3}
    finally:
        if zombie.poll() is None:
            os.killpg(zombie.pid, signal.SIGCONT)
            os.killpg(zombie.pid, signal.SIGKILL)
        zombie.wait(timeout=60)
        if cli is not None and cli.poll() is None:
            cli.kill()

    # the zombie dead, the same command finishes the cascade (it watches the lease out first)
    again = _cli([*args, "--cascade"], cli_log)
    assert again.wait(timeout=300) == 0, cli_log.read_text(errors="replace")[-4000:]
    for out in (up / "out", down_out):
        assert not (out / "_batchlog" / "_batchlog-rewind.json").exists(), out

    _upstream(spark, up)
    time.sleep(1)
    finish = _submit("finish", up, base, {}, driver_log)
    assert finish.wait(timeout=400) == 0, driver_log.read_text(errors="replace")[-4000:]
    want = sorted(b * 100 + i for b in range(6) for i in range(4))
    for out in (up / "out", down_out):  # read through the sink's log, as plain Spark does
        assert sorted(r.id for r in spark.read.parquet(str(out)).select("id").collect()) == want
