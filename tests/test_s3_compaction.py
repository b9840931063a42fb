"""Server-side compaction on S3A (``ObjectStoreCopy``), against moto behind ``s3_server.py``'s fault
step (which also refuses an ``UploadPartCopy`` whose ``x-amz-copy-source-if-match`` is not the
source's ETag, as S3 does and moto 5.1 does not).

Each sink log is written as a running sink writes it: batch files ``0``, ``1`` (15,000 entries
each) and compaction ``2`` (client-side: there is no previous compact file; ~10 MiB, its index
records its ETag), batch files ``3``, ``4`` (a few entries) and compaction ``5`` by the log itself
(``BatchTaggedFileStreamSinkLog.add``), once with server-side compaction on and once off; the two
``5.compact`` must be the same bytes. The batch files are written as bytes through Hadoop's file
system, in the exact form batchlog writes them (the compaction copies such lines as they are).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from compaction_support import BIG, SERVER_SIDE_KEY, Log, build, delta, stats
from conftest import COMPACT_INTERVAL_KEY
from py4j.protocol import Py4JJavaError
from pyspark.sql import SparkSession
from servers.s3_server import SECOND_WRITER
from storage_support import Store, faulty_s3
from support import session_conf


@pytest.fixture(scope="module")
def store(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    yield from faulty_s3(spark, tmp_path_factory, "s3copy")


@pytest.fixture(autouse=True)
def no_faults(store: Store) -> Iterator[None]:
    store.inject()
    yield
    store.inject()


def reference(spark: SparkSession, store: Store, upto: int = 5, **kw: Any) -> bytes:
    """``<upto>.compact`` as the client-side path writes it."""
    log = build(spark, f"s3a://{store.bucket()}/ref", server_side=False, upto=upto, **kw)
    return log.bytes_of(f"{upto}.compact")


def test_server_side_compaction_writes_the_client_path_bytes(
    spark: SparkSession, store: Store
) -> None:
    expected = reference(spark, store)
    bucket = store.bucket()
    before = stats(spark)
    log = build(spark, f"s3a://{bucket}/out", server_side=True)
    d = delta(before, stats(spark))
    got = log.bytes_of("5.compact")
    assert got == expected
    assert d["compactions"] == 1 and d["fallbacks"] == 0
    # the header and 2.compact's runs copied by the store as one part; the new lines uploaded
    prev = len(log.bytes_of("2.compact"))
    assert d["partsCopied"] == 1 and d["bytesCopied"] == prev
    assert d["partsUploaded"] == 1 and d["bytesUploaded"] == len(got) - prev
    assert d["bytesRead"] == 0
    index = log.bytes_of("5.compact.index").decode()
    assert " etag " in index.splitlines()[1], index
    assert store.uploads_in_progress(bucket) == []
    assert log.spark_entries() == 2 * BIG + (40 + 3) + (40 + 4)
    import batchlog

    summary = batchlog.SinkLog(spark, f"s3a://{bucket}/out").inspect()
    assert summary.compaction.startswith("server-side copy (a multipart upload")
    with session_conf(spark, {SERVER_SIDE_KEY: "false"}):
        summary = batchlog.SinkLog(spark, f"s3a://{bucket}/out").inspect()
    assert summary.compaction == f"client-side copy ({SERVER_SIDE_KEY} is false)"


@contextmanager
def copy_parts(spark: SparkSession, part_bytes: int) -> Iterator[None]:
    """Server-side copies in parts of ``part_bytes`` (the JVM default is 64 MiB)."""
    jvm = spark._jvm
    assert jvm is not None
    copy = getattr(getattr(jvm.io.batchlog.log, "ObjectStoreCopy$"), "MODULE$")  # the object
    was = copy.copyPartBytes()
    getattr(copy, "copyPartBytes_$eq")(part_bytes)
    try:
        yield
    finally:
        getattr(copy, "copyPartBytes_$eq")(was)


MIB5 = 5 * 2**20


def test_a_long_stretch_is_copied_as_parts_at_once_and_a_failed_part_aborts_all(
    spark: SparkSession, store: Store
) -> None:
    """A stretch of 2.compact (~20 MiB) is copied as three parts of 5 MiB or more, sent at once:
    the bytes are the client path's. Then the store fails part 2 while the others are copied:
    the upload is aborted once the parts in flight are done (no upload is left open), nothing is
    published by it, and the client-side path writes the same bytes. A 5xx is not remembered as
    the store refusing ranged copies."""
    kw: dict[str, Any] = {"sizes": (2 * BIG, 2 * BIG)}
    expected = reference(spark, store, **kw)
    with copy_parts(spark, MIB5):
        bucket = store.bucket()
        before = stats(spark)
        log = build(spark, f"s3a://{bucket}/out", server_side=True, **kw)
        d = delta(before, stats(spark))
        prev = len(log.bytes_of("2.compact"))
        assert log.bytes_of("5.compact") == expected
        assert d["compactions"] == 1 and d["fallbacks"] == 0, d
        assert d["partsCopied"] == prev // MIB5 == 3 and d["bytesCopied"] == prev, d
        assert store.uploads_in_progress(bucket) == []

        store.inject(fail_copy_part=2)
        bucket = store.bucket()
        before = stats(spark)
        log = build(spark, f"s3a://{bucket}/out", server_side=True, **kw)
        d = delta(before, stats(spark))
        assert d["compactions"] == 0 and d["fallbacks"] == 1, d
        assert d["partsCopied"] <= 2, d  # part 2 failed; parts not yet sent are not sent
        assert store.uploads_in_progress(bucket) == []
        assert log.bytes_of("5.compact") == expected
        assert log.spark_entries() == 4 * BIG + (40 + 3) + (40 + 4)
        # a store error (5xx) is not a refusal: the bucket's next compaction copies again
        import batchlog

        summary = batchlog.SinkLog(spark, f"s3a://{bucket}/out").inspect()
        assert summary.compaction.startswith("server-side copy"), summary.compaction


def test_failure_mid_upload_aborts_it_and_the_next_compaction_copies(
    spark: SparkSession, store: Store
) -> None:
    expected5, expected8 = reference(spark, store, 5), reference(spark, store, 8)
    bucket = store.bucket()
    root = f"s3a://{bucket}/out"
    store.inject(fail_upload_part=True)  # after the copied part: the new lines' part fails
    before = stats(spark)
    log = build(spark, root, server_side=True)
    d = delta(before, stats(spark))
    assert d["fallbacks"] == 1 and d["compactions"] == 0 and d["partsCopied"] == 1
    assert store.uploads_in_progress(bucket) == []  # aborted: nothing of it published
    assert log.bytes_of("5.compact") == expected5  # the client-side compaction's
    store.inject()
    before = stats(spark)
    with session_conf(spark, {COMPACT_INTERVAL_KEY: "3"}):
        log.batch_file(6, 46)
        log.batch_file(7, 47)
        log.compact(8)
    d = delta(before, stats(spark))
    assert d["compactions"] == 1 and d["fallbacks"] == 0
    assert log.bytes_of("8.compact") == expected8
    assert store.uploads_in_progress(bucket) == []


def test_a_compact_file_a_second_writer_published_meanwhile_is_never_replaced(
    spark: SparkSession, store: Store
) -> None:
    """Two writers interleaved at a server-side compaction: while this one's upload of
    ``5.compact`` runs, another publishes ``5.compact``. The upload completes only if the key is
    free (``If-None-Match: *``), so the other writer's file stays, byte for byte; this writer's
    upload is aborted and it fails with Spark's concurrent-writer error, without retrying on the
    client-side path (a second writer is not a store failure)."""
    bucket = store.bucket()
    store.inject(publish_before_complete=True)
    before = stats(spark)
    with pytest.raises(Py4JJavaError, match="Multiple streaming queries are concurrently using"):
        build(spark, f"s3a://{bucket}/out", server_side=True)
    d = delta(before, stats(spark))
    assert d["compactions"] == 0 and d["fallbacks"] == 0 and d["partsCopied"] == 1, d
    assert store.get(bucket, "out/_spark_metadata/5.compact") == SECOND_WRITER
    assert store.uploads_in_progress(bucket) == []


def test_the_batch_files_a_compaction_merges_are_one_get_each_read_at_once(
    spark: SparkSession, store: Store
) -> None:
    """On an object store a compaction reads the batch files it merges ahead, in parallel, each
    with the status one listing gave: one GET a file, no HEAD (``BatchFilePrefetch``)."""
    bucket = store.bucket()
    log = build(spark, f"s3a://{bucket}/out", server_side=False, upto=4)
    mark = len(store.requests())
    with session_conf(spark, {COMPACT_INTERVAL_KEY: "3", SERVER_SIDE_KEY: "false"}):
        log.compact(5)
    time.sleep(0.5)  # the server logs a request after its response
    since = store.requests()[mark:]
    # (before it: the writer's check that batch 4 is logged, a HEAD)
    listing = next(
        i for i, (m, path) in enumerate(since) if path.endswith("&prefix=out/_spark_metadata/")
    )
    for b in (3, 4):
        key = f"/{bucket}/out/_spark_metadata/{b}"
        assert [m for m, path in since[listing:] if path == key] == ["GET"], (b, since)
    assert log.bytes_of("5.compact") == reference(spark, store)


def test_a_batch_file_over_the_read_ahead_budget_or_missing_is_left_to_the_compaction(
    spark: SparkSession, store: Store
) -> None:
    """The read-ahead takes at most 16 MiB of batch files: a larger one is read by the compaction
    itself, with the same lines as a result. A batch file that is missing is not read ahead, and
    the compaction fails naming it, as without the read-ahead; nothing is published."""
    bucket = store.bucket()
    log = build(spark, f"s3a://{bucket}/out", server_side=True, upto=2)
    with session_conf(spark, {COMPACT_INTERVAL_KEY: "3", SERVER_SIDE_KEY: "true"}):
        log.batch_file(3, 52_000)
        log.batch_file(4, 44)
        assert log.fs.getFileStatus(log.path("3")).getLen() > 16 * 2**20
        mark = len(store.requests())
        log.compact(5)
    time.sleep(0.5)  # the server logs a request after its response
    since = store.requests()[mark:]
    # (before the listing: the writer's check that batch 4 is logged, a HEAD)
    listing = next(
        i for i, (m, path) in enumerate(since) if path.endswith("&prefix=out/_spark_metadata/")
    )
    since = since[listing:]
    key = f"/{bucket}/out/_spark_metadata/"
    assert [m for m, path in since if path == key + "4"] == ["GET"], since  # read ahead
    assert [m for m, path in since if path == key + "3"].count("GET") >= 1, since  # by itself
    assert log.spark_entries() == 2 * BIG + 52_000 + 44
    import batchlog

    sink = batchlog.SinkLog(spark, f"s3a://{bucket}/out")
    assert len(sink.files(3)) == 52_000 and len(sink.files(4)) == 44

    bucket = store.bucket()
    log = build(spark, f"s3a://{bucket}/out", server_side=True, upto=4)
    log.fs.delete(log.path("3"), False)
    with session_conf(spark, {COMPACT_INTERVAL_KEY: "3", SERVER_SIDE_KEY: "true"}):
        with pytest.raises(Py4JJavaError) as failed:
            log.compact(5)
    assert f"s3a://{bucket}/out/_spark_metadata/3" in str(failed.value), str(failed.value)[:2000]
    assert not log.fs.exists(log.path("5.compact"))
    assert store.uploads_in_progress(bucket) == []


class Refusal:
    """The writer's last check before it publishes a log file (``beforePublish``: where
    ``WriterGuard`` checks its lease), refusing, as it does for a writer whose lease went stale
    or was taken over. A py4j callback implementing ``scala.Function1``."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def apply(self, path: Any) -> None:
        self.calls.append(path.getName())
        raise RuntimeError("this writer's lease is no longer valid")

    class Java:
        implements = ["scala.Function1"]


