"""batchlog on real storage: HDFS (a single-node ``MiniDFSCluster``) and an S3-compatible store
(moto, through ``s3a://``), both started by the tests (``storage_support``). The sink and the
checkpoint are on the store, the input on the local disk. Everything a sink's owner does, and the
rows read back exactly:

- a stateful query (``dropDuplicates``, partitioned parquet) with compactions; ``files(b)``,
  ``batch_of``, ``entries``, read by batch; ``verify``;
- a rewind of sink, checkpoint and state (dry run first), and the same query replays exactly once
  (with the state not rewound, ``dropDuplicates`` would drop the replayed rows);
- ``vacuum`` of a leftover data file; ``repair`` of a deleted ``_spark_metadata``; ``adopt`` of a
  sink plain Spark wrote there; the CLI on the store's paths.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import batchlog
import pytest
from conftest import (
    COMMIT_PROTOCOL_KEY,
    COMPACT_INTERVAL_KEY,
    VANILLA_COMMIT_PROTOCOL,
    drop_inputs,
)
from pyspark.sql import SparkSession
from storage_support import (  # noqa: F401  (abfs, gcs, hdfs, s3: the fixtures)
    RemoteFs,
    abfs,
    cli_conf,
    expected,
    gcs,
    hdfs,
    rows,
    rows_of,
    run_query,
    s3,
)
from support import cli_here, run_cli, session_conf

BATCHES = 7  # compactInterval 3: compact files 2 and 5
REWIND_TO = 4


@pytest.fixture(params=["hdfs", "s3", "gcs", "abfs"])
def store(request: pytest.FixtureRequest) -> str:
    """A fresh directory on the store (``hdfs://...``, ``s3a://...`` or ``gs://...``)."""
    root: str = request.getfixturevalue(request.param)
    return f"{root}/t-{uuid.uuid4().hex[:8]}"


def test_sink_on_store_query_rewind_replay_vacuum_repair_adopt_cli(
    spark: SparkSession, store: str, tmp_path: Path
) -> None:
    inbox = tmp_path / "in"
    out, chk = f"{store}/out", f"{store}/chk"
    fs = RemoteFs(spark, store)
    drop_inputs(inbox, {b: rows_of(b) for b in range(BATCHES)})
    confs = {COMMIT_PROTOCOL_KEY: batchlog.COMMIT_PROTOCOL_CLASS, COMPACT_INTERVAL_KEY: "3"}
    with session_conf(spark, {**confs, "spark.sql.shuffle.partitions": "1"}):
        # 1. a stateful query with compactions; reads by batch from the log on the store
        assert run_query(spark, fs, inbox, out, chk) == list(range(BATCHES))
        assert fs.log_names(out) == ["0", "1", "2.compact", "3", "4", "5.compact", "6"]
        assert "5.compact.index" in fs.names(f"{out}/_spark_metadata")
        written = fs.data_files_by_batch(out)
        assert sorted(written) == list(range(BATCHES))
        assert all(len(files) == 2 for files in written.values())  # one file per country
        log = batchlog.SinkLog(spark, out)
        assert log.latest_batch() == BATCHES - 1 and log.batches() == list(range(BATCHES))
        assert {b: set(log.files(b)) for b in range(BATCHES)} == written
        assert all(log.batch_of(f) == b for b, files in written.items() for f in files)
        by_batch = log.entries().groupBy("batchId").count().collect()
        assert sorted((r["batchId"], r["count"]) for r in by_batch) == [
            (b, 2) for b in range(BATCHES)
        ]
        read_5 = batchlog.read(spark, out, "parquet", from_batch=5, to_batch=5).collect()
        assert sorted(r["id"] for r in read_5) == [500, 501, 502]
        assert rows(spark, out) == expected(range(BATCHES))
        report = batchlog.verify(spark, out)
        assert report.healthy and not report.orphans, report
        # the sink's metrics in this driver, as its writer left them
        metrics = _metrics(spark, out)
        compact = fs.read_bytes(f"{out}/_spark_metadata/5.compact")
        assert metrics("latestBatch") == BATCHES - 1 and metrics("commits") == BATCHES
        assert metrics("compactions") == 2 and metrics("compactEntries") == 12  # batches 0..5
        assert metrics("compactBytes") == len(compact)
        last = len(fs.read_bytes(f"{out}/_spark_metadata/6"))
        assert metrics("logBytes") == len(compact) + last
        assert metrics("leaseRefreshFailures") == 0

        # 2. rewind sink, checkpoint and state to 4 (a dry run first), and replay exactly once
        dry = batchlog.rewind(spark, out, chk, to_batch=REWIND_TO, dry_run=True, quiet=True)
        assert dry.plan.affected_batches == [4, 5, 6]
        assert dry.plan.data_files == 6
        assert fs.data_files_by_batch(out) == written  # a dry run changes nothing
        done = batchlog.rewind(spark, out, chk, to_batch=REWIND_TO, quiet=True)
        assert done.result is not None and done.result.data_files_deleted == 6, done
        assert sorted(fs.data_files_by_batch(out)) == [0, 1, 2, 3]
        assert fs.log_names(out) == ["0", "1", "2.compact", "3"]
        assert rows(spark, out) == expected(range(REWIND_TO))
        assert run_query(spark, fs, inbox, out, chk) == [4, 5, 6]
        assert rows(spark, out) == expected(range(BATCHES))
        replayed = fs.data_files_by_batch(out)
        assert {b: replayed[b] for b in range(REWIND_TO)} == {
            b: written[b] for b in range(REWIND_TO)
        }
        assert {b: set(log.files(b)) for b in range(BATCHES)} == replayed
        assert metrics("rewinds") == 1 and metrics("latestBatch") == BATCHES - 1

        # 3. vacuum deletes a leftover data file the log does not list, and nothing else
        src = sorted(replayed[2])[0]
        leftover = src.rsplit("/", 1)[0] + f"/part-00009-batch-2-{uuid.uuid4()}.c000.snappy.parquet"
        fs.copy(src, leftover)
        vac = batchlog.vacuum(spark, out, older_than="0s", dry_run=False, quiet=True)
        assert (vac.orphan_files, vac.deleted_files) == (1, 1), vac
        assert not fs.exists(leftover)
        assert fs.data_files_by_batch(out) == replayed

        # 4. repair rebuilds a deleted _spark_metadata from the batch-tagged names
        fs.delete(f"{out}/_spark_metadata")
        fixed = batchlog.repair(spark, out, quiet=True)
        assert fixed.written and fixed.data_files == 2 * BATCHES, fixed
        assert batchlog.verify(spark, out).healthy
        assert {b: set(batchlog.SinkLog(spark, out).files(b)) for b in range(BATCHES)} == replayed
        assert rows(spark, out) == expected(range(BATCHES))

        # the history on the store: the batches from the rebuilt log (rows counted from the
        # files), and the three operations, whose records outlived the deleted _spark_metadata
        history = batchlog.SinkLog(spark, out).history(rows=True)
        assert [(b.batch_id, b.files, b.rows) for b in history.batches] == [
            (b, 2, len(rows_of(b))) for b in range(BATCHES)
        ]
        assert [(o.operation, o.outcome) for o in history.operations] == [
            ("rewind", "done"),
            ("vacuum", "done"),
            ("repair", "done"),
        ]
        assert history.operations[0].changed["dataFilesDeleted"] == 6
        assert history.operations[1].changed["dataFilesDeleted"] == 1
        assert history.operations[2].changed["logWritten"] == 1
        assert len(fs.names(f"{out}/_batchlog/_history")) == 3

    # 5. adopt a sink plain Spark wrote on the store
    plain_out, plain_chk = f"{store}/plain-out", f"{store}/plain-chk"
    with session_conf(
        spark,
        {
            COMMIT_PROTOCOL_KEY: VANILLA_COMMIT_PROTOCOL,
            COMPACT_INTERVAL_KEY: "3",
            "spark.sql.shuffle.partitions": "1",
        },
    ):
        ran = run_query(spark, fs, inbox, plain_out, plain_chk, stateful=False)
    assert ran == list(range(BATCHES))
    plain_files = [f for f in fs.files(plain_out) if f.endswith(".parquet")]
    assert len(plain_files) == 2 * BATCHES and not any("-batch-" in f for f in plain_files)
    adopted = batchlog.adopt(spark, plain_out, quiet=True)
    assert adopted.entries_untagged == 0, adopted
    entries = batchlog.SinkLog(spark, plain_out).entries().collect()
    assert sorted(e["batchId"] for e in entries) == sorted(list(range(BATCHES)) * 2)
    assert rows(spark, plain_out) == expected(range(BATCHES))

    # 6. the CLI, in its own process, on the store's paths (its own session reaches the store
    # through --conf); then its other read commands on this session (a JVM's start each saved)
    conf = cli_conf(store, spark)
    files_4 = run_cli(*conf, "files", out, "--batch", "4")
    assert files_4.returncode == 0, files_4.stderr[-3000:]
    assert {ln.strip() for ln in files_4.stdout.splitlines() if ln.strip()} == replayed[4]
    for args in (("verify", out), ("inspect", out)):
        proc = cli_here(spark, *args)
        assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]


