"""A store that applies the request publishing a log file and loses its answer: every publish
path, each asserting that the batch is committed exactly once and that plain Spark reads exactly
the input's rows.

- the local disk and HDFS, through the test kit's fault-injecting ``CheckpointFileManager`` (the
  rename that publishes is applied, then fails: action ``lose``), in a ``spark-submit`` driver;
- S3 (moto behind ``s3_server.py``'s fault step): a conditional ``PutObject`` of a batch file, and
  the ``CompleteMultipartUpload`` of a server-side compaction, each applied and answered 500; the
  client retries, and the retry is refused because the file is there: its own.

Before the fix, the refused retry read as "another writer", and the committer deleted the data
files the published log file lists: after the restart the batch was skipped and its rows lost.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import batchlog
import pytest
from conftest import COMMIT_PROTOCOL_KEY, COMPACT_INTERVAL_KEY, drop_inputs
from pyspark.sql import SparkSession
from reliability_support import (
    APPS,
    FAULT_MANAGER,
    PYTHON,
    REPO,
    plain_read,
    spark_submit,
    write_input,
)
from storage_support import (  # noqa: F401  (abfs, gcs, hdfs: the fixtures)
    RemoteFs,
    Store,
    abfs,
    abfs_fault_container,
    await_on_store,
    expected,
    faulty_s3,
    gcs,
    gcs_fault_bucket,
    gcs_faults_seen,
    hdfs,
    inject_abfs,
    inject_gcs,
    rows,
    rows_of,
    run_query,
    start_query,
)
from support import QUERY_TIMEOUT_S, cli_here, session_conf, wait_until

BATCHES = 7  # compactInterval 3: compact files 2 and 5
#: The S3 queries' session: batchlog's committer, compactInterval 3, one task a batch.
S3_CONFS = {
    COMMIT_PROTOCOL_KEY: batchlog.COMMIT_PROTOCOL_CLASS,
    COMPACT_INTERVAL_KEY: "3",
    "spark.sql.shuffle.partitions": "1",
}


def _lost_answer_run(tmp_path: Path, out: str, chk: str, regex: str, jars: str) -> str:
    """Runs the crash app (one input file a batch, partitioned parquet) in a ``spark-submit``
    driver whose publishing renames of log files matching ``regex`` are applied and then fail;
    returns its output, after asserting that it ran every batch without failing."""
    confs = {
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        COMMIT_PROTOCOL_KEY: batchlog.COMMIT_PROTOCOL_CLASS,
        COMPACT_INTERVAL_KEY: "3",
        "spark.hadoop.spark.sql.streaming.checkpointFileManagerClass": FAULT_MANAGER,
        "spark.hadoop.spark.batchlog.test.fault.op": "rename",
        "spark.hadoop.spark.batchlog.test.fault.pathRegex": regex,
        "spark.hadoop.spark.batchlog.test.fault.action": "lose",
    }
    cmd = [spark_submit(), "--master", "local[2]", "--jars", jars]
    for k, v in confs.items():
        cmd += ["--conf", f"{k}={v}"]
    cmd += [str(APPS / "crash_stream_app.py"), str(tmp_path / "in"), out, chk]
    env = dict(os.environ, PYSPARK_PYTHON=PYTHON, PYSPARK_DRIVER_PYTHON=PYTHON)
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    done = subprocess.run(
        cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=QUERY_TIMEOUT_S
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    assert f"DONE lastBatch={BATCHES - 1}" in output, output[-6000:]
    return output


@pytest.mark.parametrize("where", ["local", "hdfs"])
def test_a_rename_applied_with_its_answer_lost_commits_the_batch_once(
    spark: SparkSession,
    tmp_path: Path,
    testkit_jar: str,
    where: str,
    request: pytest.FixtureRequest,
) -> None:
    """Batch file 3 and compact file 5 are each published by a rename that the file system
    applies and then fails: the query goes on, both batches are committed once, no data file is
    deleted or left over, and plain Spark reads every input row exactly once."""
    root = (
        str(tmp_path) if where == "local" else f"{request.getfixturevalue('hdfs')}/{tmp_path.name}"
    )
    out, chk = f"{root}/out", f"{root}/chk"
    ids = write_input(tmp_path / "in", 0, BATCHES, 4)
    output = _lost_answer_run(
        tmp_path,
        out,
        chk,
        r"_spark_metadata/(3|5\.compact)$",
        f"{batchlog.jar_path()},{testkit_jar}",
    )
    lost = [line for line in output.splitlines() if "[batchlog-fault] lose at call" in line]
    assert len(lost) == 2 and "/3)" in lost[0] and "/5.compact)" in lost[1], lost

    if where == "local":  # plain Spark: a process without batchlog's jar
        assert plain_read(Path(out))["ids"] == sorted(ids)
    else:  # Spark's own reader of the log, in this session
        assert sorted(r.id for r in spark.read.parquet(out).select("id").collect()) == sorted(ids)
    log = batchlog.SinkLog(spark, out)
    assert log.batches() == list(range(BATCHES))
    fs = RemoteFs(spark, out)
    for b in (3, 5):
        assert log.files(b) and all(fs.exists(f) for f in log.files(b)), b
    report = batchlog.verify(spark, out)
    assert report.healthy and report.missing_count == 0 and report.orphan_count == 0, report


@pytest.fixture(scope="module")
def store(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    yield from faulty_s3(spark, tmp_path_factory, "s3lost")


def _lost(store: Store) -> list[str]:
    """``bucket/key status`` of each request whose answer the server lost, in order."""
    f = store.faults.with_name(store.faults.name + ".lost")
    return [" ".join(line.split()[:3]) for line in f.read_text().splitlines()] if f.exists() else []


def _run_on_s3(spark: SparkSession, tmp_path: Path, out: str, chk: str) -> list[int]:
    """A partitioned parquet query over seven input files (one a batch): its batch ids."""
    drop_inputs(tmp_path / "in", {b: rows_of(b) for b in range(BATCHES)})
    return run_query(spark, RemoteFs(spark, out), tmp_path / "in", out, chk, stateful=False)


def _assert_committed_once(spark: SparkSession, out: str, batch: int) -> None:
    assert rows(spark, out) == expected(range(BATCHES))
    log = batchlog.SinkLog(spark, out)
    fs = RemoteFs(spark, out)
    assert log.files(batch) and all(fs.exists(f) for f in log.files(batch))
    report = batchlog.verify(spark, out)
    assert report.healthy and report.missing_count == 0 and report.orphan_count == 0, report


def test_a_conditional_put_applied_with_its_answer_lost_commits_the_batch_once(
    spark: SparkSession, store: Store, tmp_path: Path
) -> None:
    """Batch file 3 is one conditional PUT (If-None-Match: *): the store applies it and answers
    500; S3A retries and the store refuses the retry (412, the file is there). The log reads the
    file back, finds its own bytes and commits the batch; the query goes on."""
    bucket = store.bucket()
    out, chk = f"s3a://{bucket}/out", f"s3a://{bucket}/chk"
    store.inject(lose_answer=rf"^{bucket}/out/_spark_metadata/3$")
    try:
        with session_conf(spark, S3_CONFS):
            assert _run_on_s3(spark, tmp_path, out, chk) == list(range(BATCHES))
    finally:
        store.inject()
    lost = [line for line in _lost(store) if line.startswith(f"{bucket}/")]
    assert lost == [f"{bucket}/out/_spark_metadata/3 200 OK"], lost
    _assert_committed_once(spark, out, 3)


def test_a_publish_failing_unapplied_keeps_its_files_and_the_restart_commits_it_once(
    spark: SparkSession, store: Store, tmp_path: Path
) -> None:
    """Batch file 3's PUT is answered 500 every time and never applied: the writer cannot know
    the outcome, and the store does not show the file. The batch fails with
    COMMIT_OUTCOME_UNKNOWN and keeps its data files (a late application could still publish a
    log naming them): orphans, in no log. The restart commits batch 3 once, and vacuum removes
    the orphans."""
    bucket = store.bucket(**{"retry.limit": "1", "attempts.maximum": "1"})
    out, chk = f"s3a://{bucket}/out", f"s3a://{bucket}/chk"
    drop_inputs(tmp_path / "in", {b: rows_of(b) for b in range(BATCHES)})
    store.inject(fail_publish=rf"^{bucket}/out/_spark_metadata/3$")
    try:
        with session_conf(spark, S3_CONFS):
            query = start_query(spark, tmp_path / "in", out, chk, stateful=False)
            with pytest.raises(
                batchlog.CommitOutcomeUnknownError, match="the store does not show the file now"
            ):
                batchlog.await_query(query)
    finally:
        store.inject()
    assert f"{bucket}/out/_spark_metadata/3 not-applied 0" in _lost(store)
    assert batchlog.SinkLog(spark, out).batches() == [0, 1, 2]
    kept = batchlog.verify(spark, out)
    assert kept.healthy and kept.orphan_count > 0
    assert {o.batch_id for o in kept.orphans} == {3}
    with session_conf(spark, S3_CONFS):
        assert run_query(spark, RemoteFs(spark, out), tmp_path / "in", out, chk, False) == [
            3,
            4,
            5,
            6,
        ]
    assert rows(spark, out) == expected(range(BATCHES))
    assert batchlog.vacuum(spark, out, older_than="0s", dry_run=False).deleted_files == (
        kept.orphan_count
    )
    assert batchlog.verify(spark, out).orphan_count == 0
    assert rows(spark, out) == expected(range(BATCHES))


def test_a_multipart_completion_applied_with_its_answer_lost_commits_the_compaction_once(
    spark: SparkSession, store: Store, tmp_path: Path
) -> None:
    """Compact file 5 is written on the store (one multipart upload: server-side compaction,
    here from a small previous compact file) and completed with If-None-Match: *; the store
    applies the completion and answers 500. The log reads the file back, finds its own last run
    and commits the batch without compacting again through the driver; no upload is left open."""
    jvm = spark._jvm
    assert jvm is not None
    copy = getattr(getattr(jvm.io.batchlog.log, "ObjectStoreCopy$"), "MODULE$")
    stats = lambda: json.loads(copy.statsJson())  # noqa: E731
    bucket = store.bucket()
    out, chk = f"s3a://{bucket}/out", f"s3a://{bucket}/chk"
    # every attempt's answer lost: the client's retries of the completion fail too
    store.inject(lose_answer=rf"^{bucket}/out/_spark_metadata/5\.compact$", lose_answer_times=100)
    before = stats()
    # any previous compact file is copied on the store
    confs = {**S3_CONFS, "spark.batchlog.compaction.serverSideMinBytes": "0"}
    try:
        with session_conf(spark, confs):
            assert _run_on_s3(spark, tmp_path, out, chk) == list(range(BATCHES))
    finally:
        store.inject()
    after = stats()
    lost = [line for line in _lost(store) if line.startswith(f"{bucket}/")]
    assert lost[0] == f"{bucket}/out/_spark_metadata/5.compact 200 OK", lost
    assert after["fallbacks"] == before["fallbacks"], (before, after)  # no second compaction
    assert store.uploads_in_progress(bucket) == []
    wait_until(
        lambda: RemoteFs(spark, out).exists(f"{out}/_spark_metadata/5.compact.index"),
        30,
        "the adopted compact file's index",
    )
    _assert_committed_once(spark, out, 5)


def test_uploads_left_open_under_the_log_are_reported_and_vacuumed(
    spark: SparkSession, store: Store, tmp_path: Path
) -> None:
    """A driver killed during a server-side compaction leaves its multipart upload open: parts
    stored and billed, in no listing. ``verify`` reports the uploads open under the sink's
    ``_spark_metadata/`` and ``_batchlog/``; ``vacuum`` aborts those started before its threshold
    (a dry run first) and never one elsewhere: under the data directories, or under another sink
    whose name starts with this one's."""
    bucket = store.bucket()
    out, chk = f"s3a://{bucket}/out", f"s3a://{bucket}/chk"
    with session_conf(spark, S3_CONFS):
        assert _run_on_s3(spark, tmp_path, out, chk) == list(range(BATCHES))

    def open_upload(key: str) -> str:
        upload = store.client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
        store.client.upload_part(
            Bucket=bucket, Key=key, UploadId=upload, PartNumber=1, Body=b"x" * 1024
        )
        return str(upload)

    ours = {
        open_upload("out/_spark_metadata/8.compact"): "out/_spark_metadata/8.compact",
        open_upload("out/_batchlog/batchlog-sink.json"): "out/_batchlog/batchlog-sink.json",
    }
    others = {
        open_upload(key): key
        for key in ("out/country=FR/part-00000-big.parquet", "out2/_spark_metadata/8.compact")
    }

    def open_now() -> dict[str, str]:
        return {u["UploadId"]: u["Key"] for u in store.uploads_in_progress(bucket)}

    report = batchlog.verify(spark, out)
    assert report.healthy
    assert {u.upload_id: u.path for u in report.open_uploads} == {
        u: f"s3a://{bucket}/{k}" for u, k in ours.items()
    }
    # (moto dates every upload 2010-11-10: a threshold of a century keeps them as recent)
    kept = batchlog.vacuum(spark, out, older_than="36500d", dry_run=True)
    assert kept.uploads_to_abort == [] and kept.recent_uploads == 2
    plan = batchlog.vacuum(spark, out, older_than="1h", dry_run=True)
    assert {u.upload_id for u in plan.uploads_to_abort} == set(ours)
    assert open_now() == {**ours, **others}  # a dry run aborts nothing
    shown = cli_here(spark, "verify", out)
    assert shown.returncode == 0, shown.stderr
    assert "open multipart uploads (S3)" in shown.stdout
    assert f"s3a://{bucket}/out/_spark_metadata/8.compact" in shown.stdout, shown.stdout
    shown = cli_here(spark, "vacuum", out, "--older-than", "1h")
    assert "would abort 2 multipart uploads under the log" in shown.stdout, shown.stdout
    assert open_now() == {**ours, **others}
    done = batchlog.vacuum(spark, out, older_than="1h", dry_run=False)
    assert done.aborted_uploads == 2
    assert open_now() == others
    assert batchlog.verify(spark, out).open_uploads == []
    assert rows(spark, out) == expected(range(BATCHES))


