package io.batchlog.testkit

import java.io.File
import java.nio.file.Files

import scala.jdk.CollectionConverters._

import org.apache.hadoop.fs.Path

import io.batchlog.testshim.{intStream, MemoryStream}
import org.apache.spark.sql.functions.col
import org.apache.spark.sql.streaming.{StreamingQuery, StreamingQueryException}

import io.batchlog.{BatchLog, BatchLogConf, SparkSessionTestBase}
import io.batchlog.log.{
  BatchTaggedFileStreamSinkLog,
  CompactIndex,
  DataFileNaming,
  JsonRecordFile,
  LogFormat
}
import io.batchlog.ops.Verify

/**
 * Real streaming queries (MemoryStream -> parquet file sink with the batch-tagged commit protocol)
 * whose sink-log file operations fail through [[FaultInjectingCheckpointFileManager]]: the query
 * must fail, and once the fault is gone a restart from the same checkpoint must leave a valid log
 * and every row exactly once, with no half-written log file visible.
 */
class FaultInjectionSuite extends SparkSessionTestBase {

  override protected def sparkConf: Map[String, String] = Map(
    BatchLogConf.CommitProtocolKey -> BatchLogConf.CommitProtocolClass,
    // In the SQL conf: Spark reads the key from the Hadoop conf, which includes the SQL conf.
    TestkitConf.CheckpointFileManagerClassKey -> classOf[FaultInjectingCheckpointFileManager].getName,
    BatchLogConf.CompactIntervalKey -> "3",
    BatchLogConf.CleanupDelayKey -> "0",
    BatchLogConf.MinBatchesToRetainKey -> "2"
  )

  private val faultKeys = Seq(
    TestkitConf.FaultOpKey,
    TestkitConf.FaultPathRegexKey,
    TestkitConf.FaultActionKey,
    TestkitConf.FaultNthKey,
    TestkitConf.FaultTimesKey
  )

  private def tempDir(): File = createTempDir("batchlog-fault")

  /** A new input, an output and a checkpoint directory, with `n` batches run without fault. */
  private def cleanRun(n: Int): (MemoryStream[Int], File, File) = {
    val (out, chk) = (tempDir(), tempDir())
    val input = intStream(spark, 1)
    clearFault()
    withQuery(start(input, out, chk))(q => feed(input, q, 0 until n))
    (input, out, chk)
  }

  /** Adds batches `bs` one by one, each processed before the next. */
  private def feed(input: MemoryStream[Int], q: StreamingQuery, bs: Range): Unit =
    bs.foreach { b => input.addData(rows(b)); processAll(q) }

  /** Batch `b` of the test input: 4 rows, values b*10 .. b*10+3. */
  private def rows(b: Int): Seq[Int] = (0 until 4).map(b * 10 + _)

  private def start(input: MemoryStream[Int], out: File, chk: File): StreamingQuery =
    input
      .toDF()
      .withColumn("part", col("value") % 2)
      .writeStream
      .format("parquet")
      .partitionBy("part")
      .option("checkpointLocation", chk.getPath)
      .start(out.getPath)

  private def metaDir(out: File) = new File(out, BatchTaggedFileStreamSinkLog.MetadataDir)

  private val logFileName = "[0-9]+(\\.compact)?"

  /**
   * The visible log files: every non-hidden name is a log file (`N` or `N.compact`) that parses
   * completely, or the complete index of a compact file that is there; no temp file of an aborted
   * write is left behind.
   */
  private def assertNoHalfWrittenLogFile(out: File): Seq[String] = {
    val names = metaDir(out).list().toSeq.sorted
    val visible = names.filterNot(n => n.startsWith(".") || JsonRecordFile.isRecordName(n))
    val (indexes, logs) = visible.partition(CompactIndex.isIndexFile)
    indexes.foreach { n =>
      assert(
        logs.contains(n.stripSuffix(CompactIndex.Suffix)),
        s"index without its compact file: $names"
      )
      assert(
        Files.readAllLines(new File(metaDir(out), n).toPath).get(0)
          .startsWith(CompactIndex.Header + " ")
      )
    }
    logs.foreach { n =>
      assert(n.matches(logFileName), s"unexpected file $n in _spark_metadata: $names")
      val lines = Files.readAllLines(new File(metaDir(out), n).toPath).asScala
      assert(lines.head == LogFormat.Header, s"$n has header ${lines.head}")
      lines.tail.foreach(LogFormat.decode) // throws on a truncated or malformed line
    }
    val temps = names.filter(_.endsWith(".tmp"))
    assert(temps.isEmpty, s"temp files of an aborted write left behind: $temps")
    logs
  }