def _metrics(spark: SparkSession, out: str) -> Any:
    """``name -> value`` of the sink's metrics in this driver (``SinkMetrics``' registry)."""
    jvm = spark._jvm
    assert jvm is not None
    meta = jvm.org.apache.hadoop.fs.Path(f"{out}/_spark_metadata")
    registry = jvm.io.batchlog.log.SinkMetrics.of(meta).registry()

    def value(name: str) -> int:
        gauge = registry.getGauges().get(name)
        return int(gauge.getValue() if gauge is not None else registry.counter(name).getCount())

    return value


class _WriteBytes:
    """A ``scala.Function1[OutputStream, Unit]`` for the JVM: writes ``data`` to its stream."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def apply(self, out: object) -> None:
        out.write(bytearray(self.data))  # type: ignore[attr-defined]

    class Java:
        implements = ["scala.Function1"]


def _log_dir(spark: SparkSession, out: str) -> tuple[Any, Any]:
    """The manager and path of ``<out>/_spark_metadata``, made as the log makes them when it is
    opened, and py4j's callback server started (``_WriteBytes`` is called back)."""
    from pyspark.java_gateway import ensure_callback_server_started

    jvm = spark._jvm
    assert jvm is not None
    ensure_callback_server_started(spark.sparkContext._gateway)
    meta = jvm.org.apache.hadoop.fs.Path(f"{out}/_spark_metadata")
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    fm = jvm.io.batchlog.shim.package.CheckpointFileManager().create(meta, conf)
    fm.mkdirs(meta)
    return fm, meta


