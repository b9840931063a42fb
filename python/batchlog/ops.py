"""Operations on a sink and its query's checkpoint: rewind, adopt, read by batch.

Thin wrappers over ``io.batchlog.Operations``: the JVM plans and does the work; reports come
back as dictionaries.
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from batchlog._jvm import batchlog_package, jsession, jvm_errors


def rewind(
    spark: SparkSession,
    sink_path: str,
    checkpoint_path: str,
    to_batch: int,
    dry_run: bool = False,
    quiet: bool = False,
    force: bool = False,
) -> dict[str, Any]:
    """Rewinds a file sink and its query's checkpoint so that batch ``to_batch`` runs again.

    Deletes the data files of batches >= ``to_batch``, cuts the sink log back to
    ``to_batch - 1`` and the checkpoint (offsets, commits, file-source logs, state versions)
    back so that restarting the *same* query re-runs ``to_batch`` with exactly the input it had,
    then continues. Stop the query first: while a query writes the sink (its writer lease is
    live) the rewind refuses with ``WriterActiveError``; ``force=True`` overrides that for a
    writer known to be dead (its driver was killed less than the lease timeout ago).

    Returns ``{"plan": {...}, "result": {...} | None}``; with ``dry_run`` nothing is changed and
    ``result`` is None. An interrupted rewind is finished by calling this again with the same
    arguments; until then the sink refuses writes.
    """
    with jvm_errors():
        report = batchlog_package(spark).Operations.rewind(
            jsession(spark), sink_path, checkpoint_path, int(to_batch), dry_run, quiet, force
        )
    result: dict[str, Any] = json.loads(report)
    return result


def takeover(
    spark: SparkSession,
    sink_path: str,
    checkpoint_path: str,
    dry_run: bool = False,
    force: bool = False,
) -> dict[str, Any]:
    """Makes the query of ``checkpoint_path`` the sink's one writer from the batch after its latest.

    A sink refuses every query but its owner (``SinkOwnedByOtherQueryError``). Stop the owner
    first (``force=True`` for one known to be dead). Spark's file sink skips every batch id
    already in the log, so the new owner writes nothing until its batch ids pass the sink's
    latest: ``skippedBatches`` in the report says how many of its batches that is.
    """
    with jvm_errors():
        report = batchlog_package(spark).Operations.takeover(
            jsession(spark), sink_path, checkpoint_path, dry_run, force
        )
    result: dict[str, Any] = json.loads(report)
    return result


def adopt(
    spark: SparkSession, sink_path: str, dry_run: bool = False, quiet: bool = False
) -> dict[str, Any]:
    """Tags the entries of a sink written by plain Spark whose batch can be proven.

    Returns counts: ``entriesTagged``, ``entriesUntagged``, ``compactFilesRewritten`` and the
    ``untaggedHorizon`` (a rewind must go to this batch or later).
    """
    with jvm_errors():
        report = batchlog_package(spark).Operations.adopt(
            jsession(spark), sink_path, dry_run, quiet
        )
    result: dict[str, Any] = json.loads(report)
    return result


def read(
    spark: SparkSession,
    sink_path: str,
    format: str,
    from_batch: int | None = None,
    to_batch: int | None = None,
) -> DataFrame:
    """The sink's rows written by batches ``from_batch..to_batch`` (both inclusive, either open).

    ``read(spark, p, "parquet", to_batch=7)`` is the sink as of batch 7; ``from_batch=8``
    reads what arrived since. Partition columns are included.
    """
    with jvm_errors():
        jdf = batchlog_package(spark).Operations.read(
            jsession(spark),
            sink_path,
            format,
            None if from_batch is None else int(from_batch),
            None if to_batch is None else int(to_batch),
        )
    return DataFrame(jdf, spark)


# ---- reliability: verify, repair, vacuum ---------------------------------------------------


def verify(spark: SparkSession, sink_path: str) -> dict[str, Any]:
    """Checks a sink's log against its output directory; changes nothing.

    Every live logged file must exist with the logged size and its batch-tagged name must agree
    with its logged batch; every log file the log needs must be readable (``logErrors``). Data
    files the log does not list are reported as ``orphans`` (they do not make a sink unhealthy:
    reads through the log never see them; ``vacuum`` removes old ones). Every live compact file's
    index (``N.compact.index``) must be proved and match the compact file's bytes; one that does not
    is listed in ``indexProblems`` (``{"file", "problem"}``) and makes the sink unhealthy: readers
    rebuild it in memory and compaction never uses it until ``repair`` rewrites it. Missing or
    legacy (v1) indexes are only counted (``indexesRebuiltInMemory``). ``healthy`` is the verdict.
    """
    with jvm_errors():
        report = batchlog_package(spark).Operations.verify(jsession(spark), sink_path)
    result: dict[str, Any] = json.loads(report)
    return result


def repair(
    spark: SparkSession,
    sink_path: str,
    dry_run: bool = False,
    force: bool = False,
    quiet: bool = False,
    compact_interval: int | None = None,
) -> dict[str, Any]:
    """Rebuilds a lost or damaged ``_spark_metadata`` from the data files' batch-tagged names.

    Does nothing when the log is healthy (unless ``force``). A damaged log is renamed to
    ``_spark_metadata.broken-<ts>``, never deleted. Files without a batch in their name are
    reported (``untagged``) and left out. Stop the query first (``force`` also overrides a live
    writer lease); restart it with its checkpoint afterwards. ``written`` tells whether a new
    log was written.

    The new log is laid out for the query's compact interval: ``compact_interval`` if given,
    else the one the sink records (``compactIntervalSource`` says where it came from;
    ``compactIntervalAssumed`` is true when nothing recorded it and the session's setting was
    used). When the only problems are damaged compact-file indexes (``indexesOnly``), exactly
    those are rewritten from their compact files instead (``indexesRewritten``; none with
    ``dry_run``).
    """
    with jvm_errors():
        report = batchlog_package(spark).Operations.repair(
            jsession(spark),
            sink_path,
            dry_run,
            force,
            quiet,
            None if compact_interval is None else int(compact_interval),
        )
    result: dict[str, Any] = json.loads(report)
    return result


def vacuum(
    spark: SparkSession,
    sink_path: str,
    older_than: str = "1h",
    dry_run: bool = True,
    quiet: bool = False,
) -> dict[str, Any]:
    """Deletes orphan data files (not in the sink's log) older than ``older_than`` (e.g. ``"1h"``).

    A dry run by default. Never deletes a live logged file, nor a file of a batch after the
    latest logged one (it may be running). Returns counts and bytes of candidates, deleted and
    skipped files.
    """
    with jvm_errors():
        report = batchlog_package(spark).Operations.vacuum(
            jsession(spark), sink_path, older_than, dry_run, quiet
        )
    result: dict[str, Any] = json.loads(report)
    return result
