"""Plumbing every test module shares: this checkout's package first on ``sys.path``, the Spark
session with the batchlog jar, and session confs set for a block.

The suite tests *this checkout's* Python package and the jar built into it
(``python/batchlog/jars/batchlog.jar``, ``dev/sbt copyJarToPython``), whatever the virtualenv's
editable install points at.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
PYTHON_DIR = REPO / "python"
if str(PYTHON_DIR) not in sys.path:
    sys.path.insert(0, str(PYTHON_DIR))

import batchlog  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

assert Path(batchlog.__file__).resolve().parent == PYTHON_DIR / "batchlog", batchlog.__file__


def get_spark() -> SparkSession:
    """The one session of the test process: local[2], the batchlog jar, quiet logs."""
    spark = (
        batchlog.configure(SparkSession.builder)
        .master("local[2]")
        .appName("batchlog-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@contextmanager
def session_conf(spark: SparkSession, conf: Mapping[str, str | None]) -> Iterator[None]:
    """Sets (``None``: unsets) session confs for the block, then restores the previous values."""
    before = {k: spark.conf.get(k, None) for k in conf}
    try:
        for k, v in conf.items():
            if v is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, v)
        yield
    finally:
        for k, old in before.items():
            if old is None:
                spark.conf.unset(k)
            else:
                spark.conf.set(k, old)


#: Seconds a test's streaming query may run before the test fails (instead of hanging CI).
QUERY_TIMEOUT_S = 300


def await_query(query: Any, output_dir: Path | str) -> None:
    """Waits for an ``availableNow`` query to finish (raising its error), at most
    ``QUERY_TIMEOUT_S``; then waits for its writer lease to go (``wait_lease_released``)."""
    try:
        finished = query.awaitTermination(QUERY_TIMEOUT_S)
        assert finished, f"the query writing {output_dir} ran over {QUERY_TIMEOUT_S} s"
    finally:
        if query.isActive:
            query.stop()
        wait_lease_released(output_dir)


#: The writer lease a running query holds in its sink's ``_spark_metadata``.
LEASE_FILE = "batchlog-lease.json"


def wait_lease_released(output_dir: Path | str, timeout_s: float = 30.0) -> None:
    """Waits until the sink's writer lease is gone, as it goes just after a query's thread ends.

    ``awaitTermination`` returns a moment before the query's thread has ended; tests that
    snapshot the sink right after a query wait for this, so that the lease's removal does not
    land inside the snapshot.
    """
    lease = Path(output_dir) / "_spark_metadata" / LEASE_FILE
    end = time.monotonic() + timeout_s
    while lease.exists():
        assert time.monotonic() < end, f"{lease} outlived its query by {timeout_s} s"
        time.sleep(0.02)
