package io.batchlog

import java.io.File

import org.apache.spark.sql.streaming.{StreamingQuery, StreamingQueryException}
import io.batchlog.testshim.{intStream, MemoryStream}

import io.batchlog.commit.{HeadStart, HeadStartListener}
import io.batchlog.sql.BatchLogExtensions

/**
 * A second writer with a head start elsewhere, on a session configured by hand with the extension
 * (`spark.sql.extensions`) and the commit protocol, without the Python `configure`: the extension's
 * listener stops it as it starts. Real queries (`MemoryStream` to a parquet sink).
 */
class HeadStartSuite extends SparkSessionTestBase {
  import BatchLogConf._

  override protected def sparkConf: Map[String, String] = Map(
    BatchLogExtensions.Key -> BatchLogExtensions.ClassName,
    CommitProtocolKey -> CommitProtocolClass
  )

  private val SparkCommitter =
    "org.apache.spark.sql.execution.streaming.ManifestFileCommitProtocol"

  private case class Query(root: File, name: String) {
    val checkpoint = new File(root, s"chk-$name")
    val input: MemoryStream[Int] = intStream(spark, 2)
    def start(out: File): StreamingQuery =
      input.toDF().writeStream.format("parquet")
        .option("checkpointLocation", checkpoint.toString).start(out.toString)
    def queryId: String = HeadStartSuite.idOf(checkpoint)
    def logFiles(dir: String): Seq[String] =
      Option(new File(checkpoint, dir).list()).toSeq.flatten.filter(_.forall(_.isDigit)).sorted
  }

  /** Runs `q` over `batches` (one batch each), to the end; waits for its lease to go. */
  private def write(q: Query, out: File, batches: Seq[Seq[Int]]): Unit = {
    val query = q.start(out)
    try batches.foreach { b => q.input.addData(b: _*); query.processAllAvailable() }
    finally query.stop()
    val lease = new File(out, "_batchlog/_batchlog-lease.json")
    val deadline = System.currentTimeMillis() + 30000
    while (lease.exists() && System.currentTimeMillis() < deadline) Thread.sleep(20)
    assert(!lease.exists(), s"$lease is still there 30 s after its query stopped")
  }

  /** Every file under `root` with its bytes. */
  private def snapshot(root: File): Map[String, Seq[Byte]] = {
    val base = root.toPath
    val files = java.nio.file.Files.walk(base).iterator()
    var m = Map.empty[String, Seq[Byte]]
    while (files.hasNext) {
      val f = files.next()
      if (java.nio.file.Files.isRegularFile(f)) {
        m += base.relativize(f).toString -> java.nio.file.Files.readAllBytes(f).toSeq
      }
    }
    m
  }

  private def rows(out: File): Seq[Int] =
    spark.read.parquet(out.toString).collect().map(_.getInt(0)).toSeq.sorted

  test("a head-start second writer is stopped before its first batch, nothing written") {
    val root = createTempDir()
    val out = new File(root, "out")
    val (b, a) = (Query(root, "b"), Query(root, "a"))
    write(b, out, Seq(Seq(1, 2), Seq(3), Seq(4, 5)))
    val before = snapshot(out)

    a.input.addData(100, 101)
    a.input.addData(102)
    val query = a.start(out)
    val e = intercept[StreamingQueryException](query.awaitTermination(60000))
    val cause = e.getCause.asInstanceOf[BatchLogException]
    assert(cause.code == BatchLogException.SinkOwnedByOtherQuery)
    val sink = "file:" + out.getCanonicalPath
    assert(
      cause.getMessage ==
        s"Query ${a.queryId} cannot write to $sink: the sink is written by another query, query " +
        s"${b.queryId} (its batches from 0 on; each sink has one writer). It was stopped as it " +
        "started, before its batch 0: Spark's file sink skips every batch id already in the " +
        "sink's log (its latest batch is 2), so this query's batches 0 to 2 would have been " +
        "dropped without an error. Give this query its own output path; or, if it is meant to " +
        s"replace query ${b.queryId}, stop that one and run `python -m batchlog takeover $sink " +
        "--checkpoint <this query's checkpoint> --dry-run`, then without --dry-run. No batch " +
        "ran: the sink and the checkpoint's offsets and commits are unchanged."
    )
    assert(!query.isActive && query.exception.isDefined)
    assert(snapshot(out) == before)
    assert(rows(out) == Seq(1, 2, 3, 4, 5))
    assert(a.logFiles("offsets").isEmpty && a.logFiles("commits").isEmpty)
    // the session that defined the streams has the listener; the clones that ran them have not
    assert(HeadStartListener.sessionsWith(spark.sparkContext) == 1)
  }

  test("the owner's restart, and a crash replay on a sink without a record, are not stopped") {
    val root = createTempDir()
    val out = new File(root, "out")
    val b = Query(root, "b")
    // written by plain Spark's committer: no owner on record
    withSQLConf(CommitProtocolKey -> SparkCommitter) {
      write(b, out, Seq(Seq(1), Seq(2), Seq(3)))
    }
    // B crashed after the sink logged batch 2, before commits/2: its next batch is the latest
    assert(new File(b.checkpoint, "commits/2").delete())
    new File(b.checkpoint, "commits/.2.crc").delete()
    val next = HeadStart.nextBatch(spark, b.checkpoint.toString)
    assert(next == 2)
    assert(HeadStart.refusal(spark, out.toString, b.checkpoint.toString, b.queryId).isEmpty)
    // ... and it restarts: batch 2 replayed (skipped by the sink), batch 3 written and claimed
    write(b, out, Seq(Seq(4)))
    assert(rows(out) == Seq(1, 2, 3, 4))
    assert(b.logFiles("commits") == Seq("0", "1", "2", "3"))
    // now the owner: its restart is not stopped either
    write(b, out, Seq(Seq(5)))
    assert(rows(out) == Seq(1, 2, 3, 4, 5))
    // another query (its own checkpoint) is stopped
    val c = Query(root, "c")
    c.input.addData(100)
    val query = c.start(out)
    val e = intercept[StreamingQueryException](query.awaitTermination(60000))
    assert(e.getCause.asInstanceOf[BatchLogException].code == "SINK_OWNED_BY_OTHER_QUERY")
    assert(rows(out) == Seq(1, 2, 3, 4, 5))
  }
}

object HeadStartSuite {
  private val Id = """"id"\s*:\s*"([^"]+)"""".r

  def idOf(checkpoint: File): String = {
    val text = new String(
      java.nio.file.Files.readAllBytes(new File(checkpoint, "metadata").toPath),
      "UTF-8"
    )
    Id.findFirstMatchIn(text).map(_.group(1)).getOrElse(sys.error(s"no id in $checkpoint"))
  }
}
