"""batchlog on a real standalone cluster: master and worker on loopback, started from pyspark's own
``bin/spark-class``, and an application submitted with ``spark-submit --jars``, so the tasks that
write the sink run in executor JVMs separate from the driver that commits the log; its sink on the
local disk, then on HDFS (a single-node cluster, ``storage_support.hdfs``)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import batchlog
import pyspark
import pytest
from conftest import (
    QUERY_TIMEOUT_S,
    REPO,
    assert_entry_matches_disk,
    batch_rows,
    drop_inputs,
    is_tagged_line,
    log_file_names,
    read_back_plain,
    read_log_file,
    row_tuples,
    tagged_files_by_batch,
)
from pyspark.sql import SparkSession
from storage_support import RemoteFs, hdfs  # noqa: F401  (the fixture)
from support import poll, stop_group

SPARK_HOME = Path(pyspark.__file__).resolve().parent
SPARK_CLASS = SPARK_HOME / "bin" / "spark-class"
SPARK_SUBMIT = SPARK_HOME / "bin" / "spark-submit"
APP = REPO / "tests" / "apps" / "example_stream.py"
STARTUP_TIMEOUT_S = 120
SUBMIT_TIMEOUT_S = QUERY_TIMEOUT_S
BATCHES = 5  # compactInterval 2: compactions at batches 1 and 3


@dataclass
class Cluster:
    master_url: str
    env: dict[str, str]
    work_dir: Path
    log_dir: Path


def _cluster_env(root: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "BATCHLOG_JAR", "PYSPARK_SUBMIT_ARGS", "SPARK_CONF_DIR")
    }
    dirs = {
        "SPARK_LOG_DIR": root / "logs",
        "SPARK_WORKER_DIR": root / "work",
        "SPARK_LOCAL_DIRS": root / "local",
        "SPARK_PID_DIR": root / "pids",
    }
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
        d.chmod(0o777)
    env.update({k: str(v) for k, v in dirs.items()})
    env.update(
        {
            "SPARK_HOME": str(SPARK_HOME),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_DAEMON_MEMORY": "256m",
            # no REST submission server: it would bind a fixed port (6066); spark-submit here is
            # in client mode and does not use it
            "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
            # the master's and the worker's JVMs, with the flags of the suite's other JVMs (the
            # client compiler, the serial collector, the class-data archive: conftest)
            "SPARK_DAEMON_JAVA_OPTS": os.environ.get("SPARK_SUBMIT_OPTS", ""),
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
        }
    )
    return env


def _alive_workers(webui_port: int) -> list[dict[str, object]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{webui_port}/json/", timeout=5) as r:
            status = json.load(r)
    except (OSError, ValueError):
        # Not up yet; or an HTML page where the JSON was asked for (seen once, on a loaded
        # machine, while the master started): asked again until the timeout.
        return []
    return [w for w in status.get("workers", []) if w.get("state") == "ALIVE"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A master and a worker on loopback. Every port is 0: each daemon binds a free port itself
    (no pick-then-bind race with other processes) and the master's log says which it got."""
    root = tmp_path_factory.mktemp("standalone")
    env = _cluster_env(root)
    log_dir = Path(env["SPARK_LOG_DIR"])
    procs: list[subprocess.Popen] = []

    def start(name: str, *args: str) -> subprocess.Popen:
        out = open(log_dir / f"{name}.out", "wb")
        proc = subprocess.Popen(
            [str(SPARK_CLASS), *args],
            env=env,
            cwd=str(root),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        out.close()
        procs.append(proc)
        return proc

    def logs() -> str:
        return "\n".join(f.read_text()[-3000:] for f in log_dir.glob("*.out"))

    def check_alive() -> None:
        for p in procs:
            if p.poll() is not None:
                pytest.fail(f"{p.args[1]} exited with {p.returncode}:\n{logs()}")

    def bound(pattern: str) -> str | None:
        """The first match of ``pattern`` in the master's log (fails if the master died)."""
        check_alive()
        m = re.search(pattern, (log_dir / "master.out").read_text(errors="replace"))
        return m.group(1) if m else None

    try:
        start(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host", "127.0.0.1",
            "--port", "0",
            "--webui-port", "0",
        )  # fmt: skip
        master_re = r"Starting Spark master at (spark://127\.0\.0\.1:[0-9]+)"
        webui_re = r"Successfully started service 'MasterUI' on port ([0-9]+)"
        if not poll(lambda: bound(master_re) and bound(webui_re), STARTUP_TIMEOUT_S):
            pytest.fail(f"the master logged no ports in {STARTUP_TIMEOUT_S}s:\n{logs()}")
        master_url, webui = bound(master_re), int(bound(webui_re) or 0)
        assert master_url
        start(
            "worker",
            "org.apache.spark.deploy.worker.Worker",
            master_url,
            "--host", "127.0.0.1",
            "--cores", "2",
            "--memory", "1g",
            "--webui-port", "0",
            "--work-dir", env["SPARK_WORKER_DIR"],
        )  # fmt: skip

        def worker_alive() -> bool:
            check_alive()
            return bool(_alive_workers(webui))

        if not poll(worker_alive, STARTUP_TIMEOUT_S, step=0.5):
            pytest.fail(f"no worker registered in {STARTUP_TIMEOUT_S}s:\n{logs()}")
        [worker] = _alive_workers(webui)
        assert (worker["cores"], worker["memory"]) == (2, 1024)
        yield Cluster(master_url, env, Path(env["SPARK_WORKER_DIR"]), log_dir)
    finally:
        for p in reversed(procs):
            stop_group(p)


def spark_submit(cluster: Cluster, jar: str, *app_args: str) -> subprocess.CompletedProcess:
    cmd = [
        str(SPARK_SUBMIT),
        "--master", cluster.master_url,
        "--deploy-mode", "client",
        "--jars", jar,
        "--conf", f"spark.sql.streaming.commitProtocolClass={batchlog.COMMIT_PROTOCOL_CLASS}",
        "--driver-memory", "512m",
        "--executor-memory", "512m",
        "--conf", "spark.executor.cores=1",
        "--conf", "spark.cores.max=2",
        "--conf", "spark.ui.enabled=false",
        "--conf", "spark.driver.host=127.0.0.1",
        "--conf", "spark.sql.shuffle.partitions=2",
        # the executors' JVMs, with the flags of the suite's other JVMs (as the daemons above)
        "--conf", f"spark.executor.extraJavaOptions={os.environ.get('SPARK_SUBMIT_OPTS', '')}",
        str(APP),
        *app_args,
    ]  # fmt: skip
    proc = subprocess.Popen(
        cmd,
        env=cluster.env,
        cwd=str(REPO),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=SUBMIT_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        stop_group(proc)
        out, err = proc.communicate()
        pytest.fail(f"spark-submit did not finish in {SUBMIT_TIMEOUT_S}s:\n{out}\n{err[-5000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _result_line(stdout: str) -> dict[str, object] | None:
    lines = [line for line in stdout.splitlines() if line.startswith("EXAMPLE-STREAM-RESULT ")]
    return json.loads(lines[0].split(" ", 1)[1]) if len(lines) == 1 else None


def test_spark_submit_to_standalone_cluster(
    cluster: Cluster, batchlog_jar: str, spark: SparkSession, tmp_path: Path
) -> None:
    inbox, out, chk = tmp_path / "input", tmp_path / "out", tmp_path / "chk"
    inputs = {b: batch_rows(b, b % 3 + 1) for b in range(BATCHES)}
    drop_inputs(inbox, inputs)

    proc = spark_submit(cluster, batchlog_jar, str(inbox), str(out), str(chk))
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr[-8000:]}"
    assert _result_line(proc.stdout) == {
        "batches": list(range(BATCHES)),
        "commitProtocolClass": batchlog.COMMIT_PROTOCOL_CLASS,
        "master": cluster.master_url,
        "executors": 2,
    }

    # The tasks ran in executor JVMs the worker launched, which fetched the jar from the driver.
    app_dirs = list(cluster.work_dir.glob("app-*"))
    assert len(app_dirs) == 1, app_dirs
    executor_logs = [(d / "stderr").read_text() for d in app_dirs[0].iterdir() if d.is_dir()]
    assert len(executor_logs) == 2
    assert any("Running task" in log for log in executor_logs)
    assert all(os.path.basename(batchlog_jar) in log for log in executor_logs)

    # The log: per-batch files and compactions, every line tagged with its batch.
    meta = out / "_spark_metadata"
    assert log_file_names(out) == ["0", "1.compact", "2", "3.compact", "4"]
    by_batch = tagged_files_by_batch(out)
    assert {b: len(paths) for b, paths in by_batch.items()} == {
        b: b % 3 + 1 for b in range(BATCHES)
    }
    for name in log_file_names(out):
        entries = read_log_file(meta / name)
        n = int(name.split(".")[0])
        for e in entries:
            assert is_tagged_line(e), e
            assert_entry_matches_disk(e)
            assert str(e["path"]) in by_batch[int(e["batchId"])], e  # type: ignore[arg-type]
        batches_in_file = range(n + 1) if name.endswith(".compact") else [n]
        assert [e["batchId"] for e in entries] == [
            b for b in batches_in_file for _ in range(b % 3 + 1)
        ]

    log = batchlog.SinkLog(spark, str(out))
    assert log.latest_batch() == BATCHES - 1
    assert log.batches() == list(range(BATCHES))
    assert {b: set(log.files(b)) for b in range(BATCHES)} == by_batch

    [plain] = read_back_plain([("parquet", str(out))])
    assert plain["count"] == 4 * BATCHES
    assert row_tuples(plain["rows"]) == row_tuples(r for rows in inputs.values() for r in rows)


def test_spark_submit_to_standalone_cluster_writing_to_hdfs(
    cluster: Cluster, batchlog_jar: str, spark: SparkSession, hdfs: str, tmp_path: Path
) -> None:
    """The same application with its sink and checkpoint on HDFS: executors write the data files
    there, the driver commits the log there, and the test reads it back through the store."""
    inbox, out, chk = tmp_path / "input", f"{hdfs}/cluster/out", f"{hdfs}/cluster/chk"
    inputs = {b: batch_rows(b, b % 3 + 1) for b in range(BATCHES)}
    drop_inputs(inbox, inputs)

    proc = spark_submit(cluster, batchlog_jar, str(inbox), out, chk)
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr[-8000:]}"
    result = _result_line(proc.stdout)
    assert result is not None and result["batches"] == list(range(BATCHES)), proc.stdout
    assert result["executors"] == 2

    fs = RemoteFs(spark, hdfs)
    assert fs.log_names(out) == ["0", "1.compact", "2", "3.compact", "4"]
    by_batch = fs.data_files_by_batch(out)
    assert {b: len(paths) for b, paths in by_batch.items()} == {
        b: b % 3 + 1 for b in range(BATCHES)
    }
    log = batchlog.SinkLog(spark, out)
    assert log.batches() == list(range(BATCHES))
    assert {b: set(log.files(b)) for b in range(BATCHES)} == by_batch
    assert batchlog.verify(spark, out).healthy
    rows = spark.read.parquet(out).collect()
    assert row_tuples(r.asDict() for r in rows) == row_tuples(
        r for batch in inputs.values() for r in batch
    )
