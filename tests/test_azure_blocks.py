"""Server-side compaction on Azure Blob Storage (``AzureBlocks``): ``N.compact`` is a block blob
committed from ranges of the previous compact file the store copies (Put Block From URL, each on
the condition that the source still has its ETag) and one block of new lines, with
``If-None-Match: *``. Against Azurite's blob service through Hadoop's ABFS driver (Blob API).

The logs are built as ``compaction_support.py`` builds them (compact file ``2`` of ~10 MiB, then
``3``, ``4``, and compaction ``5``); each ``5.compact`` must be the bytes the client-side path
writes.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import batchlog
import pytest
from compaction_support import BIG, Log, build, delta, stats
from py4j.protocol import Py4JJavaError
from pyspark.sql import SparkSession
from storage_support import (  # noqa: F401  (abfs: the fixture)
    ABFS_CONTAINER,
    abfs,
    gcs_faults_seen,
    gcs_requests,
    inject_abfs,
)


@pytest.fixture(scope="module")
def expected(spark: SparkSession, abfs: str) -> bytes:  # noqa: F811  (the fixture)
    """``5.compact`` as the client-side path writes it."""
    return build(spark, f"{abfs}/ref-{uuid.uuid4().hex[:8]}", server_side=False).bytes_of(
        "5.compact"
    )


@pytest.fixture
def root(abfs: str) -> Iterator[str]:  # noqa: F811  (the fixture)
    """A new folder of the container, no faults before or after."""
    inject_abfs()
    yield f"{abfs}/t-{uuid.uuid4().hex[:8]}"
    inject_abfs()


def _commits(root: str) -> list[str]:
    """The status of each Put Block List of ``5.compact`` under ``root`` the fault step saw."""
    blob = f"/{ABFS_CONTAINER}/{root.rsplit('/', 1)[1]}/out/_spark_metadata/5.compact?"
    return [
        r.rsplit(" ", 1)[1] for r in gcs_requests("abfs") if blob in r and "comp=blocklist" in r
    ]


@contextmanager
def block_bytes(spark: SparkSession, n: int) -> Iterator[None]:
    """The previous compact file copied in blocks of ``n`` bytes."""
    jvm = spark._jvm
    assert jvm is not None
    blocks = getattr(getattr(jvm.io.batchlog.log, "AzureBlocks$"), "MODULE$")  # the object
    before = blocks.blockBytes()
    getattr(blocks, "blockBytes_$eq")(n)
    try:
        yield
    finally:
        getattr(blocks, "blockBytes_$eq")(before)


def test_a_compaction_on_azure_is_a_block_list_that_writes_the_client_path_bytes(
    spark: SparkSession, expected: bytes, root: str
) -> None:
    """The store copies the previous compact file (one block) and takes one block of new lines;
    only those pass through the driver. The compact file is the client path's bytes, Spark's
    reader finds every entry, verify finds nothing, and ``inspect`` says how the sink compacts."""
    before = stats(spark)
    log = build(spark, f"{root}/out", server_side=True)
    d = delta(before, stats(spark))
    got = log.bytes_of("5.compact")
    assert got == expected
    prev = len(log.bytes_of("2.compact"))
    assert d["compactions"] == 1 and d["fallbacks"] == 0, d
    assert d["partsCopied"] == 1 and d["partsUploaded"] == 1, d
    assert d["bytesCopied"] == prev and d["bytesUploaded"] == len(got) - prev, d
    assert log.spark_entries() == 2 * BIG + (40 + 3) + (40 + 4)
    summary = batchlog.SinkLog(spark, f"{root}/out").inspect()
    assert summary.compaction.startswith("server-side block copy"), summary.compaction
    report = batchlog.verify(spark, f"{root}/out")
    assert report.index_problems == [] and report.damaged_runs == [], report
    names = sorted(st.getPath().getName() for st in log.fs.listStatus(log.path("")))
    assert [n for n in names if n.startswith(".")] == []  # no temp file, no probe left


def test_a_previous_file_copied_in_many_blocks_at_once_keeps_its_bytes_in_order(
    spark: SparkSession, expected: bytes, root: str
) -> None:
    """1 MiB blocks: the ~10 MiB file is eleven ranges copied by eight threads at once, and the
    block list puts them back in order."""
    before = stats(spark)
    with block_bytes(spark, 1 << 20):
        log = build(spark, f"{root}/out", server_side=True)
    d = delta(before, stats(spark))
    prev = len(log.bytes_of("2.compact"))
    assert d["partsCopied"] == -(-prev // (1 << 20)) > 8, d
    assert d["compactions"] == 1 and d["fallbacks"] == 0, d
    assert log.bytes_of("5.compact") == expected


def test_a_compaction_that_drops_runs_goes_through_the_driver(
    spark: SparkSession, root: str
) -> None:
    """Retention by batches drops batch 0's run: the new file is not the old one whole, so
    nothing is sent to the store and the client side writes it."""
    before = stats(spark)
    log = build(
        spark, f"{root}/out", server_side=True, conf={"spark.batchlog.retention.batches": "5"}
    )
    d = delta(before, stats(spark))
    assert d["compactions"] == 0 and d["fallbacks"] == 1, d
    assert log.spark_entries() == BIG + (40 + 3) + (40 + 4)


def test_a_block_list_is_committed_once_the_store_refuses_the_second(
    spark: SparkSession, root: str
) -> None:
    """The publish a compact file relies on, against the store: two writers' block lists of one
    blob, each with ``If-None-Match: *``. The first is committed, the second refused (``Exists``:
    the log's ``FileAlreadyExistsException``), and the blob keeps the first writer's bytes."""
    jvm = spark._jvm
    assert jvm is not None
    log = Log(spark, f"{root}/out")
    blobs = getattr(getattr(jvm.io.batchlog.log, "AzureBlocks$Blob$"), "MODULE$")
    blob = blobs.of(log.fs).toOption().get()
    name = blob.nameOf(log.fs, log.path("5.compact"))
    seq = jvm.scala.jdk.CollectionConverters.ListHasAsScala
    outcomes = []
    for writer, data in ((b"one", b"v1\nfirst"), (b"two", b"v1\nsecond")):
        block = base64.b64encode(writer + b"-" + b"0" * 8).decode()
        blob.putBlock(name, block, bytearray(data))
        ids = jvm.java.util.ArrayList()
        ids.add(block)
        outcomes.append(blob.commit(name, seq(ids).asScala().toSeq()).toString())
    assert outcomes == ["Committed", "Exists"]
    assert log.bytes_of("5.compact") == b"v1\nfirst"


def test_a_range_of_a_file_that_changed_is_not_copied(spark: SparkSession, root: str) -> None:
    """Every block copied from the previous compact file carries ``x-ms-source-if-match`` with the
    ETag its status had: a file rewritten since (another ETag) fails the copy (412), which makes
    the compaction go through the driver; the ETag it has copies."""
    jvm = spark._jvm
    assert jvm is not None
    log = build(spark, f"{root}/out", server_side=False, upto=2)
    blobs = getattr(getattr(jvm.io.batchlog.log, "AzureBlocks$Blob$"), "MODULE$")
    blob = blobs.of(log.fs).toOption().get()
    source = blob.nameOf(log.fs, log.path("2.compact"))
    dest = blob.nameOf(log.fs, log.path("probe"))
    block = base64.b64encode(b"copy-00000000").decode()
    etag = jvm.io.batchlog.log.ObjectStoreCopy.etagOf(log.fs.getFileStatus(log.path("2.compact")))
    assert etag.isDefined()
    with pytest.raises(Py4JJavaError, match=r"Put Block From URL of .*2\.compact: 412"):
        blob.putBlockFromUrl(dest, block, source, 0, 100, jvm.scala.Some('"0x8D000000000000"'))
    blob.putBlockFromUrl(dest, block, source, 0, 100, etag)  # the file's own ETag: copied


def test_a_block_list_applied_with_its_answer_lost_is_adopted_not_compacted_again(
    spark: SparkSession, expected: bytes, root: str
) -> None:
    """The store commits ``5.compact``'s block list and answers 503: the request is sent again,
    the store refuses it (409: the blob exists), and the log reads the file back, finds its own
    bytes, and publishes no second compaction through the driver."""
    folder = root.rsplit("/", 1)[1]
    inject_abfs(lose_answer=rf"^{ABFS_CONTAINER}/{folder}/out/_spark_metadata/5\.compact$")
    before = stats(spark)
    log = build(spark, f"{root}/out", server_side=True)
    d = delta(before, stats(spark))
    assert log.bytes_of("5.compact") == expected
    assert d["compactions"] == 0 and d["fallbacks"] == 0, d  # adopted: read back, not counted
    assert _commits(root) == ["503/lost:201", "409"]
    assert f"{ABFS_CONTAINER}/{folder}/out/_spark_metadata/5.compact 201" in gcs_faults_seen("abfs")
    assert log.spark_entries() == 2 * BIG + (40 + 3) + (40 + 4)


def test_a_block_copy_that_fails_unapplied_falls_back_to_the_client_path(
    spark: SparkSession, expected: bytes, root: str
) -> None:
    """Every Put Block From URL into ``5.compact`` fails (503) and is never applied: nothing was
    committed, so the compaction runs again on the client side, which writes the same bytes."""
    folder = root.rsplit("/", 1)[1]
    inject_abfs(fail_copy=rf"^{ABFS_CONTAINER}/{folder}/out/_spark_metadata/5\.compact$")
    before = stats(spark)
    log = build(spark, f"{root}/out", server_side=True)
    d = delta(before, stats(spark))
    assert log.bytes_of("5.compact") == expected
    assert d["fallbacks"] == 1 and d["compactions"] == 0, d
    assert _commits(root) == []
    seen = gcs_faults_seen("abfs")
    assert seen.count(f"{ABFS_CONTAINER}/{folder}/out/_spark_metadata/5.compact not-applied") == 3