def _downstream_on_s3(spark: SparkSession, up: str, out: str, chk: str) -> None:
    """A ``batchlog``-source reader of ``up`` (two upstream batches a trigger) into ``out``."""
    with session_conf(spark, {**S3_CONFS, "spark.sql.streaming.schemaInference": "true"}):
        q = (
            spark.readStream.format("batchlog")
            .option("maxBatchesPerTrigger", 2)
            .load(up)
            .writeStream.format("parquet")
            .option("checkpointLocation", chk)
            .partitionBy("country")
            .trigger(availableNow=True)
            .start(out)
        )
        await_on_store(q, RemoteFs(spark, out), out)


@pytest.mark.parametrize(
    "lost",
    [
        "up/_batchlog/_batchlog-cascade.json",  # the pipeline's intent
        "down/_batchlog/_batchlog-rewind.json",  # the downstream hop's intent
        "up/_spark_metadata/7",  # the upstream's claim of its next log id (a conditional PUT)
        "down/_spark_metadata/4",  # the downstream's
    ],
)
def test_a_cascade_on_s3_with_an_answer_lost_rewinds_every_hop_exactly_once(
    spark: SparkSession, store: Store, tmp_path: Path, lost: str
) -> None:
    """A cascade whose store applies one of its publishes and loses the answer (a 500; S3A
    retries): the cascade finishes (or, stopped, is finished by running it again), and both
    hops, restarted, hold exactly the input's rows once, as plain Spark reads them."""
    bucket = store.bucket()
    up, up_chk = f"s3a://{bucket}/up", f"s3a://{bucket}/up-chk"
    down, down_chk = f"s3a://{bucket}/down", f"s3a://{bucket}/down-chk"
    with session_conf(spark, S3_CONFS):
        assert _run_on_s3(spark, tmp_path, up, up_chk) == list(range(BATCHES))
    _downstream_on_s3(spark, up, down, down_chk)  # down batches: up 0-1, 2-3, 4-5, 6
    assert rows(spark, down) == expected(range(BATCHES))

    store.inject(lose_answer=rf"^{bucket}/{lost}$")
    try:
        try:
            report = batchlog.rewind(spark, up, up_chk, 3, cascade=True, quiet=True)
        except batchlog.BatchLogError as e:
            assert "--cascade" in str(e), str(e)  # it names the command that finishes it
            store.inject()
            report = batchlog.rewind(spark, up, up_chk, 3, cascade=True, quiet=True)
    finally:
        store.inject()
    assert [line for line in _lost(store) if line.startswith(f"{bucket}/{lost} ")], _lost(store)
    assert [h.to_batch for h in report.plan.hops] == [3, 1]
    assert report.results is not None

    with session_conf(spark, S3_CONFS):
        run_query(spark, RemoteFs(spark, up), tmp_path / "in", up, up_chk, stateful=False)
    _downstream_on_s3(spark, up, down, down_chk)
    for out in (up, down):
        assert rows(spark, out) == expected(range(BATCHES)), out
        report_ = batchlog.verify(spark, out)
        assert report_.healthy and report_.missing_count == 0, report_


