"""A driver killed while the store joins its compact file on the server: GCS's ``compose``, Azure's
Put Block List of the blocks it copied. The new lines were uploaded (GCS: an object of their own;
Azure: a block), then the request that publishes ``5.compact`` is held by the store's fault step
and never answered, applied or not, and the driver is SIGKILLed while it waits. The restart, the
same query with the same checkpoint (in the test's own session), must end with every input row
exactly once as plain Spark reads it, and a log that verify finds healthy.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import batchlog
import pytest
from conftest import COMMIT_PROTOCOL_KEY, COMPACT_INTERVAL_KEY
from pyspark.sql import SparkSession
from reliability_support import (
    APPS,
    plain_read,
    spark_submit,
    start_driver,
    write_input,
)
from storage_support import (  # noqa: F401  (abfs, gcs: the fixtures)
    ABFS_HOST,
    abfs,
    abfs_conf,
    endpoint_of,
    gcs,
    gcs_conf,
    gcs_faults_seen,
    inject_abfs,
    inject_gcs,
)
from support import ABFS_CLASSPATH, GCS_CLASSPATH, QUERY_TIMEOUT_S, session_conf, wait_until

FILES = 7  # one a batch; compactInterval 3: compact files 2 and 5
#: The session of the killed driver and of the restart: compaction on the store from the first
#: compact file on (whatever its size).
CONFS = {
    "spark.sql.shuffle.partitions": "2",
    COMMIT_PROTOCOL_KEY: batchlog.COMMIT_PROTOCOL_CLASS,
    COMPACT_INTERVAL_KEY: "3",
    "spark.batchlog.compaction.serverSideMinBytes": "0",
}


def _cmd(store: str, endpoint: str, inp: Path, out: str, chk: str) -> list[str]:
    """The crash app's driver on ``store``: the store's connector and settings, compaction on
    the server from the first compact file on, each request tried twice at most."""
    hadoop = gcs_conf(endpoint) if store == "gcs" else abfs_conf(endpoint)
    hadoop.update(
        {"fs.gs.http.max.retry": "1"}
        if store == "gcs"
        else {"fs.azure.io.retry.max.retries": "1", "fs.azure.io.retry.min.backoff.interval": "100"}
    )
    confs = {
        "spark.ui.enabled": "false",
        **CONFS,
        **{f"spark.hadoop.{k}": v for k, v in hadoop.items()},
    }
    classpath = GCS_CLASSPATH if store == "gcs" else ABFS_CLASSPATH
    cmd = [spark_submit(), "--master", "local[2]", "--jars", batchlog.jar_path()]
    cmd += ["--driver-class-path", classpath]
    for k, v in confs.items():
        cmd += ["--conf", f"{k}={v}"]
    return cmd + [str(APPS / "crash_stream_app.py"), str(inp), out, chk]


@pytest.mark.parametrize(
    ("store", "applied"),
    # Azure's applied case is the same code after the store's answer (the log reads back what
    # it finds); the three cost a minute each (two drivers)
    [("gcs", False), ("gcs", True), ("abfs", False)],
    ids=["gcs-not-applied", "gcs-applied", "abfs-not-applied"],
)
def test_a_driver_killed_while_the_store_joins_its_compact_file_restarts_exactly_once(
    spark: SparkSession,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    store: str,
    applied: bool,
) -> None:
    request.getfixturevalue(store)  # this process's server of the store
    endpoint = endpoint_of(store)
    name = f"kills-{tmp_path.name[-12:].lower().replace('_', '-')}"
    if store == "gcs":
        from storage_support import create_gcs_bucket

        create_gcs_bucket(endpoint, name)
        root, inject = f"gs://{name}", inject_gcs
        fault = {"stall_compose": rf"^{name}/out/_spark_metadata/5\.compact$"}
    else:
        root, inject = f"abfs://{name}@{ABFS_HOST}", inject_abfs
        fault = {"stall_publish": rf"^{name}/out/_spark_metadata/5\.compact$"}
    inp, out, chk = tmp_path / "in", f"{root}/out", f"{root}/chk"
    expected = write_input(inp, 0, FILES, 5)
    log = tmp_path / "driver.log"
    cmd = _cmd(store, endpoint, inp, out, chk)
    stalled = f"{name}/out/_spark_metadata/5.compact stalled:"
    inject(**fault, stall_apply=int(applied))
    try:
        driver = start_driver(cmd, log)
        wait_until(
            lambda: driver.poll() is not None
            or any(s.startswith(stalled) for s in gcs_faults_seen(store)),
            QUERY_TIMEOUT_S,
            "the compose of 5.compact",
        )
        assert driver.poll() is None, log.read_text()[-4000:]
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait(timeout=30)
    finally:
        inject()
    [seen] = [s for s in gcs_faults_seen(store) if s.startswith(stalled)]
    assert seen.endswith("not-applied") != applied, seen
    # the restart: the crash app's query in this process, with the same checkpoint
    with session_conf(spark, CONFS):
        query = (
            spark.readStream.schema("id LONG, part STRING, payload STRING")
            .option("maxFilesPerTrigger", 1)
            .json(str(inp))
            .writeStream.format("parquet")
            .partitionBy("part")
            .option("checkpointLocation", chk)
            .trigger(availableNow=True)
            .start(out)
        )
        assert query.awaitTermination(QUERY_TIMEOUT_S), "the restart did not finish"
        assert query.exception() is None, query.exception()
        assert query.lastProgress["batchId"] == FILES - 1, query.lastProgress
    hadoop = gcs_conf(endpoint) if store == "gcs" else abfs_conf(endpoint)
    assert plain_read(out, hadoop=hadoop)["ids"] == sorted(expected)
    assert batchlog.SinkLog(spark, out).batches() == list(range(FILES))
    report = batchlog.verify(spark, out)
    assert report.healthy and report.missing_count == 0, report
    # the killed run's files of batch 5, written before its compaction, are orphans when its
    # compact file was not published (the restart wrote batch 5 again); vacuum removes them
    assert {o.batch_id for o in report.orphans} == (set() if applied else {5}), report.orphans
    batchlog.vacuum(spark, out, older_than="0s", dry_run=False)
    assert batchlog.verify(spark, out).orphan_count == 0
    assert plain_read(out, hadoop=hadoop)["ids"] == sorted(expected)
