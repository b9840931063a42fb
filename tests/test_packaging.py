"""The wheel and the jar it hands to Spark: one jar per Spark line, the one matching the installed
pyspark (and the Scala version of the Spark it launches) chosen, a clear error for any other.

Selection runs on real folders of real files named as the wheel names them; the wheel test builds
the real wheel with ``dev/package`` (from copies of the built jar under every line's name) and
opens it."""

from __future__ import annotations

import shutil
import subprocess
import zipfile
from pathlib import Path

import batchlog
import pytest
from batchlog import _jars
from conftest import REPO
from support import project_version

LINES = [
    line.split("\t")
    for line in (REPO / "project" / "spark-lines.tsv").read_text().splitlines()
    if line.strip() and not line.startswith("#")
]
#: (pyspark release, Scala binary, jar) for every row of the table.
ROWS = [
    (
        r[1],
        ".".join(r[2].split(".")[:2]),
        f"batchlog-spark-{r[0]}_{'.'.join(r[2].split('.')[:2])}.jar",
    )
    for r in LINES
]


@pytest.fixture
def shipped(tmp_path: Path) -> Path:
    """A jars folder as the wheel has it: one (empty) jar per row of the table, plus noise."""
    d = tmp_path / "jars"
    d.mkdir()
    for _, _, jar in ROWS:
        (d / jar).write_bytes(b"")
    (d / "README.txt").write_text("not a jar")
    (d / "batchlog.jar").write_bytes(b"")  # the old single-jar name: ignored
    return d


def spark_home(tmp_path: Path, scala: str) -> Path:
    """A SPARK_HOME-like folder whose jars/ holds scala-library ``scala``."""
    jars = tmp_path / f"spark-{scala}" / "jars"
    jars.mkdir(parents=True)
    (jars / f"scala-library-{scala}.jar").write_bytes(b"")
    (jars / "spark-core_2.13-4.0.0.jar").write_bytes(b"")
    return jars.parent


def test_the_table_has_every_supported_line() -> None:
    assert [(r[0], r[1]) for r in LINES] == [
        ("3.5", "3.5.9"), ("3.5", "3.5.9"), ("4.0", "4.0.5"), ("4.1", "4.1.4"),
        ("4.2", "4.2.1"), ("4.3", "4.3.0"),
    ]  # fmt: skip


@pytest.mark.parametrize(("pyspark", "scala", "jar"), ROWS)
def test_each_pyspark_gets_its_lines_jar(shipped: Path, pyspark: str, scala: str, jar: str) -> None:
    assert _jars.select_jar(shipped, pyspark, scala) == shipped / jar
    # another patch release of the same line takes the same jar
    patch = ".".join(pyspark.split(".")[:2] + ["0"])
    assert _jars.select_jar(shipped, patch, scala).name == jar


