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

import importlib
from typing import TYPE_CHECKING, Any

from batchlog._names import (
    COMMIT_PROTOCOL_CLASS,
    COMMIT_PROTOCOL_KEY,
    EXTENSIONS_CLASS,
    EXTENSIONS_KEY,
)
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

if TYPE_CHECKING:
    from batchlog import reports
    from batchlog._configure import configure
    from batchlog._jars import jar_path
    from batchlog._jvm import await_query, query_error, query_exception
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

#: Where each name that needs pyspark lives: imported at its first use, so that ``batchlog.arrow``
#: and ``batchlog.errors`` (no Spark, no JVM) import without pyspark.
_LAZY: dict[str, str] = {
    "configure": "batchlog._configure",
    "jar_path": "batchlog._jars",
    "SinkLog": "batchlog.sinklog",
    "await_query": "batchlog._jvm",
    "query_error": "batchlog._jvm",
    "query_exception": "batchlog._jvm",
    "Action": "batchlog.ops",
    "adopt": "batchlog.ops",
    "adopt_action": "batchlog.ops",
    "cascade_action": "batchlog.ops",
    "read": "batchlog.ops",
    "repair": "batchlog.ops",
    "repair_action": "batchlog.ops",
    "rewind": "batchlog.ops",
    "rewind_action": "batchlog.ops",
    "takeover": "batchlog.ops",
    "takeover_action": "batchlog.ops",
    "vacuum": "batchlog.ops",
    "vacuum_action": "batchlog.ops",
    "verify": "batchlog.ops",
}


def __getattr__(name: str) -> Any:
    if name == "reports":
        return importlib.import_module("batchlog.reports")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'batchlog' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


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