def test_a_writer_refused_at_its_last_check_publishes_nothing_of_its_upload(
    spark: SparkSession, store: Store
) -> None:
    """A zombie writer at a server-side compaction: its store-side copy and uploads are done, then
    its last check before publishing refuses. The upload is aborted, nothing is published, the
    refusal is not taken for a store failure (no client-side retry, which would publish), and
    the next writer compacts as if the zombie had never run."""
    from pyspark.java_gateway import ensure_callback_server_started

    expected = reference(spark, store)
    bucket = store.bucket()
    root = f"s3a://{bucket}/out"
    log = build(spark, root, server_side=True, upto=4)
    before_2 = log.bytes_of("2.compact")
    gateway = spark.sparkContext._gateway
    assert gateway is not None
    ensure_callback_server_started(gateway)
    refusal = Refusal()
    getattr(log.log, "beforePublish_$eq")(refusal)  # the var's Scala setter
    before = stats(spark)
    with session_conf(spark, {COMPACT_INTERVAL_KEY: "3", SERVER_SIDE_KEY: "true"}):
        with pytest.raises(Py4JJavaError, match="lease is no longer valid"):
            log.compact(5)
    d = delta(before, stats(spark))
    assert refusal.calls == ["5.compact"]
    assert d["partsCopied"] == 1 and d["compactions"] == 0 and d["fallbacks"] == 0, d
    assert store.uploads_in_progress(bucket) == []
    assert not log.fs.exists(log.path("5.compact"))
    assert not log.fs.exists(log.path("5.compact.index"))
    assert log.bytes_of("2.compact") == before_2
    # the next writer (a fresh log) finds the sink as the zombie found it
    with session_conf(spark, {COMPACT_INTERVAL_KEY: "3", SERVER_SIDE_KEY: "true"}):
        Log(spark, root).compact(5)
    assert log.bytes_of("5.compact") == expected
    assert store.uploads_in_progress(bucket) == []


