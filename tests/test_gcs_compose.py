"""Server-side compaction on Google Cloud Storage (``GcsCompose``): ``N.compact`` is the store's
``compose`` of the previous compact file and one object of the new lines, created with
``ifGenerationMatch=0``. Against fake-gcs-server behind ``servers/gcs_proxy.py``'s fault step
(which refuses a compose onto an existing object, as GCS does and fake-gcs-server does not).

The logs are built as ``compaction_support.py`` builds them (compact file ``2`` of ~10 MiB, then
``3``, ``4``, and compaction ``5``); each ``5.compact`` must be the bytes the client-side path
writes.
"""

from __future__ import annotations

from collections.abc import Iterator

import batchlog
import pytest
from compaction_support import BIG, SERVER_SIDE_KEY, Log, build, delta, stats
from py4j.protocol import Py4JJavaError
from pyspark.sql import SparkSession
from servers.gcs_proxy import SECOND_WRITER
from storage_support import (  # noqa: F401  (gcs: the fixture)
    gcs,
    gcs_fault_bucket,
    gcs_faults_seen,
    gcs_requests,
    inject_gcs,
)
from support import session_conf


@pytest.fixture(scope="module")
def expected(spark: SparkSession, gcs: str) -> bytes:  # noqa: F811  (the fixture)
    """``5.compact`` as the client-side path writes it."""
    return build(spark, f"{gcs}/ref-{id(spark)}", server_side=False).bytes_of("5.compact")


@pytest.fixture
def bucket(spark: SparkSession, gcs: str) -> Iterator[str]:  # noqa: F811  (the fixture)
    """A new bucket (its connector retries a failed request once), no faults before or after."""
    inject_gcs()
    with gcs_fault_bucket(spark) as (root, _):
        yield root
    inject_gcs()


def _composes(root: str) -> list[str]:
    """The requests to the fault step that composed an object under ``root``, with status."""
    bucket = root.removeprefix("gs://")
    return [r for r in gcs_requests() if r.startswith(f"POST /storage/v1/b/{bucket}/o/")]


def test_a_compaction_on_gcs_is_a_compose_that_writes_the_client_path_bytes(
    spark: SparkSession, expected: bytes, bucket: str
) -> None:
    """Only the new lines pass through the driver (one object, deleted after the compose); the
    compact file is the client path's bytes, its index proved, Spark's reader finds every entry,
    and ``inspect`` says how the sink compacts."""
    before = stats(spark)
    log = build(spark, f"{bucket}/out", server_side=True)
    d = delta(before, stats(spark))
    got = log.bytes_of("5.compact")
    assert got == expected
    prev = len(log.bytes_of("2.compact"))
    assert d["compactions"] == 1 and d["fallbacks"] == 0, d
    assert d["bytesCopied"] == prev and d["bytesUploaded"] == len(got) - prev, d
    [compose] = _composes(bucket)
    assert "/out%2F_spark_metadata%2F5.compact/compose?" in compose, compose
    assert "ifGenerationMatch=0" in compose and compose.endswith(" 200"), compose
    assert [n for n in log_names(log) if n.endswith(".tmp")] == []  # the new lines' object: gone
    assert log.spark_entries() == 2 * BIG + (40 + 3) + (40 + 4)
    summary = batchlog.SinkLog(spark, f"{bucket}/out").inspect()
    assert summary.compaction.startswith("server-side compose"), summary.compaction
    report = batchlog.verify(spark, f"{bucket}/out")
    assert report.index_problems == [] and report.damaged_runs == [], report


def log_names(log: Log) -> list[str]:
    return sorted(st.getPath().getName() for st in log.fs.listStatus(log.path("")))


def test_a_compose_applied_with_its_answer_lost_is_adopted_not_compacted_again(
    spark: SparkSession, expected: bytes, bucket: str
) -> None:
    """The store applies the compose of ``5.compact`` and answers 503; the connector's retry is
    refused (412: the file exists, it is its own). The log reads the file back, finds its own
    bytes, and publishes no second compaction through the driver."""
    inject_gcs(lose_answer=r"/out/_spark_metadata/5\.compact$")
    before = stats(spark)
    log = build(spark, f"{bucket}/out", server_side=True)
    d = delta(before, stats(spark))
    assert log.bytes_of("5.compact") == expected
    assert [
        s.split()[-1]
        for s in gcs_faults_seen()
        if "/out/_spark_metadata/5.compact" in s and bucket.removeprefix("gs://") in s
    ] == ["200"]
    assert [c.rsplit(" ", 1)[1] for c in _composes(bucket)] == ["503/lost:200", "412"]
    assert d["fallbacks"] == 0, d
    assert log.spark_entries() == 2 * BIG + (40 + 3) + (40 + 4)


def test_a_compose_that_fails_unapplied_falls_back_to_the_client_path(
    spark: SparkSession, expected: bytes, bucket: str
) -> None:
    """Every compose of ``5.compact`` fails (503) and is never applied: nothing was published,
    so the compaction runs again on the client side, which uploads the same bytes once."""
    inject_gcs(fail_compose=r"/out/_spark_metadata/5\.compact$")
    before = stats(spark)
    log = build(spark, f"{bucket}/out", server_side=True)
    d = delta(before, stats(spark))
    assert log.bytes_of("5.compact") == expected
    assert d["fallbacks"] == 1 and d["compactions"] == 0, d
    assert {c.rsplit(" ", 1)[1] for c in _composes(bucket)} == {"503"}
    assert [n for n in log_names(log) if n.endswith(".tmp")] == []


def test_a_compact_file_a_second_writer_published_first_is_never_replaced(
    spark: SparkSession, bucket: str
) -> None:
    """Another writer publishes ``5.compact`` while this one composes it: the store refuses the
    compose (``ifGenerationMatch=0``), the other writer's file stays byte for byte, and this
    writer fails with Spark's concurrent-writer error, without a client-side retry."""
    inject_gcs(publish_before_compose=r"/out/_spark_metadata/5\.compact$")
    before = stats(spark)
    with pytest.raises(Py4JJavaError, match="Multiple streaming queries are concurrently using"):
        build(spark, f"{bucket}/out", server_side=True)
    d = delta(before, stats(spark))
    assert d["compactions"] == 0 and d["fallbacks"] == 0, d
    with session_conf(spark, {SERVER_SIDE_KEY: "true"}):
        log = Log(spark, f"{bucket}/out")
    assert log.bytes_of("5.compact") == SECOND_WRITER
    assert [c.rsplit(" ", 1)[1] for c in _composes(bucket)] == ["412"]
