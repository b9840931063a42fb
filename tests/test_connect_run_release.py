"""A query run's writer guard and batchlog log go when the run ends, in a Spark Connect server too
(issue 25). The server keeps every stopped streaming query for an hour after its last access
(``SparkConnectService.streamingSessionManager``, a ``SparkConnectStreamingQueryCache``), and with
it the query's sink and Spark's log of the sink: guards and logs that went only with Spark's log
stayed there, one per run. Counted in the server's JVM from outside (``jcmd GC.class_histogram``,
which collects first): no py4j reaches into a Connect server."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
from conftest import INPUT_SCHEMA, batch_rows, data_files, drop_inputs
from connect_support import batchlog_server_conf, start_connect_server, stop_connect_server
from pyspark.sql.connect.session import SparkSession as ConnectSession
from support import JCMD, await_query, live_instances, wait_until

RUNS = 4
GUARD = "io.batchlog.commit.WriterGuard"
LOG = "io.batchlog.log.BatchTaggedFileStreamSinkLog"
#: Spark's micro-batch query, one per run, which the server keeps after the run ended.
QUERY = re.compile(r"\.MicroBatchExecution$")


def queries(counts: Counter[str]) -> int:
    return sum(n for name, n in counts.items() if QUERY.search(name))


@pytest.mark.skipif(JCMD is None, reason="needs the JDK's jcmd to count the server's objects")
def test_ended_runs_leave_no_guard_or_log_in_the_connect_server(
    batchlog_jar: str, tmp_path: Path
) -> None:
    proc, url = start_connect_server(tmp_path / "server", [batchlog_jar], batchlog_server_conf())
    try:
        session = ConnectSession.builder.remote(url).getOrCreate()
        try:
            for k in range(RUNS):
                inbox, out = tmp_path / f"in-{k}", tmp_path / f"out-{k}"
                drop_inputs(inbox, {0: batch_rows(k, 2, rows=3)})
                q = (
                    session.readStream.schema(INPUT_SCHEMA)
                    .json(str(inbox))
                    .writeStream.format("parquet")
                    .option("checkpointLocation", str(tmp_path / f"chk-{k}"))
                    .trigger(availableNow=True)
                    .start(str(out))
                )
                await_query(q, out)  # the run's lease goes as its thread ends
                assert q.exception() is None, q.exception()
                # batchlog committed it: its data files are named by their batch
                assert [f.name.split("-")[2:4] for f in data_files(out)] == [["batch", "0"]]
            # The server still holds every ended run's query (what kept their guards before);
            # their guards and logs are gone all the same.
            wait_until(
                lambda: (c := live_instances(proc.pid))[GUARD] == 0 and c[LOG] == 0,
                30,
                f"no {GUARD} or {LOG} in the server after its {RUNS} runs ended",
                step=1,
            )
            counts = live_instances(proc.pid)
            assert queries(counts) >= RUNS, counts.most_common(20)
            assert (counts[GUARD], counts[LOG]) == (0, 0)
        finally:
            session.stop()
    finally:
        stop_connect_server(proc)