def test_previous_compact_file_rewritten_under_the_copy_is_never_copied(
    spark: SparkSession, store: Store
) -> None:
    # the same damage (last byte of 2.compact flipped, a new object) on the client-side path
    ref = store.bucket()
    outcome_ref = damaged_outcome(spark, store, ref, server_side=False)
    bucket = store.bucket()
    store.inject(rewrite_copy_source=True)  # rewritten right before the store copies it
    before = stats(spark)
    outcome = damaged_outcome(spark, store, bucket, server_side=True)
    d = delta(before, stats(spark))
    assert d["fallbacks"] == 1 and d["compactions"] == 0 and d["bytesCopied"] == 0
    assert store.uploads_in_progress(bucket) == []
    assert outcome == outcome_ref == "CORRUPT_LOG names 2.compact: True", (outcome, outcome_ref)


def damaged_outcome(spark: SparkSession, store: Store, bucket: str, server_side: bool) -> str:
    """Compaction 5 over a 2.compact whose last byte changed (the last line is no longer JSON):
    the error code and whether it names 2.compact, or ``published`` if 5.compact was written."""
    log = build(spark, f"s3a://{bucket}/out", server_side=server_side, upto=4)
    if not server_side:  # damaged before the compaction, as the fault step does during it
        key = "out/_spark_metadata/2.compact"
        value = bytearray(store.get(bucket, key))
        value[-1] ^= 0x01
        store.client.put_object(Bucket=bucket, Key=key, Body=bytes(value))
    with session_conf(
        spark, {COMPACT_INTERVAL_KEY: "3", SERVER_SIDE_KEY: str(server_side).lower()}
    ):
        try:
            log.compact(5)
        except Py4JJavaError as e:
            # Whether the file is taken for damaged in place (CRC mismatch, same identity) or for
            # replaced (rescanned: its last line fails to parse) depends on its modification time
            # (one-second resolution); either way CORRUPT_LOG names it, and nothing is published.
            assert not log.fs.exists(log.path("5.compact"))
            return f"{e.java_exception.code()} names 2.compact: {'2.compact' in str(e)}"
    return "published"


