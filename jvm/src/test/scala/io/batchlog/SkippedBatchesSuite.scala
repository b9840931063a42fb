package io.batchlog

import java.io.File

import io.batchlog.testshim.intStream

/**
 * `inspect --checkpoint` counts the batches of a checkpoint that the sink has from another writer:
 * the ones Spark's sink skipped (it skips every batch id already logged, without calling the
 * committer). batchlog's start check refuses such a query in every session whose driver has the jar
 * (the extension is a `SparkSessionExtensionsProvider`), so the count is for a checkpoint run
 * elsewhere, or with a jar added after its session started.
 */
class SkippedBatchesSuite extends SparkSessionTestBase {
  import BatchLogConf._

  override protected def sparkConf: Map[String, String] =
    Map(CommitProtocolKey -> CommitProtocolClass)

  test("inspect --checkpoint counts the batches the sink has from another writer") {
    val root = createTempDir()
    val out = new File(root, "out")
    def run(chk: String, to: File, batches: Seq[Seq[Int]]): Unit = {
      val input = intStream(spark, 2)
      val q = input.toDF().writeStream.format("parquet")
        .option("checkpointLocation", new File(root, chk).toString).start(to.toString)
      try batches.foreach { b => input.addData(b: _*); q.processAllAvailable() }
      finally q.stop()
      assert(q.exception.isEmpty, q.exception)
    }
    run("chk-b", out, Seq(Seq(1), Seq(2), Seq(3)))
    run("chk-a", new File(root, "elsewhere"), Seq(Seq(100), Seq(101))) // its batches 0 and 1
    val rows = spark.read.parquet(out.toString).collect().map(_.getInt(0)).toSeq.sorted
    assert(rows == Seq(1, 2, 3))

    val log = BatchLog.forPath(spark, out.toString)
    val a = log.inspect(new File(root, "chk-a").toString).horizon
    assert(a.owner == Some(HeadStartSuite.idOf(new File(root, "chk-b"))))
    assert(a.checkpointQueryId == Some(HeadStartSuite.idOf(new File(root, "chk-a"))))
    assert((a.checkpointSkippedBatches, a.checkpointSkippedFirst, a.checkpointSkippedLast) ==
      ((Some(2L), Some(0L), Some(1L))))
    val b = log.inspect(new File(root, "chk-b").toString).horizon
    assert((b.checkpointSkippedBatches, b.checkpointSkippedFirst) == ((Some(0L), None)))
    assert(log.inspect().horizon.checkpointSkippedBatches.isEmpty)
  }
}
