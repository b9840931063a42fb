"""batchlog next to Delta Lake, installed from PyPI, in one session (issue 25).

``batchlog.configure`` adds to the effective configuration and never replaces it; here the other
library is the real one. Delta's newest release line (delta-spark 4.4) accepts pyspark <= 4.2.0
only, so these tests run on batchlog's 4.2 line, in their own virtualenv: ``dev/line 4.2_2.13
delta`` installs delta-spark 4.4.0 (4.4.1 is on PyPI, its jars are not on Maven Central) and
pyspark 4.2.0 into ``.lines/4.2_2.13/delta``; Delta's jars come from Maven Central by
``--packages`` (Ivy's cache in that virtualenv); batchlog's is the 4.2 line's jar (``dist/jars``,
built by ``dev/line 4.2_2.13 jar`` if missing), the Python package this checkout's. That jar is
built against Spark 4.2.1 (project/spark-lines.tsv) and runs here on 4.2.0: it checks the Spark
line, not the patch release, and every result below is exact on 4.2.0.

Each case is one real PySpark process (``tests/apps/delta_coexist.py``) with both extensions in one
session: a Delta table written, read, updated, deleted from, time-travelled and vacuumed (dry run);
a streaming query into a batchlog sink checked with the Python API, the table functions and
``BATCHLOG`` statements; that sink streamed by batch into a Delta table. The cases set the jars and
extensions the ways users do, in both extension orders: ``PYSPARK_SUBMIT_ARGS`` (Delta's first),
the builder with Delta's own ``configure_spark_with_delta_pip`` (batchlog's first), and
``spark-submit`` with ``--packages`` for both (Delta's first) or ``--jars`` for batchlog's
(batchlog's first), on a local-cluster master whose executor JVM runs every task.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from support import QUERY_TIMEOUT_S, REPO, batchlog, stop_group

#: The Spark line with a Delta Lake release to test next to (``dev/line delta-line``).
LINE = subprocess.run(
    [str(REPO / "dev" / "line"), "delta-line"], capture_output=True, text=True, check=True
).stdout.strip()
VENV = REPO / ".lines" / LINE / "delta"
IVY = VENV / "ivy"
#: Ivy resolves from Maven Central only (and --repositories): Spark's default chain also reads
#: ~/.m2, where a POM without its jar (jsr305 here) fails the whole resolution.
IVY_SETTINGS = VENV / "ivysettings.xml"
IVY_SETTINGS_XML = """<ivysettings>
  <settings defaultResolver="central"/>
  <resolvers>
    <ibiblio name="central" m2compatible="true" root="https://repo1.maven.org/maven2/"/>
  </resolvers>
</ivysettings>
"""
APP = REPO / "tests" / "apps" / "delta_coexist.py"
JAR = REPO / "dist" / "jars" / f"batchlog-spark-{LINE}.jar"
MAVEN = REPO / "dist" / "maven"
DELTA_EXT = "io.delta.sql.DeltaSparkSessionExtension"
DELTA_CATALOG = "org.apache.spark.sql.delta.catalog.DeltaCatalog"
OURS = batchlog.EXTENSIONS_CLASS
SETUP_TIMEOUT_S = 1800
LOCAL_CLUSTER = "local-cluster[1,1,1024]"  # one executor JVM besides the driver


@dataclass(frozen=True)
class DeltaEnv:
    python: Path
    spark_home: Path
    delta_version: str
    pyspark_version: str
    batchlog_version: str

    @property
    def delta_coords(self) -> str:
        """Delta's artifact for this Spark line, as ``configure_spark_with_delta_pip`` names it."""
        line = ".".join(self.pyspark_version.split(".")[:2])
        return f"io.delta:delta-spark_{line}_2.13:{self.delta_version}"

    @property
    def batchlog_coords(self) -> str:
        return f"io.batchlog:batchlog-spark-{LINE}:{self.batchlog_version}"

    @property
    def ivy_confs(self) -> dict[str, str]:
        return {"spark.jars.ivy": str(IVY), "spark.jars.ivySettings": str(IVY_SETTINGS)}


