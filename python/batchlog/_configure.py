"""``batchlog.configure``: batchlog added to a ``SparkSession`` builder's configuration."""

from __future__ import annotations

from pyspark.sql import SparkSession

from batchlog import _effective_conf
from batchlog._jars import jar_path
from batchlog._names import (
    COMMIT_PROTOCOL_CLASS,
    COMMIT_PROTOCOL_KEY,
    EXTENSIONS_CLASS,
    EXTENSIONS_KEY,
)


def configure(builder: SparkSession.Builder) -> SparkSession.Builder:
    """``builder`` with batchlog added to the session's effective configuration: its jar for the
    installed pyspark (:func:`jar_path`) added to ``spark.jars``, its commit protocol set and its
    SQL extensions appended to ``spark.sql.extensions`` (they also stop a query that is not its
    sink's writer as it starts, before Spark's sink skips its batches).

    Added, never replaced: the jars and extensions the session would have without this call stay,
    in their order, wherever they were set (:mod:`batchlog._effective_conf`): the builder's own
    options, a running ``SparkContext``, ``spark-defaults.conf`` and ``PYSPARK_SUBMIT_ARGS``
    (``--jars``, ``--packages``, ``--conf``) as ``pyspark`` and ``spark-submit`` load them. Where
    ``PYSPARK_SUBMIT_ARGS`` names ``--jars`` and the JVM is not started yet, the jar is added there
    too: ``spark-submit`` puts that list, not ``spark.jars``, on the driver's class path. Where
    the JVM is not started yet and packages are to be fetched (``spark.jars.packages``, as
    Delta's ``configure_spark_with_delta_pip`` sets: call it before this) and the builder sets no
    ``spark.jars``, the jars go to ``PYSPARK_SUBMIT_ARGS``'s ``--jars`` only, so that the packages'
    jars spark-submit adds to ``spark.jars`` stay there for the executors. A batchlog jar already
    on the list (``--packages io.batchlog:...``) is not added twice.
    """
    effective = _effective_conf.EffectiveConf.of(builder)
    jars = _effective_conf.with_batchlog_jar(effective.list_value("spark.jars"), jar_path())
    extensions = effective.list_value(EXTENSIONS_KEY)
    if EXTENSIONS_CLASS not in extensions:
        extensions.append(EXTENSIONS_CLASS)
    builder = builder.config(COMMIT_PROTOCOL_KEY, COMMIT_PROTOCOL_CLASS).config(
        EXTENSIONS_KEY, ",".join(extensions)
    )
    if _effective_conf.packages_resolved_at_launch(builder, effective):
        _effective_conf.submit_jars(jars)
        return builder
    _effective_conf.add_submit_jar(jar_path())
    return builder.config("spark.jars", ",".join(jars))