def test_a_log_file_is_written_once_on_the_store(spark: SparkSession, store: str) -> None:
    """Publishing a log file that exists is refused by the store itself and changes nothing: on
    S3 a conditional upload (``If-None-Match: *``), on HDFS the manager's rename. A second writer
    of the same batch file can never replace the first's (on S3 a rename-based check could)."""
    jvm = spark._jvm
    assert jvm is not None
    fm, meta = _log_dir(spark, f"{store}/out")
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    log_files = jvm.io.batchlog.log.LogFiles
    five = jvm.org.apache.hadoop.fs.Path(meta, "5")
    log_files.publish(fm, five, False, _WriteBytes(b"v1\nfirst"))
    with pytest.raises(Exception) as refused:
        log_files.publish(fm, five, False, _WriteBytes(b"v1\nsecond"))
    assert "FileAlreadyExistsException" in str(refused.value), refused.value
    assert "/out/_spark_metadata/5" in str(refused.value)
    fs = RemoteFs(spark, store)
    assert fs.names(f"{store}/out/_spark_metadata") == ["5"]  # no temp file left
    text = jvm.org.apache.commons.io.IOUtils.toString(five.getFileSystem(conf).open(five), "UTF-8")
    assert text == "v1\nfirst"


def _second_publish_refused(spark: SparkSession, fm: Any, five: Any, root: str, out: str) -> None:
    """Log file ``five`` published, then a second publish of it refused with Hadoop's
    ``FileAlreadyExistsException``, leaving it alone in ``<root>/<out>/_spark_metadata`` (no temp
    file, no probe)."""
    log_files = spark._jvm.io.batchlog.log.LogFiles  # type: ignore[union-attr]
    log_files.publish(fm, five, False, _WriteBytes(b"v1\nfirst"))
    with pytest.raises(Exception) as refused:
        log_files.publish(fm, five, False, _WriteBytes(b"v1\nsecond"))
    assert "FileAlreadyExistsException" in str(refused.value), refused.value
    assert RemoteFs(spark, root).names(f"{root}/{out}/_spark_metadata") == ["5"]