def _run_dev(*args: str) -> None:
    proc = subprocess.run(
        [str(REPO / "dev" / "line"), *args],
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=SETUP_TIMEOUT_S,
    )
    assert proc.returncode == 0, f"dev/line {' '.join(args)}:\n{proc.stdout}\n{proc.stderr}"


def _jar_version(jar: Path) -> str:
    with zipfile.ZipFile(jar) as z:
        props = z.read("io/batchlog/build.properties").decode()
    values = dict(line.split("=", 1) for line in props.splitlines() if "=" in line)
    assert values["sparkLine"] == "4.2", values
    return values["version"]


def _base_env() -> dict[str, str]:
    drop = ("PYTHONPATH", "BATCHLOG_JAR", "PYSPARK_SUBMIT_ARGS", "SPARK_CONF_DIR", "SPARK_HOME")
    return {k: v for k, v in os.environ.items() if k not in drop}


@pytest.fixture(scope="session")
def delta_env() -> DeltaEnv:
    """The delta virtualenv (made once, then reused) and the 4.2 line's jar and Maven artifact
    (``dist/``, built if missing)."""
    _run_dev(LINE, "delta")
    if not JAR.is_file() or not any(MAVEN.glob(f"io/batchlog/batchlog-spark-{LINE}/*/*.jar")):
        _run_dev(LINE, "jar")
    if not IVY_SETTINGS.is_file() or IVY_SETTINGS.read_text() != IVY_SETTINGS_XML:
        IVY_SETTINGS.write_text(IVY_SETTINGS_XML)
    python = VENV / "bin" / "python"
    probe = subprocess.run(
        [
            str(python),
            "-c",
            "import importlib.metadata as m, pathlib, pyspark; "
            "print(m.version('delta-spark'), pyspark.__version__, "
            "pathlib.Path(pyspark.__file__).parent)",
        ],
        env=_base_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    delta_version, pyspark_version, spark_home = probe.stdout.split()
    version = _jar_version(JAR)
    assert (MAVEN / f"io/batchlog/batchlog-spark-{LINE}/{version}").is_dir()
    return DeltaEnv(python, Path(spark_home), delta_version, pyspark_version, version)


@pytest.fixture
def fresh_batchlog_in_ivy() -> Iterator[None]:
    """Ivy keeps what it resolved by version: batchlog's artifact leaves the shared cache, so that
    ``--packages`` takes the one dist/maven has now."""

    def forget() -> None:
        shutil.rmtree(IVY / "cache" / "io.batchlog", ignore_errors=True)
        for jar in (IVY / "jars").glob("io.batchlog_*"):
            jar.unlink()

    forget()
    yield
    forget()


def run_app(
    env: DeltaEnv,
    work: Path,
    launcher: list[str],
    options: dict[str, str] | None = None,
    submit_args: str | None = None,
    delta_pip: bool = False,
) -> dict[str, Any]:
    """The app in the delta virtualenv, launched by ``launcher`` (its python, or spark-submit and
    its options), with ``options`` on its builder; what it printed."""
    work.mkdir()
    proc_env = _base_env()
    proc_env.update(
        {
            "PYTHONPATH": str(REPO / "python"),
            # what the wheel's jar_path() would pick; a checkout's python/batchlog/jars holds the
            # primary line's jar only
            "BATCHLOG_JAR": str(JAR),
            "SPARK_HOME": str(env.spark_home),
            "PYSPARK_PYTHON": str(env.python),
            "PYSPARK_DRIVER_PYTHON": str(env.python),
        }
    )
    if submit_args is not None:
        proc_env["PYSPARK_SUBMIT_ARGS"] = submit_args
    cmd = [*launcher, str(APP), str(work), json.dumps(options or {})]
    proc = subprocess.Popen(
        [*cmd, *(["--delta-pip"] if delta_pip else [])],
        cwd=str(work),
        env=proc_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=QUERY_TIMEOUT_S * 2)
    finally:
        stop_group(proc)
    assert proc.returncode == 0, f"{out[-3000:]}\n{err[-8000:]}"
    lines = [s for s in out.splitlines() if s.startswith("DELTA-COEXIST ")]
    assert len(lines) == 1, out
    result: dict[str, Any] = json.loads(lines[0].split(" ", 1)[1])
    return result


def check_jars(env: DeltaEnv, spark_jars: str, batchlog_jar: Path) -> None:
    """``spark.jars`` holds batchlog's jar once (``batchlog_jar``, no other copy), and Delta's
    jars as Ivy retrieved them, each once."""
    jars = [Path(urlparse(j).path) for j in spark_jars.split(",")]
    assert len(jars) == len(set(jars)), jars
    assert [j for j in jars if "batchlog-spark-" in j.name] == [batchlog_jar], jars
    delta = [j for j in jars if j != batchlog_jar]
    names = {j.name for j in delta}
    for artifact in (
        f"delta-spark_4.2_2.13-{env.delta_version}",
        f"delta-storage-{env.delta_version}",
    ):
        assert f"io.delta_{artifact}.jar" in names, f"Delta's jars are not in spark.jars: {jars}"
    assert {j.parent for j in delta} == {IVY / "jars"}, jars


def check_session(env: DeltaEnv, result: dict[str, Any], extensions: list[str]) -> None:
    """Both libraries in the one session, every result exact."""
    assert result["spark_version"] == env.pyspark_version
    assert result["extensions"].split(",") == extensions
    assert result["catalog"] == DELTA_CATALOG
    assert result["commit_protocol"] == batchlog.COMMIT_PROTOCOL_CLASS
    assert result["delta"] == {
        "rows": [[1, "p1"], [2, "changed"], [3, "p3"]],
        "version0": [0, 1, 2, 3, 4],
        "history": [[0, "WRITE"], [1, "UPDATE"], [2, "DELETE"], [3, "DELETE"]],
        "detail_format": "delta",
        "is_delta": True,
        "data_files": ["untagged"] * 4,
        # Delta's VACUUM (not BATCHLOG VACUUM): the three files the rewrites replaced
        "vacuum_dry_run": {"columns": ["path"], "rows": 3},
    }
    assert result["batchlog"] == {
        "query_batches": [0, 1, 2],
        "api_batches": [0, 1, 2],
        "api_latest": 2,
        "api_files_per_batch": [2, 2, 2],
        "api_verify_healthy": True,
        # named by batchlog's committer in the tasks that wrote them
        "tagged_file_batches": [0, 0, 1, 1, 2, 2],
        "sql_batches": [0, 1, 2],
        "sql_latest": 2,
        "sql_verify": {"healthy": True, "liveFiles": 6},
        "sql_inspect_latest": 2,
        "sql_vacuum": {"operation": "vacuum", "dry_run": True, "candidateFiles": 0},
        "rows": [0, 1, 10, 11, 20, 21],
        "batch1_rows": [10, 11],
    }
    assert result["downstream"] == {
        "query_batches": [0, 1],  # upstream batches 0-1, then 2 (maxBatchesPerTrigger 2)
        "rows": [0, 1, 10, 11, 20, 21],
        "history": [[0, "STREAMING UPDATE"], [1, "STREAMING UPDATE"]],
    }


def test_delta_first_from_pyspark_submit_args(delta_env: DeltaEnv, tmp_path: Path) -> None:
    """(a) ``PYSPARK_SUBMIT_ARGS`` ``--packages`` Delta and ``--conf`` its extension and catalog;
    ``configure`` appends batchlog's extension and hands its jar to spark-submit's ``--jars``, so
    the jars spark-submit fetched for Delta stay in ``spark.jars``."""
    ivy = " ".join(f"--conf {k}={v}" for k, v in delta_env.ivy_confs.items())
    submit_args = (
        f"--master local[2] --packages {delta_env.delta_coords} {ivy} "
        f"--conf spark.sql.extensions={DELTA_EXT} "
        f"--conf spark.sql.catalog.spark_catalog={DELTA_CATALOG} pyspark-shell"
    )
    result = run_app(delta_env, tmp_path / "a", [str(delta_env.python)], submit_args=submit_args)
    check_session(delta_env, result, [DELTA_EXT, OURS])
    check_jars(delta_env, result["jars"], JAR)
    # spark-submit in client mode resolves --packages itself and passes on the jars only
    assert result["packages"] == ""
    assert result["block_managers"] == 1


def test_batchlog_first_with_delta_pip_helper(delta_env: DeltaEnv, tmp_path: Path) -> None:
    """(b) The builder lists batchlog's extension first, Delta's second, and goes through Delta's
    ``configure_spark_with_delta_pip`` (``spark.jars.packages`` on the builder), then
    ``configure``: the order stays, batchlog's extension is not added twice, Delta's jars stay."""
    options = {
        "spark.master": "local[2]",
        "spark.sql.extensions": f"{OURS},{DELTA_EXT}",
        "spark.sql.catalog.spark_catalog": DELTA_CATALOG,
        **delta_env.ivy_confs,
    }
    result = run_app(
        delta_env, tmp_path / "b", [str(delta_env.python)], options=options, delta_pip=True
    )
    check_session(delta_env, result, [OURS, DELTA_EXT])
    check_jars(delta_env, result["jars"], JAR)
    assert result["packages"] == delta_env.delta_coords
    assert result["block_managers"] == 1


def spark_submit(env: DeltaEnv, *args: str) -> list[str]:
    ivy = [f"--conf={k}={v}" for k, v in env.ivy_confs.items()]
    return [
        str(env.spark_home / "bin" / "spark-submit"),
        "--master",
        LOCAL_CLUSTER,
        f"--conf=spark.sql.catalog.spark_catalog={DELTA_CATALOG}",
        # the executor's JVM, with the flags of the suite's other JVMs (the driver's come from
        # SPARK_SUBMIT_OPTS): without them it compiled Delta's and Spark's code with C2
        f"--conf=spark.executor.extraJavaOptions={os.environ.get('SPARK_SUBMIT_OPTS', '')}",
        *ivy,
        *args,
    ]


def test_spark_submit_packages_for_both(
    delta_env: DeltaEnv, tmp_path: Path, fresh_batchlog_in_ivy: None
) -> None:
    """(c) ``spark-submit --packages`` Delta's and batchlog's artifacts (batchlog's from
    dist/maven), Delta's extension by ``--conf``: ``configure`` keeps every jar spark-submit
    fetched and adds no second batchlog jar; the executor JVM runs both libraries' writes."""
    launcher = spark_submit(
        delta_env,
        "--packages",
        f"{delta_env.delta_coords},{delta_env.batchlog_coords}",
        "--repositories",
        MAVEN.as_uri(),
        f"--conf=spark.sql.extensions={DELTA_EXT}",
    )
    result = run_app(delta_env, tmp_path / "c", launcher)
    check_session(delta_env, result, [DELTA_EXT, OURS])
    ivy_jar = IVY / "jars" / f"io.batchlog_batchlog-spark-{LINE}-{delta_env.batchlog_version}.jar"
    check_jars(delta_env, result["jars"], ivy_jar)
    assert result["packages"] == ""
    assert result["block_managers"] == 2


def test_spark_submit_jars_and_packages(delta_env: DeltaEnv, tmp_path: Path) -> None:
    """(d) ``spark-submit --jars`` batchlog's jar, ``--packages`` Delta's, both extensions by
    ``--conf`` with batchlog's first: kept as given; the executor JVM runs both libraries'
    writes."""
    launcher = spark_submit(
        delta_env,
        "--jars",
        str(JAR),
        "--packages",
        delta_env.delta_coords,
        f"--conf=spark.sql.extensions={OURS},{DELTA_EXT}",
    )
    result = run_app(delta_env, tmp_path / "d", launcher)
    check_session(delta_env, result, [OURS, DELTA_EXT])
    check_jars(delta_env, result["jars"], JAR)
    assert result["packages"] == ""
    assert result["block_managers"] == 2
