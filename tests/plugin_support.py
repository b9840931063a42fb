"""Helpers of the PySpark plugin tests (test_plugin_sink.py, test_plugin_mixed.py): the input of
a sink of ``BATCHES`` batches, its expected rows, and the session settings with and without the
plugin."""

from __future__ import annotations

from contextlib import AbstractContextManager as ContextManager

import batchlog
from conftest import (
    COMMIT_PROTOCOL_KEY,
    COMPACT_INTERVAL_KEY,
    VANILLA_COMMIT_PROTOCOL,
    batch_rows,
    row_tuples,
    session_conf,
)
from pyspark.sql import SparkSession

BATCHES = 8
INTERVAL = 3  # compactions at batches 2 and 5
#: The log files of a sink that ran every batch: 0, 1, 2.compact, 3, 4, 5.compact, 6, 7.
ALL_LOG_NAMES = [f"{i}.compact" if (i + 1) % INTERVAL == 0 else str(i) for i in range(BATCHES)]
EXTENSIONS = {"parquet": r"\.c000\.snappy\.parquet", "json": r"\.c000\.json"}


def countries_of(batch: int) -> int:
    """Batch b writes 1, 2 or 3 partitions (so 1, 2 or 3 files): b % 3 + 1."""
    return batch % 3 + 1


def inputs(batches: range) -> dict[int, list[dict[str, object]]]:
    return {b: batch_rows(b, countries_of(b)) for b in batches}


def expected_rows(batches: range) -> list[tuple]:
    return row_tuples(r for rows in inputs(batches).values() for r in rows)


def with_plugin(spark: SparkSession) -> ContextManager[None]:
    return session_conf(
        spark,
        {
            COMMIT_PROTOCOL_KEY: batchlog.COMMIT_PROTOCOL_CLASS,
            COMPACT_INTERVAL_KEY: str(INTERVAL),
        },
    )


def without_plugin(spark: SparkSession) -> ContextManager[None]:
    return session_conf(
        spark,
        {
            COMMIT_PROTOCOL_KEY: VANILLA_COMMIT_PROTOCOL,
            COMPACT_INTERVAL_KEY: str(INTERVAL),
        },
    )