def test_store_refusing_ranged_copies_falls_back_and_is_remembered(
    spark: SparkSession, store: Store
) -> None:
    expected = reference(spark, store)
    bucket = store.bucket()
    store.inject(refuse_copy_range=True)
    before = stats(spark)
    log = build(spark, f"s3a://{bucket}/out", server_side=True)
    d = delta(before, stats(spark))
    assert d["fallbacks"] == 1 and d["compactions"] == 0 and d["bytesCopied"] == 0
    assert store.uploads_in_progress(bucket) == []
    assert log.bytes_of("5.compact") == expected
    import batchlog

    summary = batchlog.SinkLog(spark, f"s3a://{bucket}/out").inspect()
    assert summary.compaction == "client-side copy (the store refused a ranged part copy)"


def test_retention_gap_short_stretches_read_long_ones_copied(
    spark: SparkSession, store: Store
) -> None:
    # retention drops batch 0's run at compaction 5: the first kept run (batch 1, ~11 MiB) does
    # not follow the header, so its first 5 MiB are read (with the header, the first part: at
    # least 5 MiB) and the rest is copied by the store; the new lines are the last part
    kw: dict[str, Any] = {"sizes": (100, 35_000), "conf": {"spark.batchlog.retention.batches": "5"}}
    expected = reference(spark, store, **kw)
    bucket = store.bucket()
    before = stats(spark)
    log = build(spark, f"s3a://{bucket}/out", server_side=True, **kw)
    d = delta(before, stats(spark))
    got = log.bytes_of("5.compact")
    assert got == expected
    assert d["compactions"] == 1 and d["fallbacks"] == 0
    header = 2
    assert d["bytesRead"] == 5 * 2**20 - header
    assert d["partsCopied"] == 1 and d["partsUploaded"] == 2
    assert d["bytesUploaded"] + d["bytesCopied"] == len(got)
    assert 5 * 2**20 <= d["bytesCopied"] <= 7 * 2**20
    assert store.uploads_in_progress(bucket) == []
    assert log.spark_entries() == 35_000 + (40 + 3) + (40 + 4)
