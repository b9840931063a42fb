package io.batchlog

import org.apache.hadoop.fs.Path
import org.scalatest.funsuite.AnyFunSuite

import io.batchlog.log.SinkMetrics

/**
 * The names of a sink's metrics source ([[SinkMetrics.nameOf]]): what users write in their
 * dashboards and alerts, so they must be stable and distinct per sink; and what each update does.
 */
class SinkMetricsSuite extends AnyFunSuite {

  test("a sink's source is named after its output path, scheme dropped") {
    assert(SinkMetrics.nameOf(new Path("file:/data/events/_spark_metadata")) ==
      "batchlog.data_events")
    assert(SinkMetrics.nameOf(new Path("s3a://lake/raw/events/_spark_metadata")) ==
      "batchlog.lake_raw_events")
    assert(SinkMetrics.nameOf(new Path("hdfs://nn:8020/a b/ü-x/_spark_metadata")) ==
      "batchlog.nn_8020_a_b_x")
  }

  test("two sinks of one name in a JVM get distinct sources") {
    val a = SinkMetrics.of(new Path("file:/m/a_b/_spark_metadata"))
    val b = SinkMetrics.of(new Path("file:/m/a/b/_spark_metadata"))
    assert(a.sourceName == "batchlog.m_a_b")
    assert(b.sourceName.startsWith("batchlog.m_a_b_") && b.sourceName != a.sourceName)
    assert(SinkMetrics.of(new Path("file:/m/a_b/_spark_metadata")) eq a)
  }

  test("updates: commits, compactions, the live log's bytes, the lease's age") {
    val m = SinkMetrics.of(new Path("file:/m/updates/_spark_metadata"))
    def gauge(n: String) = m.registry.getGauges.get(n).getValue
    assert(gauge(SinkMetrics.LatestBatch) == -1L && gauge(SinkMetrics.LogBytes) == -1L)
    m.committed(0, 12)
    m.batchFilePublished(100) // before a compaction the live log's size is not known
    assert(gauge(SinkMetrics.LatestBatch) == 0L && gauge(SinkMetrics.LogBytes) == -1L)
    m.compacted(entries = 7, bytes = 900)
    m.compactionTook(5)
    m.batchFilePublished(100)
    assert(gauge(SinkMetrics.LogBytes) == 1000L && gauge(SinkMetrics.CompactEntries) == 7L)
    assert(m.registry.getHistograms.get(SinkMetrics.CommitLatencyMs).getSnapshot.getMax == 12)
    assert(m.registry.getCounters.get(SinkMetrics.Compactions).getCount == 1)
    m.leaseHeld(() => 42L)
    assert(gauge(SinkMetrics.LeaseRefreshAgeMs) == 42L)
    m.leaseReleased()
    assert(gauge(SinkMetrics.LeaseRefreshAgeMs) == -1L)
  }
}