  /** The log is valid and plain Spark reads exactly the rows of `batches`. */
  private def assertSinkHolds(out: File, batches: Int): Unit = {
    assertNoHalfWrittenLogFile(out)
    val report = Verify.run(spark, out.getPath)
    assert(report.healthy, report)
    val api = BatchLog.forPath(spark, out.getPath)
    assert(api.latestBatch() == batches - 1)
    api.log.foreachLiveEntry { e =>
      assert(e.batchId.isDefined && e.batchId == DataFileNaming.batchIdOf(e.path), e.toString)
    }
    val read = spark.read.parquet(out.getPath).select("value").collect().map(_.getInt(0)).sorted
    assert(read.toSeq == (0 until batches).flatMap(rows).sorted)
  }

  /** The first batchlog error in the cause chain of the last failure [[runWithFault]] saw. */
  private var lastFailure: Option[io.batchlog.BatchLogException] = None

  private def setFault(op: String, pathRegex: String): Unit = {
    FaultInjectingCheckpointFileManager.reset()
    spark.conf.set(TestkitConf.FaultOpKey, op)
    spark.conf.set(TestkitConf.FaultPathRegexKey, pathRegex)
    spark.conf.set(TestkitConf.FaultActionKey, "fail")
  }

  private def clearFault(): Unit = faultKeys.foreach(k => spark.conf.unset(k))

  /**
   * Runs batches 0..cleanBatches-1 without fault, restarts with the fault set and runs batch
   * `cleanBatches` (which must fail), then checks the log, restarts without the fault, runs one
   * more batch and checks everything.
   */
  private def runWithFault(op: String, pathRegex: String, cleanBatches: Int)(
      afterFailure: File => Unit
  ): Unit = {
    val (input, out, chk) = cleanRun(cleanBatches)
    var q: StreamingQuery = null

    setFault(op, pathRegex)
    try {
      q = start(input, out, chk)
      input.addData(rows(cleanBatches))
      val e = intercept[StreamingQueryException](processAll(q))
      val causes = Iterator.iterate[Throwable](e)(_.getCause).takeWhile(_ != null).toSeq
      assert(
        causes.exists(_.getMessage.contains("Injected fault")),
        s"the query failed for another reason: $e"
      )
      lastFailure = causes.collectFirst { case b: io.batchlog.BatchLogException => b }
      q.stop()
    } finally clearFault()
    afterFailure(out)

    withQuery(start(input, out, chk)) { q =>
      processAll(q)
      feed(input, q, cleanBatches + 1 to cleanBatches + 1)
    }
    assertSinkHolds(out, cleanBatches + 2)
  }

  test("a failure creating a batch file fails the query; a restart recovers") {
    runWithFault("createAtomic", "_spark_metadata/3$", cleanBatches = 3) { out =>
      assert(assertNoHalfWrittenLogFile(out) == Seq("0", "1", "2.compact"))
    }
  }

  test("a failure publishing (renaming) a batch file fails the query; a restart recovers") {
    runWithFault("rename", "_spark_metadata/3$", cleanBatches = 3) { out =>
      assert(assertNoHalfWrittenLogFile(out) == Seq("0", "1", "2.compact"))
      assertOutcomeUnknownKeptFiles(out, batch = 3)
    }
  }

  /**
   * The publish failed without a definite answer and the store does not show the file: the batch
   * failed with COMMIT_OUTCOME_UNKNOWN, and its data files are kept (a late application of the
   * request could still publish a log file naming them): orphans, in no log, for vacuum.
   */
  private def assertOutcomeUnknownKeptFiles(out: File, batch: Long): Unit = {
    val orphans = Verify.run(spark, out.getPath).orphans.map(_.path)
    assert(orphans.nonEmpty && orphans.forall(p => DataFileNaming.batchIdOf(p).contains(batch)))
    assert(lastFailure.exists(_.code == io.batchlog.BatchLogException.CommitOutcomeUnknown))
  }

