"""Python exceptions for the errors the JVM side raises.

The messages (what is wrong, what to do) are written once, in ``io.batchlog.BatchLogException``;
each exception class here only names a JVM error ``code`` so callers can catch it.
"""

from __future__ import annotations

import re


class BatchLogError(Exception):
    """Base class of every batchlog error."""

    code = "BATCHLOG_ERROR"


class NotASinkError(BatchLogError):
    """The path is not a file-sink output (no ``_spark_metadata``)."""

    code = "NOT_A_SINK"


class CorruptLogError(BatchLogError):
    """A sink log file cannot be read: bad header or a malformed line."""

    code = "CORRUPT_LOG"


class MissingLogFileError(BatchLogError):
    """A sink log file the log needs is missing."""

    code = "MISSING_LOG_FILE"


class InvalidArgumentError(BatchLogError, ValueError):
    """An argument is out of range or malformed."""

    code = "INVALID_ARGUMENT"


class RaceCommittingBatchError(BatchLogError):
    """Another writer committed the same batch to the sink."""

    code = "RACE_COMMITTING_BATCH"


class NotACheckpointError(BatchLogError):
    """The path is not a streaming query checkpoint."""

    code = "NOT_A_CHECKPOINT"


class UnsupportedCheckpointError(BatchLogError):
    """A checkpoint piece cannot be rolled back, or belongs to another query."""

    code = "UNSUPPORTED_CHECKPOINT"


class BeyondHorizonError(BatchLogError):
    """The rewind target is older than the rewind horizon."""

    code = "BEYOND_REWIND_HORIZON"


class RewindInProgressError(BatchLogError):
    """A rewind of the sink did not finish; re-run it before anything else."""

    code = "REWIND_IN_PROGRESS"


class QueryActiveError(BatchLogError):
    """A query of this session is writing to the sink."""

    code = "QUERY_ACTIVE"


class WriterActiveError(BatchLogError):
    """A live query writes the sink (its writer lease is fresh); stop it, or force if it is dead."""

    code = "WRITER_ACTIVE"


class SinkOwnedByOtherQueryError(BatchLogError):
    """Another query owns the sink; each sink has one writer (see ``takeover``)."""

    code = "SINK_OWNED_BY_OTHER_QUERY"


class SinkChangedWhileWritingError(BatchLogError):
    """The sink was rewound, repaired or taken over under a running query, which stopped."""

    code = "SINK_CHANGED_WHILE_WRITING"


class BatchOutOfOrderError(BatchLogError):
    """The log accepts only the batch after its latest one."""

    code = "BATCH_OUT_OF_ORDER"


class UnsupportedSparkVersionError(BatchLogError):
    """The batchlog jar was built for another Spark line or Scala version than the one running."""

    code = "UNSUPPORTED_SPARK_VERSION"


class UpstreamRewoundError(BatchLogError):
    """A ``readStream.format("batchlog")`` query read batches its upstream sink has rewound."""

    code = "UPSTREAM_REWOUND"


class ForeignPathError(BatchLogError):
    """The sink's log names files outside its output directory; maintenance acts on none."""

    code = "FOREIGN_PATH"


class CheckpointInOutputError(BatchLogError):
    """A streaming query checkpoint lies inside the sink's output directory (vacuum refuses)."""

    code = "CHECKPOINT_IN_OUTPUT"


class BatchesExpiredError(BatchLogError):
    """A ``batchlog`` source must read batches that its upstream sink's retention dropped."""

    code = "BATCHES_EXPIRED"


class RepairInProgressError(BatchLogError):
    """A repair of the sink did not finish; no query writes to it until it does."""

    code = "REPAIR_IN_PROGRESS"


class WriterLeaseLostError(BatchLogError):
    """A running query could not keep its writer lease fresh and stopped before committing."""

    code = "WRITER_LEASE_LOST"


class CommitOutcomeUnknownError(BatchLogError):
    """A batch's log file publish failed without a definite answer; its data files are kept."""

    code = "COMMIT_OUTCOME_UNKNOWN"


def _all_errors(cls: type[BatchLogError]) -> list[type[BatchLogError]]:
    return [c for sub in cls.__subclasses__() for c in (sub, *_all_errors(sub))]


#: The exception class of each JVM error code (``BatchLogException.Codes``; a test checks both
#: sides name the same codes).
ERRORS_BY_CODE: dict[str, type[BatchLogError]] = {
    cls.code: cls for cls in _all_errors(BatchLogError)
}


def error_for_code(code: str, message: str) -> BatchLogError:
    """The Python exception for a JVM error ``code`` (``BatchLogError`` for an unknown one)."""
    # a message that went through SQL carries its code as a tag ([BATCHLOG.<CODE>]): said once
    untagged = re.sub(r"^\[BATCHLOG\.[A-Z_]+\]\s*", "", message)
    return ERRORS_BY_CODE.get(code, BatchLogError)(untagged)
