"""Names batchlog's Python side needs before any JVM exists; tests check each against the jar."""

from __future__ import annotations

#: The value for ``spark.sql.streaming.commitProtocolClass``: the name of the JVM class
#: ``io.batchlog.BatchTaggedCommitProtocol`` (tests check it against the jar).
COMMIT_PROTOCOL_CLASS = "io.batchlog.BatchTaggedCommitProtocol"

#: Spark's key that selects the sink's commit protocol. Needed before a JVM exists (to build a
#: session), so it is written here too; a test checks it against ``BatchLogConf.CommitProtocolKey``.
COMMIT_PROTOCOL_KEY = "spark.sql.streaming.commitProtocolClass"

#: Spark's key for session extensions, and batchlog's: the ``BATCHLOG`` SQL statements and the
#: ``batchlog_*`` table functions (``io.batchlog.sql.BatchLogExtensions``; a test checks both).
EXTENSIONS_KEY = "spark.sql.extensions"
EXTENSIONS_CLASS = "io.batchlog.sql.BatchLogExtensions"
