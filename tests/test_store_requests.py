"""What the read-only and maintenance commands cost on an object store, in requests and bytes
(issue 42, item 4): ``verify`` checks the live files against one listing of the output, not by
two requests a file, lists each log directory once, and reads each log file once, whole; so its
requests do not grow with the sink's live files (below 1,000 a listing), and it reads the log's
bytes once.

On the S3 test server (moto, its request and byte logs), through S3A.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import batchlog
import pytest
from conftest import COMMIT_PROTOCOL_KEY, COMPACT_INTERVAL_KEY, drop_inputs, row_tuples
from pyspark.sql import SparkSession
from storage_support import RemoteFs, Store, faulty_s3, rows, run_query
from support import session_conf

#: batchlog's committer, compactInterval 3, one task a batch (two files: one a country).
CONFS = {
    COMMIT_PROTOCOL_KEY: batchlog.COMMIT_PROTOCOL_CLASS,
    COMPACT_INTERVAL_KEY: "3",
    "spark.sql.shuffle.partitions": "1",
}
BATCHES = 7
#: verify's requests on such a sink, whatever its live files (49 before each directory was listed
#: once): batchlog's 10 (a LIST each of ``_spark_metadata/``, the output, ``_batchlog/`` and the
#: open uploads; a GET each of 2.compact, 5.compact, their indexes, batch file 6 and the sink
#: record) and the 3 Spark's log makes when it is built (its directory's probe: a HEAD and a
#: 2-key LIST; its listing for the compact interval).
BUDGET = 13
#: ``vacuum --dry-run``'s: 22 before.
VACUUM_BUDGET = 10
#: ``repair --dry-run``'s of a healthy sink: 87 before (verify's and its own walk, each log
#: directory listed again and again); now verify's 13 and the output's checks (a HEAD and a 2-key
#: LIST that it is a directory, a LIST of its top level for logs moved aside), and the sink record
#: read once more.
REPAIR_BUDGET = 17


@pytest.fixture(scope="module")
def store(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    yield from faulty_s3(spark, tmp_path_factory, "s3requests")


def _sink(spark: SparkSession, store: Store, tmp_path: Path, countries: int) -> str:
    """A sink of 7 batches (compact files 2 and 5, batch file 6), each batch writing one data file
    a country of its ``countries``: the same log files whatever ``countries``."""
    bucket = store.bucket()
    out, chk = f"s3a://{bucket}/out", f"s3a://{bucket}/chk"
    inbox = tmp_path / f"in-{countries}"
    batches = {
        b: [{"id": b * 100 + c, "country": f"C{c}", "amount": b} for c in range(countries)]
        for b in range(BATCHES)
    }
    drop_inputs(inbox, batches)
    with session_conf(spark, CONFS):
        assert run_query(spark, RemoteFs(spark, out), inbox, out, chk, False) == list(
            range(BATCHES)
        )
    assert rows(spark, out) == row_tuples(r for rs in batches.values() for r in rs)
    return out


def _verify_counted(spark: SparkSession, store: Store, out: str) -> Counter[str]:
    """The requests one ``verify`` of ``out`` sent, by method; it must find the sink healthy."""
    before = len(store.requests())
    report = batchlog.verify(spark, out)
    assert report.healthy and report.orphan_count == 0, report
    return Counter(method for method, _ in store.requests()[before:])


def test_verify_sends_as_many_requests_for_56_live_files_as_for_14(
    spark: SparkSession, store: Store, tmp_path: Path
) -> None:
    """Two sinks with the same log files and 14 and 56 live data files: verify sends the same
    requests to each (one LIST of the output, no request a live file), and still finds a missing
    file and a size mismatch."""
    small, large = _sink(spark, store, tmp_path, 2), _sink(spark, store, tmp_path, 8)
    assert [batchlog.verify(spark, out).live_files for out in (small, large)] == [14, 56]
    costs = {out: _verify_counted(spark, store, out) for out in (small, large)}
    assert costs[small] == costs[large], costs
    assert sum(costs[large].values()) <= BUDGET, costs[large]

    # what the listing says is checked as a request a file said it
    log = batchlog.SinkLog(spark, large)
    fs = RemoteFs(spark, large)
    gone, cut = log.files(4)[0], log.files(6)[0]
    fs.delete(gone)
    fs.write_bytes(cut, b"not the file the log says")
    report = batchlog.verify(spark, large)
    assert not report.healthy
    assert [m.path for m in report.missing] == [gone]
    assert [(m.path, m.actual_size) for m in report.size_mismatch] == [(cut, 25)]


def test_verify_reads_each_log_file_once_and_plans_list_once(
    spark: SparkSession, store: Store, tmp_path: Path
) -> None:
    """verify reads every log file a reader may read exactly once, whole (the compact files
    present, their indexes, the batch file after the newest, the sink record): the bytes it reads
    are the log's, once. The plans of vacuum and repair stay in their budgets too."""
    out = _sink(spark, store, tmp_path, 3)
    bucket, prefix = out.removeprefix("s3a://").split("/", 1)
    sizes = {
        f"{bucket}/{o['Key']}": o["Size"]
        for o in store.client.list_objects_v2(Bucket=bucket, Prefix=prefix + "/")["Contents"]
    }
    meta = f"{bucket}/{prefix}/_spark_metadata"
    wanted = [f"{meta}/{n}" for n in ("2.compact", "2.compact.index", "5.compact")]
    wanted += [
        f"{meta}/5.compact.index",
        f"{meta}/6",
        f"{bucket}/{prefix}/_batchlog/_batchlog-sink.json",
    ]
    before = len(store.bytes_read())
    assert _verify_counted(spark, store, out).total() <= BUDGET
    read = store.bytes_read()[before:]
    assert sorted(read) == sorted((k, sizes[k]) for k in wanted), read

    before = len(store.requests())
    plan = batchlog.vacuum(spark, out, "0s", dry_run=True)
    assert plan.orphan_files == 0, plan
    assert len(store.requests()) - before <= VACUUM_BUDGET, store.requests()[before:]

    before = len(store.requests())
    assert not batchlog.repair(spark, out, dry_run=True, quiet=True).needed
    assert len(store.requests()) - before <= REPAIR_BUDGET, store.requests()[before:]
