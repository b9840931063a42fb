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
) -> dict[str, Any]:
    """Rewinds a file sink and its query's checkpoint so that batch ``to_batch`` runs again.

    Deletes the data files of batches >= ``to_batch``, cuts the sink log back to
    ``to_batch - 1`` and the checkpoint (offsets, commits, file-source logs, state versions)
    back so that restarting the *same* query re-runs ``to_batch`` with exactly the input it had,
    then continues. Stop the query first.

    Returns ``{"plan": {...}, "result": {...} | None}``; with ``dry_run`` nothing is changed and
    ``result`` is None. An interrupted rewind is finished by calling this again with the same
    arguments; until then the sink refuses writes.
    """
    with jvm_errors():
        report = batchlog_package(spark).Operations.rewind(
            jsession(spark), sink_path, checkpoint_path, int(to_batch), dry_run, quiet
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
