"""batchlog: a batch-tagged metadata log for Spark Structured Streaming file sinks.

Every entry of the sink's ``_spark_metadata`` log, in batch and compact files alike, keeps the
micro-batch that wrote it, so a sink can be inspected, read and rewound by batch. The work is done
in the JVM (``io.batchlog``); this package wraps it.

Enable it on a session::

    spark = batchlog.configure(SparkSession.builder).getOrCreate()

or on an existing one (the jar must already be on the class path)::

    spark.conf.set("spark.sql.streaming.commitProtocolClass", batchlog.COMMIT_PROTOCOL_CLASS)
"""

from __future__ import annotations

from pyspark.sql import SparkSession

from batchlog import _effective_conf, _sql, reports
from batchlog._jars import jar_path
from batchlog._jvm import await_query, query_error, query_exception
from batchlog.errors import (
    BatchesExpiredError,
    BatchLogError,
    BatchOutOfOrderError,
    BeyondHorizonError,
    CheckpointInOutputError,
    CommitOutcomeUnknownError,
    CorruptLogError,
    ForeignPathError,
    InvalidArgumentError,
    MissingLogFileError,
    NotACheckpointError,
    NotASinkError,
    QueryActiveError,
    RaceCommittingBatchError,
    RepairInProgressError,
    RewindInProgressError,
    SinkChangedWhileWritingError,
    SinkOwnedByOtherQueryError,
    UnsupportedCheckpointError,
    UnsupportedSparkVersionError,
    UpstreamRewoundError,
    WriterActiveError,
    WriterLeaseLostError,
)
from batchlog.ops import (
    Action,
    adopt,
    adopt_action,
    cascade_action,
    read,
    repair,
    repair_action,
    rewind,
    rewind_action,
    takeover,
    takeover_action,
    vacuum,
    vacuum_action,
    verify,
)
from batchlog.sinklog import SinkLog

__all__ = [
    "COMMIT_PROTOCOL_CLASS",
    "COMMIT_PROTOCOL_KEY",
    "EXTENSIONS_CLASS",
    "EXTENSIONS_KEY",
    "Action",
    "cascade_action",
    "BatchesExpiredError",
    "BatchLogError",
    "BatchOutOfOrderError",
    "BeyondHorizonError",
    "CheckpointInOutputError",
    "CorruptLogError",
    "ForeignPathError",
    "InvalidArgumentError",
    "MissingLogFileError",
    "NotACheckpointError",
    "NotASinkError",
    "QueryActiveError",
    "RaceCommittingBatchError",
    "RepairInProgressError",
    "RewindInProgressError",
    "SinkChangedWhileWritingError",
    "SinkLog",
    "SinkOwnedByOtherQueryError",
    "UnsupportedCheckpointError",
    "UnsupportedSparkVersionError",
    "UpstreamRewoundError",
    "WriterLeaseLostError",
    "CommitOutcomeUnknownError",
    "WriterActiveError",
    "adopt",
    "adopt_action",
    "await_query",
    "configure",
    "jar_path",
    "query_error",
    "query_exception",
    "read",
    "repair",
    "repair_action",
    "reports",
    "rewind",
    "rewind_action",
    "takeover",
    "takeover_action",
    "vacuum",
    "vacuum_action",
    "verify",
]

#: The value for ``spark.sql.streaming.commitProtocolClass``: the name of the JVM class
#: ``io.batchlog.BatchTaggedCommitProtocol`` (tests check it against the jar).
COMMIT_PROTOCOL_CLASS = "io.batchlog.BatchTaggedCommitProtocol"

#: Spark's key that selects the sink's commit protocol. Needed before a JVM exists (to build a
#: session), so it is written here too; a test checks it against ``BatchLogConf.CommitProtocolKey``.
COMMIT_PROTOCOL_KEY = "spark.sql.streaming.commitProtocolClass"


#: Spark's key for session extensions, and batchlog's: the ``BATCHLOG`` SQL statements and the
#: ``batchlog_*`` table functions (``io.batchlog.sql.BatchLogExtensions``; a test checks both).
EXTENSIONS_KEY = "spark.sql.extensions"
EXTENSIONS_CLASS = _sql.EXTENSIONS_CLASS


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