# ---- GCS and Azure: fake-gcs-server and Azurite, each behind its fault step ----
# (``servers/gcs_proxy.py``, ``servers/azure_proxy.py``: the same fault names)


@contextlib.contextmanager
def _cloud(
    spark: SparkSession, request: pytest.FixtureRequest, kind: str
) -> Iterator[tuple[str, str, Callable[..., None]]]:
    """A new bucket (GCS) or container (Azure) whose file systems retry once: its URI, its name
    and the fault setter of its server (faults cleared after)."""
    request.getfixturevalue(kind)  # this process's server
    inject = inject_gcs if kind == "gcs" else inject_abfs
    place = gcs_fault_bucket if kind == "gcs" else abfs_fault_container
    with place(spark) as (root, name):
        try:
            yield root, name, inject
        finally:
            inject()


@pytest.mark.parametrize(("kind", "applied"), [("gcs", "200"), ("abfs", "202")])
def test_on_a_cloud_store_a_publish_applied_with_its_answer_lost_commits_the_batch_once(
    spark: SparkSession, request: pytest.FixtureRequest, tmp_path: Path, kind: str, applied: str
) -> None:
    """Batch file 3 and compact file 5 are each published once, on the condition that they do
    not exist (GCS: one upload with ``ifGenerationMatch=0``; Azure: a temp file renamed by a Copy
    Blob with ``If-None-Match: *``): the store applies the publish and answers 503. The connector's
    retry fails or is refused (the file is there). The log reads the file back, finds its own
    bytes and commits each batch once; the query goes on and plain Spark's reader sees every row
    once."""
    with _cloud(spark, request, kind) as (root, name, inject):
        out, chk = f"{root}/out", f"{root}/chk"
        inject(lose_answer=rf"^{name}/out/_spark_metadata/(3|5\.compact)$")
        with session_conf(spark, S3_CONFS):
            assert _run_on_s3(spark, tmp_path, out, chk) == list(range(BATCHES))
    seen = [line for line in gcs_faults_seen(kind) if line.startswith(f"{name}/")]
    assert seen == [
        f"{name}/out/_spark_metadata/3 {applied}",
        f"{name}/out/_spark_metadata/5.compact {applied}",
    ], seen
    for b in (3, 5):
        _assert_committed_once(spark, out, b)


