"""``SinkLog``: a read-only view of a file sink's batch-tagged log."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from batchlog._jvm import jvm_errors
from batchlog.ops import sink, to_report
from batchlog.reports import SinkSummary


class SinkLog:
    """The log of the file sink whose output directory is ``path``.

    Wraps ``io.batchlog.BatchLog``. Reads logs written with or without batchlog: an entry whose
    batch cannot be proven is *untagged* (``batch_of`` returns ``None`` for it).

    >>> log = SinkLog(spark, "/data/out")
    >>> log.latest_batch(), log.files(7)[:1]
    """

    def __init__(self, spark: SparkSession, path: str) -> None:
        self._spark = spark
        self.path = path
        self._j = sink(spark, path)
        with jvm_errors():
            self._j.metadataPath()  # fails now, with NotASinkError, for a path that is no sink

    def latest_batch(self) -> int | None:
        """The latest committed batch id, or ``None`` if the sink has committed nothing."""
        with jvm_errors():
            latest = int(self._j.latestBatch())
        return None if latest < 0 else latest

    def batches(self) -> list[int]:
        """Ids of the batches that wrote at least one live file, ascending."""
        with jvm_errors():
            return [int(b) for b in self._j.batches()]

    def files(self, batch: int) -> list[str]:
        """Paths (URIs, as logged) of the live files written by ``batch``."""
        with jvm_errors():
            return [str(p) for p in self._j.files(int(batch))]

    def batch_of(self, path: str) -> int | None:
        """The batch that wrote ``path``; ``None`` if untagged.

        Raises ``KeyError`` if the log does not hold ``path``.
        """
        with jvm_errors():
            b = self._j.batchOf(path)
        if b is None:
            raise KeyError(f"{path} is not a live file of the sink {self.path}")
        return None if int(b) < 0 else int(b)

    def entries(self) -> DataFrame:
        """All live entries with their ``batchId`` (null if untagged), read by Spark.

        Columns: path, size, isDir, modificationTime, blockReplication, blockSize, action,
        batchId. Nothing is collected on the driver.
        """
        with jvm_errors():
            return DataFrame(self._j.entries(), self._spark)

    def inspect(self, checkpoint: str | None = None) -> SinkSummary:
        """Compaction state, log files, per-batch file counts and bytes, and the rewind horizon.

        ``horizon`` is the oldest batch a rewind can reach: the sink's tagged lineage and, given
        the query's ``checkpoint``, what the checkpoint retains (``min_batches_to_retain``).
        """
        with jvm_errors():
            j = self._j.inspect() if checkpoint is None else self._j.inspect(checkpoint)
            return to_report(self._spark, SinkSummary, j)
