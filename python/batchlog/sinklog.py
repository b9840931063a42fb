"""``SinkLog``: a read-only view of a file sink's batch-tagged log."""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession

from batchlog import _sql
from batchlog._jvm import jvm_errors
from batchlog.ops import sink, to_report
from batchlog.reports import SinkHistory, SinkSummary, from_json


class SinkLog:
    """The log of the file sink whose output directory is ``path``.

    Wraps ``io.batchlog.BatchLog``. Reads logs written with or without batchlog: an entry whose
    batch cannot be proven is *untagged* (``batch_of`` returns ``None`` for it).

    >>> log = SinkLog(spark, "/data/out")
    >>> log.latest_batch(), log.files(7)[:1]

    Over Spark Connect (no JVM gateway) it reads through batchlog's SQL table functions, which
    the server must have (``spark.sql.extensions=io.batchlog.sql.BatchLogExtensions``).
    """

    def __init__(self, spark: SparkSession, path: str) -> None:
        self._spark = spark
        self.path = path
        self._remote = _sql.is_remote(spark)
        self._j: Any = None
        if self._remote:
            self.latest_batch()  # fails now, with NotASinkError, for a path that is no sink
            return
        self._j = sink(spark, path)
        with jvm_errors():
            self._j.metadataPath()  # fails now, with NotASinkError, for a path that is no sink

    def _table(self, function: str, *args: str | int) -> list[int | None]:
        return [r[0] for r in _sql.table(self._spark, function, self.path, *args)]

    def latest_batch(self) -> int | None:
        """The latest committed batch id, or ``None`` if the sink has committed nothing."""
        if self._remote:
            found = self._table("batchlog_latest_batch")
            latest = -1 if not found or found[0] is None else int(found[0])
            return None if latest < 0 else latest
        with jvm_errors():
            latest = int(self._j.latestBatch())
        return None if latest < 0 else latest

    def batches(self) -> list[int]:
        """Ids of the batches that wrote at least one live file, ascending."""
        if self._remote:
            return [int(b) for b in self._table("batchlog_batches") if b is not None]
        with jvm_errors():
            return [int(b) for b in self._j.batches()]

    def files(self, batch: int) -> list[str]:
        """Paths (URIs, as logged) of the live files written by ``batch``."""
        if self._remote:
            rows = _sql.table(self._spark, "batchlog_files", self.path, int(batch))
            return [str(r["path"]) for r in rows]
        with jvm_errors():
            return [str(p) for p in self._j.files(int(batch))]

    def batch_of(self, path: str) -> int | None:
        """The batch that wrote ``path``; ``None`` if untagged.

        Raises ``KeyError`` if the log does not hold ``path``.
        """
        if self._remote:
            found = self._table("batchlog_batch_of", path)
            b = found[0] if found else None
        else:
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
        if self._remote:
            return _sql.frame(self._spark, "batchlog_entries", self.path)
        with jvm_errors():
            return DataFrame(self._j.entries(), self._spark)

    def inspect(self, checkpoint: str | None = None) -> SinkSummary:
        """Compaction state, log files, per-batch file counts and bytes, and the rewind horizon.

        ``horizon`` is the oldest batch a rewind can reach: the sink's tagged lineage and, given
        the query's ``checkpoint``, what the checkpoint retains (``min_batches_to_retain``).
        """
        if self._remote:
            sql = f"BATCHLOG INSPECT {_sql.literal(self.path)}"
            if checkpoint is not None:
                sql += f" CHECKPOINT {_sql.literal(checkpoint)}"
            return from_json(SinkSummary, _sql.statement(self._spark, sql))
        with jvm_errors():
            j = self._j.inspect() if checkpoint is None else self._j.inspect(checkpoint)
            return to_report(self._spark, SinkSummary, j)

    def history(self, rows: bool = False) -> SinkHistory:
        """What happened to the sink: its live batches (files, bytes, time, and what each commit
        recorded: rows, duration, query and run), its live compactions and the maintenance
        operations run on it (who, when, arguments, what they changed).

        A sink written before batchlog kept history still shows its batches, from its log.
        ``rows``: also the rows of batches whose commit did not record them, counted by Spark from
        their live files (Parquet and ORC from their footers; other formats are read whole).
        """
        if self._remote:
            sql = f"BATCHLOG HISTORY {_sql.literal(self.path)}" + (" WITH ROWS" if rows else "")
            return from_json(SinkHistory, _sql.statement(self._spark, sql))
        with jvm_errors():
            return to_report(self._spark, SinkHistory, self._j.history(bool(rows)))
