package io.batchlog

import java.io.File

import org.json4s.{JNull, JString}
import org.json4s.jackson.JsonMethods.parse

import io.batchlog.testshim.intStream

import io.batchlog.api.ReportJson
import io.batchlog.log.DataFileNaming
import io.batchlog.ops.{BatchFiles, RewindReport}

/**
 * The public entry point `BatchLog.forPath` over a real sink written by a streaming query with
 * batchlog's committer: reads, typed reports, actions that plan before they act, and the one JSON
 * serializer.
 */
class BatchLogApiSuite extends SparkSessionTestBase {

  override protected def sparkConf: Map[String, String] = Map(
    BatchLogConf.CommitProtocolKey -> BatchLogConf.CommitProtocolClass,
    BatchLogConf.CompactIntervalKey -> "2"
  )

  /** Five batches (0..4) of 3 rows each into a parquet sink; (output, checkpoint). */
  private lazy val sink: (File, File) = {
    val root = createTempDir()
    val (out, chk) = (new File(root, "out"), new File(root, "chk"))
    val input = intStream(spark, 1)
    val q = input.toDF().writeStream.format("parquet")
      .option("checkpointLocation", chk.getPath).start(out.getPath)
    try {
      (0 until 5).foreach { b =>
        input.addData(b * 10, b * 10 + 1, b * 10 + 2)
        q.processAllAvailable()
      }
    } finally {
      q.stop()
      assert(q.awaitTermination(60000), "the query did not stop within 60 s")
    }
    (out, chk)
  }

  private def log = BatchLog.forPath(spark, sink._1.getPath)

  test("reads: latest batch, batches, files of a batch, the batch of a file") {
    assert(log.latestBatch() == 4L)
    assert(log.batches().toSeq == (0L to 4L))
    (0L to 4L).foreach { b =>
      val files = log.files(b).toSeq
      assert(files.nonEmpty && files.forall(DataFileNaming.batchIdOf(_).contains(b)), files)
      files.foreach(f => assert(log.batchOf(f) == java.lang.Long.valueOf(b)))
    }
    assert(log.batchOf(new File(sink._1, "nope.parquet").getPath) == null)
  }

  test("inspect and verify return typed reports") {
    val summary = log.inspect(sink._2.getPath)
    assert(summary.latestBatch == 4L && summary.compactInterval == 2)
    assert(summary.latestCompact.contains("3.compact"))
    assert(summary.batches.map(_.batchId) == (0L to 4L))
    assert(summary.batches.forall { case BatchFiles(b, n, bytes) =>
      n == log.files(b).length && bytes > 0
    })
    assert(summary.horizon.checkpointHorizon.contains(0L) && summary.horizon.horizon == 0L)
    val v = log.verify()
    assert(v.healthy && v.liveFiles == summary.batches.map(_.files).sum && v.orphanCount == 0L)
  }

  test("a dry-run rewind plans and changes nothing; the plan is computed once") {
    val before = log.files(3).toSeq
    val action = log.rewind(sink._2.getPath, 3).dryRun(true)
    val plan = action.plan()
    assert(action.plan() eq plan)
    val report = action.execute()
    assert(report.result.isEmpty)
    assert(report.plan == plan.summary)
    assert(report.plan.affectedBatches == Seq(3L, 4L))
    assert(report.plan.dataFiles == log.files(3).length + log.files(4).length)
    assert(report.plan.commitsToDelete == Seq(4L, 3L) && report.plan.offsetsToDelete == Seq(4L))
    assert(log.files(3).toSeq == before && log.latestBatch() == 4L)
  }

  test("vacuum is a dry run unless told otherwise") {
    val r = log.vacuum().olderThan("0s").execute()
    assert(r.dryRun && r.deletedFiles == 0L && r.candidateFiles == 0L)
  }

  test("ReportJson writes each field under its name, None as null") {
    val report: RewindReport = log.rewind(sink._2.getPath, 4).dryRun(true).execute()
    val json = parse(ReportJson.toJson(report))
    assert(json \ "result" == JNull)
    assert(json \ "plan" \ "sink" == JString(report.plan.sink))
    val fields = (json \ "plan").values.asInstanceOf[Map[String, Any]].keySet
    // The case class's fields (Scala 2.12 has no productElementNames).
    assert(fields == report.plan.getClass.getDeclaredFields.map(_.getName).toSet)
  }
}
