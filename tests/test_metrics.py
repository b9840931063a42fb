"""A sink's metrics in Spark's own metrics system, read as users read them: scraped from the
driver's ``PrometheusServlet`` and read over remote JMX, from a real ``spark-submit`` writer
(``apps/live_writer_app.py``), while its batches commit and compact.
"""

from __future__ import annotations

import re
import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from reliability_support import batchlog, spark_session, write_input
from test_integrity_writers import ROWS, Writer, latest

spark = spark_session  # the module's session fixture

NAMESPACE = "bltest"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def source_name(out: Path) -> str:
    """``batchlog.<the output path, every run of other characters than letters and digits one
    `_`>`` (``SinkMetrics.nameOf``)."""
    return "batchlog." + re.sub(r"[^A-Za-z0-9]+", "_", str(out)).strip("_")


def prometheus_key(out: Path, metric: str) -> str:
    """The key ``PrometheusServlet`` prints: ``metrics_`` and the full name, every character but
    letters and digits ``_``."""
    full = f"{NAMESPACE}.driver.{source_name(out)}.{metric}"
    return "metrics_" + re.sub(r"[^a-zA-Z0-9]", "_", full)


class Scrape:
    def __init__(self, port: int, out: Path) -> None:
        url = f"http://127.0.0.1:{port}/metrics/prometheus"
        with urllib.request.urlopen(url, timeout=10) as r:
            self.text = r.read().decode()
        self.out = out

    def value(self, metric: str, suffix: str) -> float:
        key = prometheus_key(self.out, metric) + "_" + suffix
        found = re.findall(rf"^{re.escape(key)}\{{[^}}]*\}} (\S+)$", self.text, re.M)
        assert len(found) == 1, f"{key} scraped {found}:\n{self.text[:3000]}"
        return float(found[0])


@pytest.fixture
def metered(tmp_path: Path) -> Iterator[tuple[Writer, int, int]]:
    ui, jmx = _free_port(), _free_port()
    jmx_opts = (
        f"-Dcom.sun.management.jmxremote.port={jmx} -Dcom.sun.management.jmxremote.rmi.port={jmx} "
        "-Dcom.sun.management.jmxremote.authenticate=false "
        "-Dcom.sun.management.jmxremote.ssl=false -Dcom.sun.management.jmxremote.host=127.0.0.1 "
        "-Djava.rmi.server.hostname=127.0.0.1"
    )
    w = Writer(
        tmp_path,
        confs={
            "spark.ui.enabled": "true",
            "spark.ui.port": str(ui),
            "spark.port.maxRetries": "0",
            "spark.metrics.namespace": NAMESPACE,
            "spark.metrics.conf.driver.sink.prometheusServlet.class": (
                "org.apache.spark.metrics.sink.PrometheusServlet"
            ),
            "spark.metrics.conf.driver.sink.prometheusServlet.path": "/metrics/prometheus",
            "spark.metrics.conf.driver.sink.jmx.class": "org.apache.spark.metrics.sink.JmxSink",
            "spark.driver.extraJavaOptions": jmx_opts,
            "spark.batchlog.writer.leaseTimeout": "8s",
        },
    )
    try:
        yield w, ui, jmx
    finally:
        w.close()


def _jmx_value(spark: SparkSession, port: int, name: str) -> object:
    """Attribute ``Value`` or ``Count`` of MBean ``metrics:name=NAME,type=...`` over remote JMX."""
    jvm = spark._jvm
    assert jvm is not None
    url = jvm.javax.management.remote.JMXServiceURL(
        f"service:jmx:rmi:///jndi/rmi://127.0.0.1:{port}/jmxrmi"
    )
    conn = jvm.javax.management.remote.JMXConnectorFactory.connect(url)
    try:
        server = conn.getMBeanServerConnection()
        gauge = jvm.javax.management.ObjectName(f"metrics:name={name},type=gauges")
        if server.isRegistered(gauge):
            return server.getAttribute(gauge, "Value")
        counter = jvm.javax.management.ObjectName(f"metrics:name={name},type=counters")
        return server.getAttribute(counter, "Count")
    finally:
        conn.close()


def test_a_running_sinks_metrics_change_as_batches_commit_and_compact(
    spark: SparkSession, metered: tuple[Writer, int, int]
) -> None:
    w, ui, jmx = metered
    out = w.out
    write_input(w.inp, 0, 2, ROWS)
    w.wait_latest(1)
    meta = out / "_spark_metadata"

    s = Scrape(ui, out)
    assert s.value("latestBatch", "Value") == 1
    assert s.value("commits", "Count") == 2
    assert s.value("commitLatencyMs", "Count") == 2
    assert s.value("commitLatencyMs", "Max") >= 0
    assert s.value("compactions", "Count") == 0
    assert s.value("compactEntries", "Value") == -1
    # the log this writer wrote: batch files 0 and 1 (its first compaction is at batch 2)
    assert s.value("logBytes", "Value") == -1  # no compaction seen yet: the log's size unknown
    age = s.value("leaseRefreshAgeMs", "Value")
    assert 0 <= age <= 8000, age  # refreshed every 2 s (a quarter of the 8 s timeout)
    assert s.value("leaseRefreshFailures", "Count") == 0

    write_input(w.inp, 2, 2, ROWS)
    w.wait_latest(3)
    compact = meta / "2.compact"
    entries = sum(1 for line in compact.read_text().splitlines()[1:] if line.strip())
    s = Scrape(ui, out)
    assert s.value("latestBatch", "Value") == 3
    assert s.value("commits", "Count") == 4
    assert s.value("compactions", "Count") == 1
    assert s.value("compactionMs", "Count") == 1
    assert s.value("compactEntries", "Value") == entries
    assert s.value("compactBytes", "Value") == compact.stat().st_size
    assert s.value("logBytes", "Value") == compact.stat().st_size + (meta / "3").stat().st_size

    # the same metrics over remote JMX, as a JMX-based monitor reads them
    full = f"{NAMESPACE}.driver.{source_name(out)}"
    assert _jmx_value(spark, jmx, f"{full}.latestBatch") == 3
    assert _jmx_value(spark, jmx, f"{full}.commits") == 4

    assert w.stop() == 0, w.output()[-3000:]
    assert latest(out) == 3


def test_a_rewind_is_counted_in_the_application_that_ran_it(
    spark: SparkSession, tmp_path: Path
) -> None:
    from test_history import _build

    _, out, ck = _build(spark, tmp_path)
    jvm = spark._jvm
    assert jvm is not None
    meta = jvm.org.apache.hadoop.fs.Path(f"file:{out}/_spark_metadata")
    metrics = jvm.io.batchlog.log.SinkMetrics.of(meta)
    registry = metrics.registry()
    rewinds_before = registry.counter("rewinds").getCount()
    batchlog.rewind(spark, str(out), str(ck), 4, quiet=True)
    assert registry.counter("rewinds").getCount() == rewinds_before + 1
    # a dry run is no rewind
    batchlog.rewind(spark, str(out), str(ck), 3, dry_run=True, quiet=True)
    assert registry.counter("rewinds").getCount() == rewinds_before + 1
    assert metrics.sourceName() == source_name(out)