def test_scala_comes_from_spark_home_when_set(
    shipped: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # pyspark 3.5 ships Scala 2.12; a SPARK_HOME with Spark 3.5 for Scala 2.13 takes the 2.13 jar.
    monkeypatch.setenv("SPARK_HOME", str(spark_home(tmp_path, "2.13.8")))
    assert _jars.scala_binary_of(_jars.spark_jars_dir()) == "2.13"
    chosen = _jars.select_jar(shipped, "3.5.9", _jars.scala_binary_of(_jars.spark_jars_dir()))
    assert chosen.name == "batchlog-spark-3.5_2.13.jar"
    monkeypatch.setenv("SPARK_HOME", str(spark_home(tmp_path, "2.12.18")))
    chosen = _jars.select_jar(shipped, "3.5.9", _jars.scala_binary_of(_jars.spark_jars_dir()))
    assert chosen.name == "batchlog-spark-3.5_2.12.jar"


def test_without_spark_home_scala_is_the_installed_pysparks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SPARK_HOME", raising=False)
    import pyspark

    jars = _jars.spark_jars_dir()
    assert jars == Path(pyspark.__file__).resolve().parent / "jars"
    assert _jars.scala_binary_of(jars) == "2.13"  # pyspark 4.3.0


def test_unknown_scala_is_fine_where_a_line_has_one(shipped: Path) -> None:
    assert _jars.select_jar(shipped, "4.1.4", None).name == "batchlog-spark-4.1_2.13.jar"
    with pytest.raises(batchlog.UnsupportedSparkVersionError) as e:
        _jars.select_jar(shipped, "3.5.9", None)
    assert "Spark 3.5 only for Scala 2.12, 2.13" in str(e.value)


@pytest.mark.parametrize("pyspark", ["3.4.1", "4.4.0", "5.0.0"])
def test_an_unsupported_pyspark_is_refused_naming_what_is_shipped(
    shipped: Path, pyspark: str
) -> None:
    with pytest.raises(batchlog.UnsupportedSparkVersionError) as e:
        _jars.select_jar(shipped, pyspark, "2.13")
    line = ".".join(pyspark.split(".")[:2])
    assert str(e.value) == (
        f"pyspark {pyspark} (Spark {line}, Scala 2.13) is not supported. This batchlog "
        "installation ships jars for Spark 3.5 (Scala 2.12), Spark 3.5 (Scala 2.13), Spark 4.0 "
        "(Scala 2.13), Spark 4.1 (Scala 2.13), Spark 4.2 (Scala 2.13), Spark 4.3 (Scala 2.13). "
        'Install a supported pyspark (pip install "pyspark>=3.5,<4.4"), or point SPARK_HOME at '
        "a Spark of a supported line and Scala version, or set BATCHLOG_JAR to a jar built for "
        "yours."
    )
    assert isinstance(e.value, batchlog.BatchLogError)


def test_a_scala_the_line_lacks_is_refused(shipped: Path) -> None:
    with pytest.raises(batchlog.UnsupportedSparkVersionError) as e:
        _jars.select_jar(shipped, "4.0.5", "2.12")
    assert str(e.value).startswith(
        "pyspark 4.0.5 runs Spark 4.0 on Scala 2.12, and this batchlog ships Spark 4.0 only for "
        "Scala 2.13."
    )


def test_no_jar_at_all_says_how_to_build(tmp_path: Path) -> None:
    with pytest.raises(batchlog.BatchLogError) as e:
        _jars.select_jar(tmp_path / "empty", "4.3.0", "2.13")
    assert "dev/sbt copyJarToPython" in str(e.value) and "dev/package" in str(e.value)


def test_batchlog_jar_overrides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    jar = tmp_path / "mine.jar"
    jar.write_bytes(b"")
    monkeypatch.setenv("BATCHLOG_JAR", str(jar))
    assert batchlog.jar_path() == str(jar)
    monkeypatch.setenv("BATCHLOG_JAR", str(tmp_path / "missing.jar"))
    with pytest.raises(batchlog.BatchLogError, match="is not a file"):
        batchlog.jar_path()


def test_the_wheel_carries_one_jar_per_line(batchlog_jar: str, tmp_path: Path) -> None:
    jars = tmp_path / "jars"
    jars.mkdir()
    for _, _, jar in ROWS:
        shutil.copyfile(batchlog_jar, jars / jar)
    out = tmp_path / "dist"
    proc = subprocess.run(
        [str(REPO / "dev" / "package"), "--no-build", "--jars-dir", str(jars), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [wheel] = list(out.glob("batchlog-*-py3-none-any.whl"))
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert sorted(n for n in names if n.startswith("batchlog/jars/")) == sorted(
        f"batchlog/jars/{jar}" for _, _, jar in ROWS
    )
    assert "Requires-Dist: pyspark<4.4,>=3.5" in meta
    assert "batchlog/__main__.py" in names and "batchlog/py.typed" in names
    # what a registry (PyPI) checks, and what a user reads there
    for field in (
        "License-Expression: Apache-2.0",
        "License-File: LICENSE",
        "Requires-Python: >=3.9",
        "Classifier: Programming Language :: Python :: 3.13",
        "Classifier: Typing :: Typed",
        "Project-URL: Homepage, https://github.com/batchlog/batchlog",
        "Provides-Extra: arrow",
        "Description-Content-Type: text/markdown",
    ):
        assert field in meta, field
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    twine = subprocess.run(
        [str(REPO / ".venv" / "bin" / "twine"), "check", "--strict", str(wheel)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert twine.returncode == 0 and "PASSED" in twine.stdout, twine.stdout + twine.stderr
    # a fresh virtualenv: the wheel alone (and its pyspark), then the CLI's --version
    venv = tmp_path / "venv"
    install = subprocess.run(
        [str(REPO / "dev" / "pip-install"), str(venv), f"{wheel}[arrow]", _pin("pyspark")],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    version = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "batchlog", "--version"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,  # not the repository: the installed package, not python/
    )
    assert version.returncode == 0, version.stderr
    site = next((venv / "lib").glob("python3*/site-packages"))
    pyspark = _pin("pyspark").split("==")[1]
    assert version.stdout.splitlines() == [
        f"batchlog {project_version()}",
        f"jar {site}/batchlog/jars/batchlog-spark-4.3_2.13.jar for pyspark {pyspark}",
    ]


def _pin(package: str) -> str:
    """``package==version`` as python/requirements-dev.txt pins it (the primary line's pyspark)."""
    lines = (REPO / "python" / "requirements-dev.txt").read_text().splitlines()
    return next(line for line in lines if line.startswith(f"{package}=="))


def test_package_refuses_a_wheel_that_lacks_a_line(tmp_path: Path) -> None:
    jars = tmp_path / "jars"
    jars.mkdir()
    (jars / "batchlog-spark-4.3_2.13.jar").write_bytes(b"")
    proc = subprocess.run(
        [
            str(REPO / "dev" / "package"),
            "--no-build",
            "--jars-dir",
            str(jars),
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 1
    assert "lacks batchlog-spark-3.5_2.12.jar batchlog-spark-3.5_2.13.jar" in proc.stderr
    assert not list(tmp_path.glob("*.whl"))


# ---- Maven Central's rules (dev/maven-check) -------------------------------------------------

POM = """<?xml version='1.0' encoding='UTF-8'?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion><groupId>io.batchlog</groupId>
  <artifactId>batchlog-spark-4.3_2.13</artifactId><version>0.1.0</version>
  <name>batchlog-spark-4.3</name><description>d</description><url>https://x.example</url>
  <licenses><license><name>Apache-2.0</name><url>https://x.example/l</url></license></licenses>
  <scm><url>https://x.example</url><connection>scm:git:https://x.example.git</connection></scm>
  DEVELOPERS
</project>
"""


def _artifact(repo: Path, developers: bool = True) -> Path:
    """A Maven repository folder holding one artifact as sbt publishes it (sums beside each)."""
    import hashlib

    d = repo / "io" / "batchlog" / "batchlog-spark-4.3_2.13" / "0.1.0"
    d.mkdir(parents=True)
    base = "batchlog-spark-4.3_2.13-0.1.0"
    dev = "<developers><developer><name>n</name></developer></developers>" if developers else ""
    (d / f"{base}.pom").write_text(POM.replace("DEVELOPERS", dev))
    for suffix, member in (
        ("", "io/A.class"),
        ("-sources", "io/A.scala"),
        ("-javadoc", "index.html"),
    ):
        with zipfile.ZipFile(d / f"{base}{suffix}.jar", "w") as z:
            z.writestr(member, "x")
    for f in list(d.iterdir()):
        for algo in ("md5", "sha1"):
            (d / f"{f.name}.{algo}").write_text(hashlib.new(algo, f.read_bytes()).hexdigest())
    return d


def _maven_check(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(REPO / ".venv" / "bin" / "python"),
            str(REPO / "dev" / "maven-check"),
            str(repo),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_maven_check_passes_a_complete_artifact_and_names_each_missing_part(tmp_path: Path) -> None:
    good = _maven_check(_artifact(tmp_path / "good").parents[3])
    assert good.returncode == 0, good.stdout
    assert "batchlog-spark-4.3_2.13:0.1.0  ok" in good.stdout

    d = _artifact(tmp_path / "bad", developers=False)
    (d / "batchlog-spark-4.3_2.13-0.1.0-javadoc.jar").unlink()
    (d / "batchlog-spark-4.3_2.13-0.1.0.jar.sha1").write_text("0" * 40)
    bad = _maven_check(
        d.parents[3], "--require", "batchlog-spark-4.3_2.13", "batchlog-spark-3.5_2.12"
    )
    assert bad.returncode == 1
    assert bad.stdout.splitlines()[1:3] == [
        "batchlog-spark-4.3_2.13:0.1.0  FAILS: no developer name; "
        "batchlog-spark-4.3_2.13-0.1.0.jar.sha1 does not match; "
        "no batchlog-spark-4.3_2.13-0.1.0-javadoc.jar",
        "batchlog-spark-3.5_2.12        FAILS: not in the repository",
    ]
