"""Which batchlog jar to put on Spark's class path.

The wheel carries one jar per Spark line, ``jars/batchlog-spark-<line>_<scala>.jar`` (the build's
table of lines is ``project/spark-lines.tsv``; the jars present are what this installation
supports). The right one is the jar for the installed pyspark's ``major.minor`` and the Scala
version of the Spark jars pyspark will launch: ``$SPARK_HOME/jars`` when ``SPARK_HOME`` is set (as
pyspark itself does), else the jars inside the pyspark package. ``$BATCHLOG_JAR`` overrides it all.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from batchlog.errors import BatchLogError, UnsupportedSparkVersionError

#: The jars shipped with this package.
JARS_DIR = Path(__file__).parent / "jars"

_JAR = re.compile(r"^batchlog-spark-(\d+\.\d+)_(\d+\.\d+)\.jar$")
_SCALA_LIBRARY = re.compile(r"^scala-library-(\d+\.\d+)\.\d+.*\.jar$")

SUPPORTED_PYSPARK = ">=3.5,<4.4"


def shipped_jars(jars_dir: Path) -> dict[tuple[str, str], Path]:
    """The jars in ``jars_dir`` by (Spark line, Scala binary version)."""
    if not jars_dir.is_dir():
        return {}
    found = {}
    for f in jars_dir.iterdir():
        m = _JAR.match(f.name)
        if m:
            found[(m.group(1), m.group(2))] = f
    return found


def spark_jars_dir() -> Path | None:
    """The Spark jars pyspark will launch: ``$SPARK_HOME/jars``, else pyspark's own."""
    home = os.environ.get("SPARK_HOME")
    if home:
        return Path(home) / "jars"
    import pyspark

    return Path(pyspark.__file__).resolve().parent / "jars"


def scala_binary_of(jars_dir: Path | None) -> str | None:
    """The Scala binary version (``2.13``) of the ``scala-library`` jar in ``jars_dir``, if any."""
    if jars_dir is None or not jars_dir.is_dir():
        return None
    for f in jars_dir.iterdir():
        m = _SCALA_LIBRARY.match(f.name)
        if m:
            return m.group(1)
    return None


def _describe(jars: dict[tuple[str, str], Path]) -> str:
    return ", ".join(f"Spark {line} (Scala {scala})" for line, scala in sorted(jars))


def select_jar(jars_dir: Path, spark_version: str, scala_binary: str | None) -> Path:
    """The jar in ``jars_dir`` for pyspark ``spark_version`` on Scala ``scala_binary``.

    ``scala_binary`` None (no scala-library jar found) is fine when the line has jars for one
    Scala version only. Raises :class:`UnsupportedSparkVersionError` naming what is shipped.
    """
    jars = shipped_jars(jars_dir)
    if not jars:
        raise BatchLogError(
            f"no batchlog jar in {jars_dir}. From a source checkout, build it with "
            "`dev/sbt copyJarToPython` (the primary Spark line) or `dev/package` (every line); "
            "or set BATCHLOG_JAR to a jar's path."
        )
    line = ".".join(spark_version.split(".")[:2])
    for_line = {scala: jar for (ln, scala), jar in jars.items() if ln == line}
    if scala_binary is not None and scala_binary in for_line:
        return for_line[scala_binary]
    if scala_binary is None and len(for_line) == 1:
        return next(iter(for_line.values()))
    scala_txt = f"Scala {scala_binary}" if scala_binary else "an unknown Scala version"
    if for_line:
        problem = (
            f"pyspark {spark_version} runs Spark {line} on {scala_txt}, and this batchlog ships "
            f"Spark {line} only for Scala {', '.join(sorted(for_line))}"
        )
    else:
        problem = f"pyspark {spark_version} (Spark {line}, {scala_txt}) is not supported"
    raise UnsupportedSparkVersionError(
        f"{problem}. This batchlog installation ships jars for {_describe(jars)}. Install a "
        f'supported pyspark (pip install "pyspark{SUPPORTED_PYSPARK}"), or point SPARK_HOME at a '
        "Spark of a supported line and Scala version, or set BATCHLOG_JAR to a jar built for "
        "yours."
    )


def jar_path() -> str:
    """The batchlog jar for the installed pyspark: ``$BATCHLOG_JAR`` if set, else the shipped jar
    for pyspark's Spark line and the Scala version of the Spark jars it launches.

    Raises :class:`~batchlog.UnsupportedSparkVersionError` for a Spark line or Scala version no
    shipped jar is built for, :class:`~batchlog.BatchLogError` when no jar is shipped at all.
    """
    env = os.environ.get("BATCHLOG_JAR")
    if env:
        if not Path(env).is_file():
            raise BatchLogError(f"BATCHLOG_JAR={env} is not a file: point it at a batchlog jar.")
        return env
    import pyspark

    return str(select_jar(JARS_DIR, pyspark.__version__, scala_binary_of(spark_jars_dir())))