  /**
   * Runs batches 0..cleanBatches-1, then restarts with a `lose` fault on the rename that publishes
   * log file `pathRegex`: the store applies it and the call fails. The query must go on as if the
   * publish had answered: the batch committed once, the next one after it, every row exactly once.
   */
  private def runWithLostAnswer(pathRegex: String, cleanBatches: Int): Unit = {
    val (input, out, chk) = cleanRun(cleanBatches)
    setFault("rename", pathRegex)
    spark.conf.set(TestkitConf.FaultActionKey, "lose")
    try withQuery(start(input, out, chk))(q => feed(input, q, cleanBatches to cleanBatches + 1))
    finally clearFault()
    assert(FaultInjectingCheckpointFileManager.lostAnswers.get == 1)
    assertSinkHolds(out, cleanBatches + 2)
    val report = Verify.run(spark, out.getPath)
    assert(report.orphanCount == 0 && report.missingCount == 0, report)
    val api = BatchLog.forPath(spark, out.getPath)
    assert(api.files(cleanBatches.toLong).nonEmpty)
  }

  test("a batch file published with its answer lost is adopted: the batch is committed once") {
    runWithLostAnswer("_spark_metadata/3$", cleanBatches = 3)
  }

  test("a compact file published with its answer lost is adopted: the batch is committed once") {
    runWithLostAnswer("_spark_metadata/5\\.compact$", cleanBatches = 5)
  }

  test("a failure creating a compact file fails the query; a restart recovers") {
    runWithFault("createAtomic", "_spark_metadata/2\\.compact$", cleanBatches = 2) { out =>
      assert(assertNoHalfWrittenLogFile(out) == Seq("0", "1"))
    }
  }

  test("a failure publishing a compact file fails the query; a restart recovers") {
    runWithFault("rename", "_spark_metadata/2\\.compact$", cleanBatches = 2) { out =>
      assert(assertNoHalfWrittenLogFile(out) == Seq("0", "1"))
      assertOutcomeUnknownKeptFiles(out, batch = 2)
    }
  }

  test("a failure deleting expired log files fails the query; a restart recovers") {
    // minBatchesToRetain 2, compactInterval 3: batch 4 is the first to expire files 0 and 1.
    runWithFault("delete", "_spark_metadata/[0-9]+$", cleanBatches = 4) { out =>
      // Batch 4 was logged before the cleanup failed: its rerun is skipped, not duplicated.
      assert(assertNoHalfWrittenLogFile(out) == Seq("0", "1", "2.compact", "3", "4"))
    }
  }

  test("a crash midway through deleting expired log files keeps the compact interval") {
    // Found by the SIGKILL crash test: deleting in listing order could drop 8.compact and keep
    // 5.compact; the next start derived interval 6 from {5, 11}.compact and the log broke.
    val (input, out, chk) = withSQLConf(BatchLogConf.DeletionKey -> "false")(cleanRun(13))
    var q: StreamingQuery = null
    // Batch 13 expires log files 0 .. 10 (below 11.compact); the 6th delete fails.
    setFault("delete", "_spark_metadata/[0-9]+(\\.compact)?$")
    spark.conf.set(TestkitConf.FaultNthKey, "6")
    try {
      q = start(input, out, chk)
      input.addData(rows(13))
      intercept[StreamingQueryException](processAll(q))
      q.stop()
    } finally clearFault()
    val left = assertNoHalfWrittenLogFile(out).map(_.stripSuffix(".compact").toLong).sorted
    assert(left == (left.head to 13L), s"survivors are not the newest contiguous range: $left")
    assert(new BatchTaggedFileStreamSinkLog(spark, metaDir(out).getPath).interval == 3)
    withQuery(start(input, out, chk)) { q => processAll(q); feed(input, q, 14 until 18) }
    assertSinkHolds(out, 18)
  }

  test("the fault manager is the one Spark uses, and delegates without a fault") {
    val (_, out, chk) = cleanRun(3)
    assertSinkHolds(out, 3)
    val fm = io.batchlog.shim.CheckpointFileManager
      .create(new Path(chk.getPath), spark.sessionState.newHadoopConf())
    assert(fm.isInstanceOf[FaultInjectingCheckpointFileManager])
  }
}
