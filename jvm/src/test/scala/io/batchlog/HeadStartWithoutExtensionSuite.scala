package io.batchlog

import java.io.File

import io.batchlog.testshim.intStream

/**
 * The case the start check cannot catch: a session with batchlog's commit protocol but without its
 * extension has no [[io.batchlog.commit.HeadStartListener]]. A head-start second writer's batches
 * are then skipped by Spark's sink without an error (the committer is never called for them); the
 * sink shows no trace of it, and `inspect` with that query's checkpoint counts the skipped batches.
 */
class HeadStartWithoutExtensionSuite extends SparkSessionTestBase {
  import BatchLogConf._

  override protected def sparkConf: Map[String, String] =
    Map(CommitProtocolKey -> CommitProtocolClass)

  test("without the extension, inspect --checkpoint counts the batches Spark's sink skipped") {
    val root = createTempDir()
    val out = new File(root, "out")
    def run(chk: String, batches: Seq[Seq[Int]]): Unit = {
      val input = intStream(spark, 2)
      val q = input.toDF().writeStream.format("parquet")
        .option("checkpointLocation", new File(root, chk).toString).start(out.toString)
      try batches.foreach { b => input.addData(b: _*); q.processAllAvailable() }
      finally q.stop()
      assert(q.exception.isEmpty, q.exception)
    }
    run("chk-b", Seq(Seq(1), Seq(2), Seq(3)))
    run("chk-a", Seq(Seq(100), Seq(101))) // batches 0 and 1: skipped, no error
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
