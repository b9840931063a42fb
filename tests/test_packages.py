"""batchlog from its Maven coordinates: ``spark-submit --packages io.batchlog:batchlog-spark-<line>_
<scala>:<version> --repositories file://<repo>`` against the local Maven repository the build
publishes (``dev/sbt batchlog/publish`` writes ``dist/maven``), as a user would from theirs."""

from __future__ import annotations

import filecmp
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import batchlog
import pyspark
import pytest
from conftest import (
    QUERY_TIMEOUT_S,
    REPO,
    batch_rows,
    drop_inputs,
    log_file_names,
    read_back_plain,
    read_log_file,
    row_tuples,
)
from pyspark.sql import SparkSession

MAVEN_REPO = REPO / "dist" / "maven"
APP = REPO / "tests" / "apps" / "example_stream.py"
SPARK_SUBMIT = Path(pyspark.__file__).resolve().parent / "bin" / "spark-submit"
POM_NS = {"m": "http://maven.apache.org/POM/4.0.0"}
BATCHES = 5


def published(spark: SparkSession) -> tuple[str, Path]:
    """The coordinates of the jar this session runs, and its folder in ``dist/maven``."""
    info = spark._jvm.io.batchlog.BuildInfo  # type: ignore[union-attr]
    artifact, version = str(info.artifact()), str(info.version())
    folder = MAVEN_REPO / "io" / "batchlog" / artifact / version
    if not (folder / f"{artifact}-{version}.jar").is_file():
        pytest.fail(
            f"{artifact} {version} is not published to {MAVEN_REPO}: run "
            "`dev/sbt batchlog/publish` (dev/test does), then rerun."
        )
    return f"io.batchlog:{artifact}:{version}", folder


def test_pom_names_no_dependency_spark_already_has(spark: SparkSession) -> None:
    coords, folder = published(spark)
    _, artifact, version = coords.split(":")
    pom = ET.parse(folder / f"{artifact}-{version}.pom").getroot()
    assert pom.findtext("m:groupId", namespaces=POM_NS) == "io.batchlog"
    assert pom.findtext("m:artifactId", namespaces=POM_NS) == artifact
    scopes = {
        d.findtext("m:artifactId", namespaces=POM_NS): d.findtext("m:scope", namespaces=POM_NS)
        for d in pom.iterfind("m:dependencies/m:dependency", POM_NS)
    }
    # Spark and Scala come from the cluster (provided; test scope is the build's own): nothing for
    # --packages to fetch besides our jar.
    assert scopes.get("scala-library") == "provided", scopes
    assert set(scopes.values()) <= {"provided", "test"}, scopes


def test_spark_submit_packages_from_local_maven_repo(spark: SparkSession, tmp_path: Path) -> None:
    coords, folder = published(spark)
    inbox, out, chk, ivy = (tmp_path / d for d in ("in", "out", "chk", "ivy"))
    inputs = {b: batch_rows(b, 2) for b in range(BATCHES)}
    drop_inputs(inbox, inputs)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "BATCHLOG_JAR", "PYSPARK_SUBMIT_ARGS", "SPARK_CONF_DIR")
    }
    # spark-submit runs a Python app on ``python3`` from PATH unless told: name this interpreter.
    env.update(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    cmd = [
        str(SPARK_SUBMIT),
        "--master", "local[2]",
        "--packages", coords,
        "--repositories", MAVEN_REPO.as_uri(),
        "--conf", f"spark.jars.ivy={ivy}",  # a cache of its own: resolved now, not remembered
        "--conf", f"{batchlog.COMMIT_PROTOCOL_KEY}={batchlog.COMMIT_PROTOCOL_CLASS}",
        "--conf", "spark.ui.enabled=false",
        "--conf", "spark.sql.shuffle.partitions=2",
        str(APP), str(inbox), str(out), str(chk),
    ]  # fmt: skip
    proc = subprocess.run(
        cmd, env=env, cwd=str(tmp_path), capture_output=True, text=True, timeout=QUERY_TIMEOUT_S
    )
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr[-8000:]}"
    assert "EXAMPLE-STREAM-RESULT" in proc.stdout

    # Ivy fetched exactly our jar, byte for byte the published one, and nothing else.
    _, artifact, version = coords.split(":")
    fetched = sorted(p.name for p in (ivy / "jars").iterdir())
    assert fetched == [f"io.batchlog_{artifact}-{version}.jar"]
    assert filecmp.cmp(ivy / "jars" / fetched[0], folder / f"{artifact}-{version}.jar", False)

    # The sink was written through batchlog: every log line carries its batch.
    assert log_file_names(out) == ["0", "1.compact", "2", "3.compact", "4"]
    for name in log_file_names(out):
        assert all("batchId" in e for e in read_log_file(out / "_spark_metadata" / name))
    assert batchlog.SinkLog(spark, str(out)).batches() == list(range(BATCHES))
    [plain] = read_back_plain([("parquet", str(out))])
    assert row_tuples(plain["rows"]) == row_tuples(r for rows in inputs.values() for r in rows)