@pytest.mark.parametrize("kind", ["gcs", "abfs"])
def test_on_a_cloud_store_an_unapplied_publish_keeps_its_files_and_the_restart_commits_once(
    spark: SparkSession, request: pytest.FixtureRequest, tmp_path: Path, kind: str
) -> None:
    """Batch file 3's publish (GCS: its upload; Azure: its Copy Blob) is answered 503 every time
    and never applied: the batch fails with COMMIT_OUTCOME_UNKNOWN and keeps its data files
    (orphans, in no log); the restart commits it once, and vacuum removes the orphans."""
    with _cloud(spark, request, kind) as (root, name, inject):
        out, chk = f"{root}/out", f"{root}/chk"
        drop_inputs(tmp_path / "in", {b: rows_of(b) for b in range(BATCHES)})
        inject(fail_publish=rf"^{name}/out/_spark_metadata/3$")
        with session_conf(spark, S3_CONFS):
            query = start_query(spark, tmp_path / "in", out, chk, stateful=False)
            with pytest.raises(
                batchlog.CommitOutcomeUnknownError,
                match="the store does not show the file now",
            ):
                batchlog.await_query(query)
        inject()
        assert f"{name}/out/_spark_metadata/3 not-applied" in gcs_faults_seen(kind)
        assert batchlog.SinkLog(spark, out).batches() == [0, 1, 2]
        kept = batchlog.verify(spark, out)
        assert kept.healthy and {o.batch_id for o in kept.orphans} == {3}
        with session_conf(spark, S3_CONFS):
            fs = RemoteFs(spark, out)
            assert run_query(spark, fs, tmp_path / "in", out, chk, False) == [3, 4, 5, 6]
        assert rows(spark, out) == expected(range(BATCHES))
        vacuumed = batchlog.vacuum(spark, out, older_than="0s", dry_run=False)
        assert vacuumed.deleted_files == kept.orphan_count
        assert batchlog.verify(spark, out).orphan_count == 0
        assert rows(spark, out) == expected(range(BATCHES))
