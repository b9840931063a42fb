"""The configuration a ``SparkSession.builder`` will end up with, before it starts a JVM.

``batchlog.configure`` adds to ``spark.jars`` and ``spark.sql.extensions``. Writing a builder
option replaces whatever else set that key, so it first reads what the session would have
without it, from every place Spark reads it, lowest precedence first:

1. ``spark-defaults.conf`` in ``SPARK_CONF_DIR`` (else ``SPARK_HOME/conf``), or the file of
   ``--properties-file`` (``spark-submit`` reads that one *instead*);
2. ``PYSPARK_SUBMIT_ARGS``: ``--conf k=v``, ``--jars``, ``--packages`` (``spark.jars.packages``);
3. a running JVM's ``SparkConf`` (a ``SparkContext``, or ``spark-submit``'s system properties for
   an application it launched), which already holds 1 and 2;
4. the builder's own options.

Nothing here starts a JVM.

Where pyspark itself launches the JVM (through ``spark-submit``, with the builder's options as
``--conf``), it sets the builder's options again over the conf that JVM started with. A builder
``spark.jars`` would so replace the jars ``spark-submit`` resolved for ``spark.jars.packages``
(``--packages``, Delta's ``configure_spark_with_delta_pip``): the driver still loads them, the
executors never get them. ``submit_jars`` hands batchlog's jar to ``spark-submit`` instead.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from pyspark import SparkContext
from pyspark.sql import SparkSession

#: spark-submit options that set a Spark property.
_SUBMIT_KEYS = {"--jars": "spark.jars", "--packages": "spark.jars.packages"}
_SUBMIT_ENV = "PYSPARK_SUBMIT_ARGS"


def _read_properties(path: Path) -> dict[str, str]:
    """A ``spark-defaults.conf`` (Java properties: ``key value``, ``key=value`` or ``key:value``
    lines, ``#`` and ``!`` comments)."""
    out: dict[str, str] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return out
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        m = re.match(r"([^\s=:]+)\s*[\s=:]\s*(.*)", line)
        if m:
            out[m.group(1)] = m.group(2).strip()
    return out


def _submit_args() -> list[str]:
    return shlex.split(os.environ.get(_SUBMIT_ENV, ""))


def _parse_submit_args(args: list[str]) -> tuple[dict[str, str], str | None]:
    """The properties ``PYSPARK_SUBMIT_ARGS`` sets, and its ``--properties-file``. ``--jars`` and
    ``--packages`` win over ``--conf spark.jars=``/``spark.jars.packages=``, as in spark-submit."""
    props: dict[str, str] = {}
    explicit: dict[str, str] = {}
    properties_file = None
    i = 0
    while i < len(args):
        a, value = args[i], args[i + 1] if i + 1 < len(args) else None
        name, eq, inline = a.partition("=")
        if eq and name in (*_SUBMIT_KEYS, "--properties-file"):
            a, value, i = name, inline, i - 1
        if a in ("--conf", "-c") and value is not None and "=" in value:
            k, _, v = value.partition("=")
            props[k] = v
            i += 2
        elif a in _SUBMIT_KEYS and value is not None:
            explicit[_SUBMIT_KEYS[a]] = value
            i += 2
        elif a == "--properties-file" and value is not None:
            properties_file = value
            i += 2
        else:
            i += 1
    props.update(explicit)
    return props, properties_file


def _defaults_file(properties_file: str | None) -> Path | None:
    if properties_file:
        return Path(properties_file)
    conf_dir = os.environ.get("SPARK_CONF_DIR")
    if not conf_dir and os.environ.get("SPARK_HOME"):
        conf_dir = str(Path(os.environ["SPARK_HOME"]) / "conf")
    return Path(conf_dir) / "spark-defaults.conf" if conf_dir else None


def _running_jvm_conf() -> dict[str, str] | None:
    """The ``SparkConf`` of a JVM that is already up (a context, or spark-submit's app JVM)."""
    sc = SparkContext._active_spark_context
    if sc is not None:
        return dict(sc.getConf().getAll())
    if SparkContext._jvm is None and "PYSPARK_GATEWAY_PORT" in os.environ:
        # an application spark-submit launched: its JVM is up, with --jars, --conf and the
        # defaults file in its system properties; connecting to it starts nothing
        SparkContext._ensure_initialized()
    if SparkContext._jvm is not None:
        from pyspark import SparkConf

        return dict(SparkConf().getAll())
    return None


@dataclass(frozen=True)
class EffectiveConf:
    """What a builder's session will have, by key; see the module's text."""

    values: Mapping[str, str] = field(default_factory=dict)

    @staticmethod
    def of(builder: SparkSession.Builder) -> EffectiveConf:
        merged: dict[str, str] = {}
        running = _running_jvm_conf()
        if running is not None:
            merged.update(running)
        else:
            props, properties_file = _parse_submit_args(_submit_args())
            defaults = _defaults_file(properties_file)
            if defaults is not None:
                merged.update(_read_properties(defaults))
            merged.update(props)
        merged.update({k: str(v) for k, v in getattr(builder, "_options", {}).items()})
        return EffectiveConf(merged)

    def list_value(self, key: str) -> list[str]:
        """A comma-separated setting as a list, blanks dropped, order kept."""
        return [v.strip() for v in self.values.get(key, "").split(",") if v.strip()]


def local_path(jar: str) -> str:
    """A jar's local path whether it is written ``/p``, ``file:/p`` or ``file:///p``."""
    parsed = urlparse(jar)
    return parsed.path if parsed.scheme in ("", "file") else jar


#: A batchlog jar by its file name: as built (``batchlog-spark-4.2_2.13.jar``), from Maven
#: (``batchlog-spark-4.2_2.13-0.1.0.jar``) or as ``--packages`` retrieves it into Ivy's ``jars/``
#: (``io.batchlog_batchlog-spark-4.2_2.13-0.1.0.jar``).
_BATCHLOG_JAR = re.compile(r"^(io\.batchlog_)?batchlog-spark-\d+\.\d+_\d+\.\d+(-\d[^/]*)?\.jar$")


def is_batchlog_jar(jar: str) -> bool:
    """True for a path or URI whose file name is a batchlog jar's (not its sources or docs)."""
    name = local_path(jar).rstrip("/").rsplit("/", 1)[-1]
    return bool(_BATCHLOG_JAR.match(name)) and not name.endswith(("-sources.jar", "-javadoc.jar"))


def with_batchlog_jar(jars: list[str], jar: str) -> list[str]:
    """``jars`` with batchlog's ``jar`` appended unless it is there already (in any of its
    spellings), or another batchlog jar is (say ``--packages io.batchlog:...`` fetched it): two
    on one class path would be one too many."""
    have = {local_path(j) for j in jars}
    if local_path(jar) in have or any(map(is_batchlog_jar, jars)):
        return jars
    return [*jars, jar]


def packages_resolved_at_launch(builder: SparkSession.Builder, effective: EffectiveConf) -> bool:
    """True if pyspark will launch the JVM through ``spark-submit`` (none runs yet), which will
    resolve ``spark.jars.packages`` and add those jars to ``spark.jars``, and the builder has no
    ``spark.jars`` of its own: a builder option ``spark.jars`` would then replace that list."""
    return (
        SparkContext._jvm is None
        and "spark.jars" not in getattr(builder, "_options", {})
        and bool(effective.list_value("spark.jars.packages"))
    )


def submit_jars(jars: list[str]) -> None:
    """Sets the ``--jars`` of ``PYSPARK_SUBMIT_ARGS`` (pyspark's default ``pyspark-shell`` when
    unset) to ``jars``: spark-submit adds the jars it resolves for packages to that list."""
    args = _submit_args() or ["pyspark-shell"]
    value = ",".join(jars)
    for i, a in enumerate(args):
        if a == "--jars" and i + 1 < len(args):
            args[i + 1] = value
            break
        if a.startswith("--jars="):
            args[i] = "--jars=" + value
            break
    else:
        args = ["--jars", value, *args]
    os.environ[_SUBMIT_ENV] = shlex.join(args)


def add_submit_jar(jar: str) -> None:
    """Adds ``jar`` to the ``--jars`` of ``PYSPARK_SUBMIT_ARGS`` if it has one and no JVM runs
    yet: ``spark-submit`` takes that list over ``--conf spark.jars`` for the driver."""
    if SparkContext._jvm is not None:
        return
    args = _submit_args()
    for i, a in enumerate(args):
        if a == "--jars" and i + 1 < len(args):
            args[i + 1] = ",".join(with_batchlog_jar([j for j in args[i + 1].split(",") if j], jar))
            os.environ[_SUBMIT_ENV] = shlex.join(args)
            return
        if a.startswith("--jars="):
            jars = [j for j in a[len("--jars=") :].split(",") if j]
            args[i] = "--jars=" + ",".join(with_batchlog_jar(jars, jar))
            os.environ[_SUBMIT_ENV] = shlex.join(args)
            return
