package io.batchlog.testkit

import java.io.File

import io.batchlog.{BatchLogConf, SparkSessionTestBase}
import io.batchlog.commit.WriterGuard
import io.batchlog.log.BatchTaggedFileStreamSinkLog
import io.batchlog.testshim.intStream

/**
 * A driver that runs queries for weeks keeps nothing per query run and nothing per batch: a run's
 * writer guard and log go when the run ends, a log keeps the indexes and proofs of its newest two
 * compact files only, and reads an index file once per compact file, not once per lookup. Real
 * queries and real log files; the fault-injecting manager counts the index reads.
 */
class LongRunningDriverSuite extends SparkSessionTestBase {
  import BatchLogConf._

  override protected def sparkConf: Map[String, String] =
    Map(CommitProtocolKey -> CommitProtocolClass, CompactIntervalKey -> "3")

  private val FaultManager = classOf[FaultInjectingCheckpointFileManager].getName

  /** True once `cond` holds after a GC, polled for at most 60 s. */
  private def afterGc(cond: => Boolean): Boolean = {
    val deadline = System.currentTimeMillis() + 60000
    var ok = false
    while (!ok && System.currentTimeMillis() < deadline) {
      System.gc()
      Thread.sleep(100)
      ok = cond
    }
    ok
  }

  private def ours(root: File, paths: Seq[Path]): Seq[Path] =
    paths.filter(_.toString.contains(root.getName + "/"))

  /** Runs one query over 3 batches to its own sink under `root`; true if it was guarded. */
  private def runOnce(root: File, i: Int): Boolean = {
    val out = new File(root, s"out-$i")
    val input = intStream(spark, 1)
    val q = input.toDF().writeStream.format("parquet")
      .option("checkpointLocation", new File(root, s"chk-$i").toString).start(out.toString)
    var guarded = false
    try {
      (0 until 3).foreach { b =>
        input.addData(i * 100 + b)
        q.processAllAvailable()
      }
      guarded = ours(root, WriterGuard.guardedSinks).exists(_.toString.contains(s"out-$i/"))
    } finally q.stop()
    val lease = new File(out, "_batchlog/_batchlog-lease.json")
    val deadline = System.currentTimeMillis() + 30000
    while (lease.exists() && System.currentTimeMillis() < deadline) Thread.sleep(20)
    assert(!lease.exists(), s"$lease is still there 30 s after its query stopped")
    assert(spark.read.parquet(out.toString).count() == 3)
    guarded
  }

  test("a query run's writer guard and log go when the run ends: none kept per run") {
    withTempDir { root =>
      val runs = 4
      assert((0 until runs).map(runOnce(root, _)) == Seq.fill(runs)(true))
      assert(
        afterGc(
          ours(root, WriterGuard.guardedSinks).isEmpty &&
            ours(root, BatchTaggedFileStreamSinkLog.loggedSinks).isEmpty
        ),
        s"still held after $runs runs ended: guards " +
          s"${ours(root, WriterGuard.guardedSinks)}, logs " +
          ours(root, BatchTaggedFileStreamSinkLog.loggedSinks)
      )
    }
  }
}