def test_on_gcs_a_log_file_is_one_upload_the_store_refuses_twice(
    spark: SparkSession,
    gcs: str,  # noqa: F811  (the fixture)
) -> None:
    """On ``gs://`` a log file is one upload created with ``ifGenerationMatch=0``, once the bucket
    proved that the store refuses the second of two racing creates (both past the connector's own
    check); a second publish is refused and leaves the first, with no temp file beside it."""
    jvm = spark._jvm
    assert jvm is not None
    root = f"{gcs}/t-{uuid.uuid4().hex[:8]}"
    fm, meta = _log_dir(spark, f"{root}/out")
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    log_files = jvm.io.batchlog.log.LogFiles
    five = jvm.org.apache.hadoop.fs.Path(meta, "5")
    assert str(log_files.describeWriteOnce(fm, five)) == (
        "one upload (ifGenerationMatch=0; the store refused the second of two racing creates of "
        "a probe)"
    )
    _second_publish_refused(spark, fm, five, root, "out")
    text = jvm.org.apache.commons.io.IOUtils.toString(five.getFileSystem(conf).open(five), "UTF-8")
    assert text == "v1\nfirst"


def test_on_abfs_of_two_racing_publishes_of_a_log_file_one_wins_whole(
    spark: SparkSession,
    abfs: str,  # noqa: F811  (the fixture)
) -> None:
    """On ``abfs://`` (the Blob API) a log file is a temp file renamed by a Copy Blob with
    ``If-None-Match: *``. Two writers publish the same log file at once, ten times: each time one
    wins, the other gets ``FileAlreadyExistsException`` (the error that says another writer
    published it first), the file holds the winner's bytes whole, and no temp file stays.
    Through Spark's manager alone the loser got a bare ``IOException`` and left its temp file."""
    import threading

    jvm = spark._jvm
    assert jvm is not None
    root = f"{abfs}/t-{uuid.uuid4().hex[:8]}"
    fm, meta = _log_dir(spark, f"{root}/out")
    log_files = jvm.io.batchlog.log.LogFiles
    assert str(log_files.describeWriteOnce(fm, jvm.org.apache.hadoop.fs.Path(meta, "0"))) == (
        "temp file, then FileSystem.rename without overwrite, its answer checked"
    )
    fs = RemoteFs(spark, root)
    for n in range(10):
        target = jvm.org.apache.hadoop.fs.Path(meta, str(n))
        start, said = threading.Barrier(2), {}

        def publish(
            writer: str, target: Any = target, start: Any = start, said: Any = said
        ) -> None:
            start.wait()
            try:
                log_files.publish(fm, target, False, _WriteBytes(f"v1\n{writer}".encode()))
                said[writer] = "published"
            except Exception as e:  # noqa: BLE001  (the answer is the test's)
                said[writer] = "refused" if "FileAlreadyExistsException" in str(e) else str(e)

        threads = [threading.Thread(target=publish, args=(w,)) for w in "AB"]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(said.values()) == ["published", "refused"], said
        [winner] = [w for w, v in said.items() if v == "published"]
        assert fs.read_bytes(f"{root}/out/_spark_metadata/{n}") == f"v1\n{winner}".encode()
    assert fs.names(f"{root}/out/_spark_metadata") == sorted(str(n) for n in range(10))


def test_on_abfs_a_lease_caught_between_its_delete_and_rename_is_still_a_live_writer(
    spark: SparkSession,
    abfs: str,  # noqa: F811  (the fixture)
) -> None:
    """On ABFS a refresh replaces the writer lease by a delete, then a rename (Spark's manager):
    a rewind or takeover reading it between the two would find no writer and act under a live
    one. A reader that finds no lease there reads it again half a second later. Here the lease is
    moved away before the check starts and put back 0.1 s later: the check still finds the live
    writer (without the second read it found none)."""
    import threading

    jvm = spark._jvm
    assert jvm is not None
    root = f"{abfs}/t-{uuid.uuid4().hex[:8]}"
    fm, meta = _log_dir(spark, f"{root}/out")
    lease = jvm.io.batchlog.log.WriterLease
    now = int(time.time() * 1000)
    lease.write(fm, meta, lease("a-query", "a-run", "a-host", 1, 0, now, 60000, 1))
    path = lease.path(meta)
    aside = jvm.org.apache.hadoop.fs.Path(f"{root}/lease-aside")
    hfs = path.getFileSystem(spark._jsparkSession.sessionState().newHadoopConf())
    assert jvm.io.batchlog.log.LogFiles.replaceLeavesGap(fm, path)
    assert hfs.rename(path, aside)  # a refresh between its delete and its rename
    seen: dict[str, Any] = {}

    def check() -> None:
        found = jvm.io.batchlog.ops.WriterFence.liveWriter(
            fm, meta, 0, jvm.io.batchlog.log.Clock.current()
        )
        seen["live"] = found.isDefined() and str(found.get().lease().runId())

    checking = threading.Thread(target=check)
    checking.start()
    time.sleep(0.1)
    assert hfs.rename(aside, path)  # the refresh's rename lands
    checking.join()
    assert seen == {"live": "a-run"}


