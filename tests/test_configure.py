"""``batchlog.configure`` adds to a session's effective configuration and never replaces it.

Another library's jar and extensions (the test kit's ``MarkerExtensions``, standing for Delta or
Iceberg) are set the ways users set them: ``PYSPARK_SUBMIT_ARGS``, ``spark-defaults.conf`` and
``spark-submit --jars/--conf``, with the other extension before and after batchlog's. Each run is a
real PySpark process that builds its session through ``configure``, writes a batchlog sink and
uses both extensions' SQL; what it prints is checked exactly.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

import pytest
from conftest import subprocess_env
from connect_support import SPARK_SUBMIT
from support import QUERY_TIMEOUT_S, batchlog
from support import testkit_jar_path as kit_jar

APP = Path(__file__).parent / "apps" / "configure_app.py"
MARKER = "io.batchlog.testkit.MarkerExtensions"
OURS = batchlog.EXTENSIONS_CLASS


def run_app(cmd: list[str], env_extra: dict[str, str]) -> dict[str, object]:
    proc = subprocess.run(
        cmd,
        env=subprocess_env(env_extra),
        capture_output=True,
        text=True,
        timeout=QUERY_TIMEOUT_S,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = [s for s in proc.stdout.splitlines() if s.startswith("{")][-1]
    result: dict[str, object] = json.loads(line)
    return result


def check(result: dict[str, object], extensions: list[str]) -> None:
    # each jar once, whichever way it was spelled (spark-submit writes file:///...)
    jars = [urlparse(j).path for j in str(result["jars"]).split(",")]
    assert sorted(jars) == sorted([kit_jar(), batchlog.jar_path()])
    assert str(result["extensions"]).split(",") == extensions
    assert result["commit_protocol"] == batchlog.COMMIT_PROTOCOL_CLASS
    assert result["marker"] == "testkit-extensions-loaded"
    assert result["latest_batch"] == 0
    assert result["rows"] == [0, 1, 2, 3, 4, 5]


@pytest.mark.parametrize("first", ["theirs", "ours"])
def test_configure_keeps_pyspark_submit_args(tmp_path: Path, first: str) -> None:
    ext = [MARKER, OURS] if first == "theirs" else [OURS, MARKER]
    args = f"--jars {kit_jar()} --conf spark.sql.extensions={','.join(ext)} pyspark-shell"
    result = run_app(
        [sys.executable, str(APP), str(tmp_path / "out")], {"PYSPARK_SUBMIT_ARGS": args}
    )
    check(result, ext)


def test_configure_keeps_spark_defaults_conf(tmp_path: Path) -> None:
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text(
        f"# set by the platform team\nspark.jars  {kit_jar()}\nspark.sql.extensions={MARKER}\n"
    )
    result = run_app(
        [sys.executable, str(APP), str(tmp_path / "out")], {"SPARK_CONF_DIR": str(conf_dir)}
    )
    check(result, [MARKER, OURS])


def test_configure_keeps_spark_submit_jars_and_conf(tmp_path: Path) -> None:
    cmd = [
        str(SPARK_SUBMIT),
        "--master",
        "local[2]",
        "--jars",
        f"{kit_jar()},{batchlog.jar_path()}",
        "--conf",
        f"spark.sql.extensions={MARKER}",
        "--conf",
        f"spark.pyspark.python={sys.executable}",
        str(APP),
        str(tmp_path / "out"),
    ]
    check(run_app(cmd, {"PYSPARK_PYTHON": sys.executable}), [MARKER, OURS])
