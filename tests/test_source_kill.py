"""A ``batchlog`` source restarts exactly once: downstream queries killed by SIGKILL at each point
of their first and later micro-batches, with every kind of ``startingBatch``, read every upstream
row exactly once after a restart (issue 23).

One spark-submit driver runs all the downstream queries at once, each halted at its own kill point
by the test kit's fault manager (a stall of the call that starts writing its ``offsets/K`` or
``commits/K``); the driver is SIGKILLed once all are halted, the upstream writes one more batch,
and a second driver restarts them all from their checkpoints. Rows are read back by plain Spark.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

from conftest import COMPACT_INTERVAL_KEY, batch_rows, drop_inputs, run_stream
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from reliability_support import APPS, FAULT_MANAGER, PYTHON, REPO, batchlog, poll, spark_submit
from support import session_conf

STARTS = {"earliest": "earliest", "latest": "latest", "numeric": "1"}
#: kill point -> the log (and K + what) whose file ``<log>/K+what`` is halted before it is created
POINTS = {
    "before-offsets": ("offsets", 0),  # offsets/K not written
    "between": ("commits", 0),  # offsets/K written, commits/K not
    "after-commits": ("offsets", 1),  # commits/K written, offsets/K+1 not
}
BATCHES = (0, 1)  # the first micro-batch and a later one
HALT_S = 240  # every halt is reached within this
RUN_S = 300


def _queries() -> dict[str, tuple[str, str, int, str]]:
    """name -> (start option, kill point, micro-batch K, file halted: offsets/N or commits/N)."""
    out = {}
    for s, opt in STARTS.items():
        for point, (log, extra) in POINTS.items():
            for k in BATCHES:
                out[f"{s}_{point}_{k}"] = (opt, point, k, f"{log}/{k + extra}")
    return out


def _submit(args: list[str], confs: dict[str, str], jars: str, log: Path) -> subprocess.Popen:
    cmd = [spark_submit(), "--master", "local[2]", "--jars", jars]
    base = {
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "1",
        "spark.sql.streaming.schemaInference": "true",
    }
    for k, v in {**base, **confs}.items():
        cmd += ["--conf", f"{k}={v}"]
    env = dict(os.environ, PYSPARK_PYTHON=PYTHON, PYSPARK_DRIVER_PYTHON=PYTHON)
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    with open(log, "ab") as f:
        return subprocess.Popen(
            [*cmd, str(APPS / "downstream_app.py"), *args],
            stdout=f,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            cwd=REPO,
        )


def _not_halted(log: Path, queries: dict[str, tuple[str, str, int, str]]) -> list[str]:
    """The queries not yet halted just before they create their file (e.g. ``commits/0``): the
    test kit logs each stall of that call, with its path, to the driver's log."""
    stalls = [ln for ln in log.read_text(errors="replace").splitlines() if "createAtomic(" in ln]
    return [n for n, q in queries.items() if not any(f"/{n}/chk/{q[3]})" in ln for ln in stalls)]


def _upstream(spark: SparkSession, up: Path, batches: range) -> None:
    drop_inputs(up / "in", {b: batch_rows(b, 2) for b in batches})
    with session_conf(spark, {COMPACT_INTERVAL_KEY: "3"}):
        run_stream(spark, up / "in", up / "out", up / "chk")


def _ids(spark: SparkSession, out: Path) -> list[int]:
    return sorted(int(r[0]) for r in spark.read.parquet(str(out)).select(F.col("id")).collect())


def test_downstreams_killed_at_every_point_restart_exactly_once(
    spark: SparkSession, tmp_path: Path, testkit_jar: str
) -> None:
    up, base, log = tmp_path / "up", tmp_path / "down", tmp_path / "driver.log"
    _upstream(spark, up, range(3))  # upstream batches 0..2
    queries = _queries()
    jars = f"{batchlog.jar_path()},{testkit_jar}"
    targets = "|".join(re.escape(f"/{n}/chk/{f}") + "$" for n, (_, _, _, f) in queries.items())
    faults = {
        "spark.hadoop.spark.sql.streaming.checkpointFileManagerClass": FAULT_MANAGER,
        "spark.hadoop.spark.batchlog.test.fault.op": "createAtomic",
        "spark.hadoop.spark.batchlog.test.fault.pathRegex": f"({targets})",
        "spark.hadoop.spark.batchlog.test.fault.action": "stall",
        "spark.hadoop.spark.batchlog.test.fault.stallMs": str(RUN_S * 1000),
    }
    starts = [f"{n}={opt}" for n, (opt, _, _, _) in queries.items()]
    p = _submit(["run", str(up / "out"), str(base), *starts], faults, jars, log)
    try:
        # the `latest` queries fix their start (upstream batch 3) at their first start; then the
        # upstream writes the batches their micro-batches 0..2 read
        latest = [n for n in queries if n.startswith("latest")]
        kept = [base / n / "chk" / "sources" / "0" / "batchlog-source.json" for n in latest]
        ok = poll(lambda: p.poll() is not None or all(f.exists() for f in kept), HALT_S)
        assert ok and p.poll() is None, log.read_text(errors="replace")[-4000:]
        _upstream(spark, up, range(3, 6))
        ok = poll(
            lambda: p.poll() is not None or not _not_halted(log, queries),
            HALT_S,
            step=0.2,
        )
        assert ok and p.poll() is None, (
            f"not halted: {_not_halted(log, queries)}\n" + log.read_text(errors="replace")[-4000:]
        )
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        p.wait(timeout=30)

    # each query was killed exactly at its point
    for name, (_, point, k, _) in queries.items():
        chk = base / name / "chk"
        offsets = (chk / "offsets" / str(k)).exists()
        commits = (chk / "commits" / str(k)).exists()
        after = (chk / "offsets" / str(k + 1)).exists()
        state = {
            "before-offsets": (False, False, False),
            "between": (True, False, False),
            "after-commits": (True, True, False),
        }[point]
        assert (offsets, commits, after) == state, name

    # the upstream writes one more batch (6), then every downstream restarts from its checkpoint
    _upstream(spark, up, range(6, 7))
    p = _submit(["finish", str(up / "out"), str(base), *starts], {}, jars, log)
    try:
        assert p.wait(timeout=RUN_S + 60) == 0, log.read_text(errors="replace")[-4000:]
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(timeout=30)

    first = {"earliest": 0, "latest": 3, "numeric": 1}
    for name in queries:
        s = name.split("_")[0]
        expected = sorted(b * 100 + i for b in range(first[s], 7) for i in range(4))
        assert _ids(spark, base / name / "out") == expected, name