def test_conditional_create_is_proved_once_per_bucket(
    spark: SparkSession,
    s3: str,  # noqa: F811  (the fixture)
    tmp_path: Path,
) -> None:
    """S3A declares conditional creates whenever it can send ``If-None-Match``; a store that takes
    the header and ignores it would let a second writer's log file replace the first's. batchlog
    proves the capability once per bucket (a second conditional create of a probe object must be
    refused) and otherwise publishes log files by a temp file and a rename, as Spark does;
    ``inspect`` says which."""
    from storage_support import create_bucket, start_s3, stop_server

    jvm = spark._jvm
    assert jvm is not None
    proc, endpoint, _ = start_s3(tmp_path / "s3-ignoring", ignore_if_none_match=True)
    try:
        bucket = "batchlog-ignores-if-none-match"
        create_bucket(endpoint, bucket)
        hconf = spark.sparkContext._jsc.hadoopConfiguration()  # type: ignore[union-attr]
        hconf.set(f"fs.s3a.bucket.{bucket}.endpoint", endpoint)
        log_files = jvm.io.batchlog.log.LogFiles

        def publish_path(root: str) -> tuple[object, object, str]:
            fm, meta = _log_dir(spark, f"{root}/out-probe")
            five = jvm.org.apache.hadoop.fs.Path(meta, "5")
            return fm, five, str(log_files.describeWriteOnce(fm, five))

        _, _, honest = publish_path(s3)
        assert honest == (
            "one conditional upload (If-None-Match: *; "
            "the store refused a second create of a probe)"
        )
        fm, five, ignoring = publish_path(f"s3a://{bucket}")
        assert ignoring == (
            "temp file, then rename: the store accepted a second "
            "conditional create of a probe object, it ignores If-None-Match"
        )
        # its log files are a temp file and a rename: a second publish is still refused (by
        # S3A's check for the target)
        _second_publish_refused(spark, fm, five, f"s3a://{bucket}", "out-probe")
    finally:
        stop_server(proc)


def test_a_file_system_closed_in_the_driver_does_not_break_the_next_run(
    spark: SparkSession,
    s3: str,  # noqa: F811  (the fixture)
    tmp_path: Path,
) -> None:
    """batchlog keeps no ``FileSystem`` of its own for a bucket: it asks Hadoop's cache each time.
    Other code in a long-running driver closes the cached S3A file system (Hadoop then serves a
    new one); the next run's lease, record and index uploads go on, and the rows are exact."""
    inbox = tmp_path / "in"
    root = f"{s3}/t-{uuid.uuid4().hex[:8]}"
    out, chk = f"{root}/out", f"{root}/chk"
    drop_inputs(inbox, {b: rows_of(b) for b in range(2)})
    confs = {COMMIT_PROTOCOL_KEY: batchlog.COMMIT_PROTOCOL_CLASS, COMPACT_INTERVAL_KEY: "3"}
    with session_conf(spark, confs):
        assert run_query(spark, RemoteFs(spark, root), inbox, out, chk, stateful=False) == [0, 1]
        jvm = spark._jvm
        assert jvm is not None
        conf = spark._jsparkSession.sessionState().newHadoopConf()
        cached = jvm.org.apache.hadoop.fs.Path(out).getFileSystem(conf)
        cached.close()
        fresh = jvm.org.apache.hadoop.fs.Path(out).getFileSystem(conf)
        assert not fresh.equals(cached)  # Hadoop's cache dropped the closed one

        drop_inputs(inbox, {b: rows_of(b) for b in range(2, 4)})
        fs = RemoteFs(spark, root)
        assert run_query(spark, fs, inbox, out, chk, stateful=False) == [2, 3]
        assert fs.log_names(out) == ["0", "1", "2.compact", "3"]
        assert "2.compact.index" in fs.names(f"{out}/_spark_metadata")
        assert rows(spark, out) == expected(range(4))
