package io.batchlog

import java.io.File
import java.net.URI
import java.nio.file.Files
import java.util.concurrent.{ConcurrentHashMap, CountDownLatch, TimeUnit}
import java.util.concurrent.atomic.AtomicInteger

import scala.jdk.CollectionConverters._

import org.apache.hadoop.fs.Path
import org.apache.hadoop.mapreduce.TaskType

import org.apache.spark.{Success, TaskContext}
import org.apache.spark.scheduler.{
  SparkListener,
  SparkListenerJobStart,
  SparkListenerTaskEnd,
  SparkListenerTaskStart
}
import org.apache.spark.internal.io.FileNameSpec
import org.apache.spark.sql.expressions.UserDefinedFunction
import io.batchlog.testshim.{intStream, MemoryStream}
import org.scalatest.concurrent.Eventually.{eventually, timeout}
import org.apache.spark.sql.functions.{broadcast, col, input_file_name, udf}
import org.apache.spark.sql.streaming.{StreamingQuery, StreamingQueryException}

import io.batchlog.commit.{WriterGuard, WrittenRows}
import io.batchlog.log.{BatchCommit, DataFileNaming, LogFormat, SinkMetrics}
import io.batchlog.log.BatchTaggedFileStreamSinkLog.metadataPathOf
import io.batchlog.shim.{FileStreamSinkLog, SinkFileStatus}

/**
 * Makes a task fail on a chosen row, from inside a query (tasks run in this JVM with `local`).
 * Top-level so the UDF's closure does not capture a suite.
 */
object FailureInjection {
  @volatile var failOn: Long = Long.MinValue
  @volatile var firstAttemptOnly: Boolean = true
  val failures = new AtomicInteger(0)

  /** A row whose task waits on it until interrupted (its job cancelled) or `unblock` opens. */
  @volatile var blockOn: Long = Long.MinValue
  @volatile var blocked: CountDownLatch = new CountDownLatch(1)
  @volatile var unblock: CountDownLatch = new CountDownLatch(1)

  /** If set, the failing row's last attempt (the master allows 3) waits for it before failing. */
  @volatile var lastFailureAfter: CountDownLatch = null

  /**
   * Rows `[holdFrom, holdUntil)`: their tasks, once committed, wait in their completion until
   * interrupted (their job cancelled), after `completing` is counted down once per task.
   */
  @volatile var holdFrom: Long = Long.MaxValue
  @volatile var holdUntil: Long = Long.MaxValue
  @volatile var completing: CountDownLatch = new CountDownLatch(2)
  private val holding = ConcurrentHashMap.newKeySet[java.lang.Long]()

  def reset(): Unit = {
    failOn = Long.MinValue; firstAttemptOnly = true; failures.set(0)
    blockOn = Long.MinValue; blocked = new CountDownLatch(1); unblock.countDown()
    unblock = new CountDownLatch(1); lastFailureAfter = null
    holdFrom = Long.MaxValue; holdUntil = Long.MaxValue; completing = new CountDownLatch(2)
    holding.clear()
  }

  private def untilInterrupted(): Unit =
    try new CountDownLatch(1).await(2, TimeUnit.MINUTES)
    catch { case _: InterruptedException => () }

  val maybeFail: UserDefinedFunction = udf { (id: Long) =>
    val task = TaskContext.get()
    if (id == failOn && (!firstAttemptOnly || task.attemptNumber() == 0)) {
      Option(lastFailureAfter).filter(_ => task.attemptNumber() == 2).foreach { latch =>
        latch.await(2, TimeUnit.MINUTES)
      }
      failures.incrementAndGet()
      throw new IllegalStateException(s"injected failure on row $id")
    }
    if (id == blockOn) {
      blocked.countDown()
      unblock.await() // until the task is interrupted, or the test lets it go
    }
    if (id >= holdFrom && id < holdUntil && holding.add(task.taskAttemptId())) {
      // Registered after the committer's own completion listener, so it runs before it.
      val latch = completing
      task.addTaskCompletionListener[Unit] { _ => latch.countDown(); untilInterrupted() }
    }
    id
  }.asNondeterministic()
}

/**
 * Real streaming queries, `MemoryStream` to a file sink, committed by
 * [[BatchTaggedCommitProtocol]]. The master allows 3 attempts per task so that a failed task is
 * retried.
 */
class CommitProtocolQuerySuite extends SparkSessionTestBase {
  import BatchLogConf._
  import TestLogs._

  override protected def master: String = "local[2,3]"
  override protected def sparkConf: Map[String, String] =
    Map(CommitProtocolKey -> CommitProtocolClass)

  private val NamePattern = ("^part-[0-9]{5}-batch-([0-9]+)-" +
    "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}([-.].*)?$").r

  override protected def afterAll(): Unit = {
    FailureInjection.reset()
    super.afterAll()
  }

  /** One streaming sink under test: its input, output and checkpoint. */
  private case class Sink(root: File, fmt: String, partitioned: Boolean, interval: Int) {
    val out = new File(root, "out")
    val checkpoint = new File(root, "checkpoint")
    val meta = new File(out, "_spark_metadata")
    val input: MemoryStream[Int] = intStream(spark, 2)

    def start(): StreamingQuery = withSQLConf(CompactIntervalKey -> interval.toString) {
      val df = input.toDF().select(
        FailureInjection.maybeFail(col("value").cast("long")).as("id"),
        (col("value") % 3).as("p")
      )
      val w = df.writeStream.format(fmt).option("checkpointLocation", checkpoint.toString)
      (if (partitioned) w.partitionBy("p") else w).start(out.toString)
    }
  }

  /** Runs `body` on a fresh sink in a temporary directory, with no failure injected. */
  private def withSink[A](fmt: String, partitioned: Boolean, interval: Int)(body: Sink => A): A =
    withTempDir { root =>
      FailureInjection.reset()
      body(Sink(root, fmt, partitioned, interval))
    }

  /** Tasks started and not yet ended, as Spark's listener bus reports them (every test's). */
  private val runningTasks = new AtomicInteger(0)

  override protected def beforeAll(): Unit = {
    super.beforeAll()
    spark.sparkContext.addSparkListener(new SparkListener {
      override def onTaskStart(e: SparkListenerTaskStart): Unit = runningTasks.incrementAndGet()
      override def onTaskEnd(e: SparkListenerTaskEnd): Unit = runningTasks.decrementAndGet()
    })
  }

  /**
   * Waits (30 s at most) until every task has ended and the scheduler has handled its result. A
   * failed or cancelled job's other task may still be running as the query's thread moves on (Spark
   * kills it without waiting for it; on a busy machine it is slow): its abort deletes its file as
   * it ends. A task's end reaches listeners as the scheduler starts handling its result (which may
   * delete a late-committed file): a job run after it waits for that handling to end. (Spark's
   * status tracker is no help here: it updates its executors' task counts lazily.)
   */
  private def awaitNoRunningTasks(): Unit = {
    val deadline = System.currentTimeMillis() + 30000
    while (runningTasks.get > 0 && System.currentTimeMillis() < deadline) Thread.sleep(20)
    assert(runningTasks.get === 0, "tasks still running after 30 s")
    spark.sparkContext.parallelize(Seq(1), 1).count()
  }

  private def leaseOf(s: Sink): File = new File(s.out, "_batchlog/_batchlog-lease.json")

  /**
   * A query on a fresh sink (no partitions) with [[StallingFileSystem]] installed writes batches
   * 0-1; `body` then breaks batch 2. After it, and once every task ended, batch 2 must have left
   * nothing ([[assertBatchLeftNothing]]).
   */
  private def onBatch2(fmt: String, leftNothing: String)(
      body: (Sink, StreamingQuery) => Unit
  ): Unit =
    StallingFileSystem.installed(spark.sparkContext.hadoopConfiguration) {
      withSink(fmt, partitioned = false, interval = 3) { s =>
        val q = s.start()
        try {
          (0 to 1).foreach(runBatch(s, q, _))
          body(s, q)
        } finally {
          StallingFileSystem.release.countDown()
          q.stop()
        }
        assertBatchLeftNothing(s, 2, leftNothing)
      }
    }

  /**
   * Batch `batch`'s job fails (its other task succeeded first, its files on the driver); its abort
   * is then held by the store (StallingFileSystem, installed) as it deletes that task's file.
   */
  private def failBatchWithAbortHeld(s: Sink, batch: Int): Unit = {
    FailureInjection.failOn = rowsOf(batch)(2).toLong
    FailureInjection.firstAttemptOnly = false
    FailureInjection.lastFailureAfter = successfulTaskOfBatch(batch)
    StallingFileSystem.onDriver = true
    StallingFileSystem.stallOn = s"-batch-$batch-"
    s.input.addData(rowsOf(batch): _*)
    assert(
      StallingFileSystem.stalled.await(queryTimeout.totalNanos, TimeUnit.NANOSECONDS),
      s"the failed batch $batch's abort never reached its files"
    )
  }

  /**
   * Once every task ended: no file of batch `batch` is left (`what`), `verify` finds no orphan,
   * plain Spark reads exactly the batches before it, and a restart writes it once.
   */
  private def assertBatchLeftNothing(s: Sink, batch: Int, what: String): Unit = {
    awaitNoRunningTasks()
    assert(dataFilesOf(s, batch).isEmpty, what)
    assert(BatchLog.forPath(spark, s.out.toString).verify().orphanCount === 0L)
    checkSink(s, batch - 1)
    FailureInjection.reset()
    resumeAndCheck(s, batch)
  }

  /** The query's micro-batch thread (Spark names it after the query's run). */
  private def queryThread(q: StreamingQuery): Thread = {
    val runId = q.runId.toString
    Thread.getAllStackTraces.keySet.asScala
      .find(t => t.getName.startsWith("stream execution thread") && t.getName.contains(runId))
      .get
  }

  /**
   * Counted down as a task of batch `batch`'s job ends successfully, once the scheduler handled it
   * (it posts a task's end as it handles the task's result, one event at a time: a failure after
   * this is handled after that result). The listener stays, inert once counted down.
   */
  private def successfulTaskOfBatch(batch: Long): CountDownLatch = {
    val done = new CountDownLatch(1)
    successfulPartition.set(-1)
    spark.sparkContext.addSparkListener(new SparkListener {
      @volatile private var stages = Set.empty[Int]
      override def onJobStart(e: SparkListenerJobStart): Unit =
        if (Option(e.properties).exists(_.getProperty("streaming.sql.batchId") == batch.toString))
          stages ++= e.stageIds
      override def onTaskEnd(e: SparkListenerTaskEnd): Unit =
        if (stages.contains(e.stageId) && e.reason == Success && done.getCount > 0) {
          successfulPartition.set(e.taskInfo.index)
          done.countDown()
        }
    })
    done
  }

  /** The partition of the task [[successfulTaskOfBatch]] saw. */
  private val successfulPartition = new AtomicInteger(-1)

  /**
   * The run `runId` ended: its lease watcher is done, no guard of it is left, and the sink's log
   * and batchlog's folder are as they were `before` (nothing of batchlog's touched them `after`).
   */
  private def assertRunEnded(
      s: Sink,
      runId: String,
      before: Map[String, Seq[Byte]],
      after: String
  ): Unit = {
    awaitLeaseWatcher(runId)
    val meta = s.meta.getCanonicalPath
    assert(!WriterGuard.guardedSinks.exists(p =>
      new File(p.toUri.getPath).getCanonicalPath == meta
    ))
    assert(batchlogFiles(s) === before, s"the sink's log changed $after")
  }

  /** A restart re-runs the unfinished batch `batch` (its rows written once), then one more. */
  private def resumeAndCheck(s: Sink, batch: Int): Unit = {
    withQuery(s.start()) { q =>
      processAll(q)
      checkSink(s, batch)
      runBatch(s, q, batch + 1)
    }
    checkSink(s, batch + 1)
  }

  private def rowsOf(batch: Int): Seq[Int] = (0 until 7).map(batch * 100 + _)

  /** The commit record on the first line of batch file `batch` in log directory `meta`. */
  private def firstCommit(meta: File, batch: Int): Option[BatchCommit] =
    LogFormat.decode(readLines(new File(meta, batch.toString)).tail.head).commit

  private def runBatch(sink: Sink, q: StreamingQuery, batch: Int): Unit = {
    sink.input.addData(rowsOf(batch): _*)
    processAll(q)
  }

  /** Data files on disk under `out` (not metadata, checksums or markers), as local paths. */
  private def dataFiles(out: File): Set[String] = {
    def walk(f: File): Seq[File] =
      if (f.isDirectory) f.listFiles().toSeq.filterNot(_.getName.startsWith("_")).flatMap(walk)
      else Seq(f)
    walk(out).filterNot(f => f.getName.startsWith(".") || f.getName.startsWith("_"))
      .map(_.getCanonicalPath).toSet
  }

  /** The data files on disk under the sink's output whose names say batch `batch`. */
  private def dataFilesOf(s: Sink, batch: Long): Set[String] =
    dataFiles(s.out).filter(DataFileNaming.batchIdOf(_).contains(batch))

  private def localPath(logged: String): String = new Path(new URI(logged)).toUri.getPath

  /** The ids in each of `paths` (local paths), read by one Spark job. */
  private def idsByFile(fmt: String, paths: Seq[String]): Map[String, Seq[Long]] =
    if (paths.isEmpty) Map.empty
    else spark.read.format(fmt).schema("id LONG").load(paths: _*)
      .select(col("id"), input_file_name()).collect().toSeq
      .groupBy(r => localPath(r.getString(1))).map { case (f, rows) => f -> rows.map(_.getLong(0)) }

  /**
   * Checks the sink after batches `0..last`: log layout, every line tagged with the right batch,
   * data file names, files on disk == files logged, each batch's files hold exactly its rows, and
   * Spark's own read of the output returns every row exactly once.
   */
  private def checkSink(s: Sink, last: Int): Unit = {
    val ids = 0 to last
    assert(logFileNames(s.meta, indexed = true) ===
      ids.map(b => if ((b + 1) % s.interval == 0) s"$b.compact" else b.toString).toSet)
    val perBatch: Map[Long, Seq[String]] = ids.map { b =>
      val compact = (b + 1) % s.interval == 0
      val entries = taggedEntriesIn(new File(s.meta, if (compact) s"$b.compact" else b.toString))
      val own = entries.filter(_._2 == b.toLong)
      if (!compact) assert(own === entries, s"batch file $b holds only batch $b")
      b.toLong -> own.map(_._1)
    }.toMap
    // each batch's first line holds its commit: its query, its run, and its rows counted once
    // (rowsOf: 7), whatever attempts its tasks took; no other line has one
    ids.foreach { b =>
      val f = new File(s.meta, if ((b + 1) % s.interval == 0) s"$b.compact" else b.toString)
      val own = readLines(f).tail.map(LogFormat.decode).filter(_.batchId.contains(b.toLong))
      val c = own.head.commit
      assert(c.flatMap(_.rows) === Some(7L), s"batch $b's commit in $f: $c")
      assert(c.exists(c => c.queryId.isDefined && c.runId.isDefined), s"batch $b: $c")
      assert(own.tail.forall(_.commit.isEmpty), s"batch $b: one commit, on its first line")
    }
    // a compact file holds exactly the entries of every batch up to it, each once
    ids.filter(b => (b + 1) % s.interval == 0).foreach { b =>
      val entries = taggedEntriesIn(new File(s.meta, s"$b.compact"))
      assert(entries.size === entries.toSet.size)
      assert(entries.toSet === (0 to b).flatMap(x => perBatch(x.toLong).map((_, x.toLong))).toSet)
    }
    val logged = perBatch.toSeq.flatMap { case (b, ps) => ps.map(p => localPath(p) -> b) }
    assert(logged.size === logged.map(_._1).toSet.size, "no file logged twice")
    assert(logged.map(_._1).toSet === dataFiles(s.out), "files on disk == files logged")
    logged.foreach { case (p, b) =>
      val name = new File(p).getName
      val m = NamePattern.findFirstMatchIn(name)
      assert(m.map(_.group(1).toLong) === Some(b), s"$name is logged for batch $b")
      assert(name.endsWith(if (s.fmt == "json") ".json" else ".parquet"), name)
      if (s.partitioned) assert(new File(p).getParentFile.getName.startsWith("p="), p)
    }
    val idsIn = idsByFile(s.fmt, logged.map(_._1))
    ids.foreach { b =>
      val rows = perBatch(b.toLong).flatMap(p => idsIn.getOrElse(localPath(p), Nil)).sorted
      assert(rows === rowsOf(b).map(_.toLong), s"rows of batch $b")
    }
    val all = spark.read.format(s.fmt).load(s.out.toString)
    assert(all.select("id").collect().map(_.getLong(0)).toSeq.sorted ===
      ids.flatMap(rowsOf).map(_.toLong))
    if (s.partitioned) {
      assert(all.where("p = 1").count() === ids.flatMap(rowsOf).count(_ % 3 == 1))
    }
  }

  /** Every file under `dir` with its bytes, to prove a restart changed nothing. */
  private def snapshot(dir: File): Map[String, Seq[Byte]] = {
    def walk(f: File): Seq[File] = if (f.isDirectory) f.listFiles().toSeq.flatMap(walk) else Seq(f)
    walk(dir).map(f => f.getCanonicalPath -> Files.readAllBytes(f.toPath).toSeq).toMap
  }

  /** The bytes of every file of the sink's log and of batchlog's folder beside it, by path. */
  private def batchlogFiles(s: Sink): Map[String, Seq[Byte]] =
    snapshot(s.meta) ++ snapshot(new File(s.out, "_batchlog"))

  for (
    (fmt, partitioned, interval) <-
      Seq(("json", false, 3), ("parquet", true, 2), ("json", true, 2), ("parquet", false, 3))
  ) {
    val label = s"$fmt, ${if (partitioned) "partitioned" else "not partitioned"}, " +
      s"compactInterval $interval"

    test(
      s"batches are tagged in file names and log lines; a re-run batch writes nothing ($label)"
    ) {
      withSink(fmt, partitioned, interval) { s =>
        withQuery(s.start())(q => (0 to 5).foreach(runBatch(s, q, _)))
        checkSink(s, 5)

        // forget that batch 5 was committed: the restarted query re-runs it, the sink skips it
        val commit = new File(s.checkpoint, "commits/5")
        assert(commit.delete())
        new File(s.checkpoint, "commits/.5.crc").delete()
        val before = snapshot(s.out)
        withQuery(s.start()) { q2 =>
          processAll(q2)
          assert(commit.exists(), "batch 5 was re-run and committed")
          assert(snapshot(s.out) === before, "the re-run of batch 5 wrote nothing")
          checkSink(s, 5)
          runBatch(s, q2, 6)
        }
        checkSink(s, 6)
      }
    }
  }

  test("a task that fails once is retried: no file of the failed attempt is logged or left") {
    withSink("json", partitioned = false, interval = 2) { s =>
      withQuery(s.start()) { q =>
        runBatch(s, q, 0)
        FailureInjection.failOn = rowsOf(1)(5).toLong
        runBatch(s, q, 1)
        assert(FailureInjection.failures.get === 1)
        FailureInjection.reset()
        runBatch(s, q, 2)
      }
      checkSink(s, 2)
    }
  }

  test("each commit names its query and run: a restart is a new run of the same query") {
    withSink("parquet", partitioned = true, interval = 5) { s =>
      def commitOf(b: Int) = firstCommit(s.meta, b).get
      val (id, run1) = withQuery(s.start()) { q =>
        (0 to 1).foreach(runBatch(s, q, _))
        (q.id.toString, q.runId.toString)
      }
      val run2 = withQuery(s.start()) { q =>
        runBatch(s, q, 2)
        q.runId.toString
      }
      assert(run1 !== run2)
      assert(Seq(0, 1, 2).map(commitOf).map(c => (c.queryId, c.runId, c.rows)) === Seq(
        (Some(id), Some(run1), Some(7L)),
        (Some(id), Some(run1), Some(7L)),
        (Some(id), Some(run2), Some(7L))
      ))
    }
  }

  test("a batch's rows are its write job's, not those of a broadcast job of the same execution") {
    withTempDir { root =>
      val out = new File(root, "out")
      val input = intStream(spark, 2)
      // the static side is broadcast by a job of each batch's execution, with as many tasks (2)
      // as the write: the rows must be the write's, 3 per input row that has a match
      val static = spark.range(0, 30, 1, 2).select((col("id") % 10).as("k"), col("id").as("v"))
      val joined = input.toDF().join(broadcast(static), col("value") === col("k"))
      withQuery(
        joined.writeStream.format("parquet")
          .option("checkpointLocation", new File(root, "checkpoint").toString)
          .start(out.toString)
      ) { q =>
        input.addData(1, 2, 3, 42)
        q.processAllAvailable()
        input.addData(5, 77)
        q.processAllAvailable()
      }
      val meta = new File(out, "_spark_metadata")
      assert(Seq(0, 1).map(firstCommit(meta, _).flatMap(_.rows)) === Seq(Some(9L), Some(3L)))
      assert(spark.read.parquet(out.toString).count() === 12)
    }
  }

  test(
    "a listener bus far behind: the batch commits within the wait, its rows unknown, not wrong"
  ) {
    // Another listener of the shared queue stalls 3 s on batch 1's first task end: batchlog's
    // listener is behind the bus when that batch commits, so it waits (0.5 s here) and records no
    // rows. Batch 2 commits after the bus caught up (batch 1's late marker included): rows again.
    val stall = new java.util.concurrent.atomic.AtomicBoolean(false)
    val caughtUp = new CountDownLatch(1)
    val staller = new SparkListener {
      override def onTaskEnd(e: SparkListenerTaskEnd): Unit =
        if (stall.compareAndSet(true, false)) { Thread.sleep(3000); caughtUp.countDown() }
    }
    val before = WrittenRows.waitMs
    WrittenRows.waitMs = 500
    spark.sparkContext.addSparkListener(staller)
    try
      withSink("parquet", partitioned = false, interval = 5) { s =>
        def commitOf(b: Int) = firstCommit(s.meta, b).get
        withQuery(s.start()) { q =>
          runBatch(s, q, 0)
          stall.set(true)
          val started = System.nanoTime()
          runBatch(s, q, 1)
          assert(stall.get === false, "the stall never happened")
          assert(caughtUp.await(1, TimeUnit.MINUTES))
          runBatch(s, q, 2)
          val (id, run) = (q.id.toString, q.runId.toString)
          assert(Seq(0, 1, 2).map(commitOf).map(c => (c.queryId, c.runId, c.rows)) === Seq(
            (Some(id), Some(run), Some(7L)),
            (Some(id), Some(run), None),
            (Some(id), Some(run), Some(7L))
          ))
          assert(commitOf(1).durationMs.exists(_ >= 500), commitOf(1))
          assert((System.nanoTime() - started) / 1000000L < 60000)
        }
        assert(spark.read.parquet(s.out.toString).count() === 21)
      }
    finally {
      spark.sparkContext.removeSparkListener(staller)
      WrittenRows.waitMs = before
    }
  }

  test(
    "a lease removed under a running writer: leaseRefreshFailures counts it, the next batch fails"
  ) {
    withSink("parquet", partitioned = false, interval = 5) { s =>
      val q = withSQLConf(WriterLeaseTimeoutKey -> "2s")(s.start())
      try {
        runBatch(s, q, 0)
        // the sink's source, as the writer's log and a rewind name it
        val metrics = SinkMetrics.of(metadataPathOf(spark, s.out.toString))
        def failures = metrics.registry.getCounters.get(SinkMetrics.LeaseRefreshFailures).getCount
        def age = metrics.registry.getGauges.get(SinkMetrics.LeaseRefreshAgeMs).getValue
          .asInstanceOf[java.lang.Long].longValue
        assert(metrics.registry.getCounters.get(SinkMetrics.Commits).getCount === 1)
        val before = failures
        assert(age >= 0 && age < 2000, s"a held lease refreshed every 0.5 s is $age ms old")
        // what a forced rewind, or a hand, does: the writer's next refresh finds no lease
        assert(leaseOf(s).delete())
        eventually(timeout(queryTimeout))(assert(failures === before + 1))
        s.input.addData(rowsOf(1): _*)
        val e = intercept[StreamingQueryException](q.awaitTermination(queryTimeout.toMillis))
        val cause = Iterator.iterate[Throwable](e)(_.getCause).takeWhile(_ != null)
          .collectFirst { case b: BatchLogException => b.code }
        assert(cause === Some(BatchLogException.WriterLeaseLost), e.getMessage)
        assert(failures === before + 1, "one lost lease, counted once")
        // the run ends as its thread does (the lease's watcher sees it within a refresh interval)
        eventually(timeout(queryTimeout))(assert(age === -1L, "no lease held once the run ended"))
      } finally q.stop()
      assert(!new File(s.meta, "1").exists(), "the batch after the loss is not logged")
    }
  }

  test("a stop() in the middle of a batch: its lease is gone as stop() returns; no change after") {
    withSink("parquet", partitioned = false, interval = 3) { s =>
      val lease = new File(s.out, "_batchlog/_batchlog-lease.json")
      val q = s.start()
      val atStop =
        try {
          (0 to 1).foreach(runBatch(s, q, _))
          assert(lease.isFile)
          FailureInjection.blockOn = rowsOf(2)(3).toLong
          s.input.addData(rowsOf(2): _*)
          assert(
            FailureInjection.blocked.await(queryTimeout.totalNanos, TimeUnit.NANOSECONDS),
            "batch 2's task never reached its blocking row"
          )
          q.stop()
          // stop() waited for the query's thread, which aborted the batch and ended the run there
          assert(!q.isActive)
          assert(!lease.exists(), "the stopped run's lease is still there as stop() returns")
          batchlogFiles(s)
        } finally q.stop()
      assertRunEnded(s, q.runId.toString, atStop, "after stop() returned")
      assert(!new File(s.meta, "2").exists(), "no log file for the stopped batch")
      assert(!new File(s.checkpoint, "commits/2").exists())
      assert(new File(s.checkpoint, "offsets/2").exists())
      // The other task may have finished its file as the batch stopped: Spark drops a result that
      // reaches a cancelled job, so its file is in no committer's list. It is an orphan: in no log
      // (plain Spark never reads it), listed by verify, deleted by vacuum; nothing else is left.
      awaitNoRunningTasks()
      val left = dataFilesOf(s, 2)
      val sink = BatchLog.forPath(spark, s.out.toString)
      val report = sink.verify()
      assert(report.orphans.map(o => localPath(o.path)).toSet === left, report)
      assert(sink.vacuum().olderThan("0s").dryRun(false).execute().deletedFiles === left.size)
      checkSink(s, 1)

      FailureInjection.reset()
      resumeAndCheck(s, 2)
    }
  }

  Seq(
    ("as it commits its file", "json", false),
    ("as its writer opens its file", "parquet", true)
  ).foreach { case (moment, fmt, atCreate) =>
    test(s"a task killed $moment deletes it: a stopped batch leaves no file ($fmt)") {
      onBatch2(fmt, "the killed tasks' files were deleted") { (s, q) =>
        // A task of batch 2 is held with its file on disk as the query stops: Spark marks it
        // killed and interrupts it. Past its commit, Spark would report it killed, its file
        // kept; as it opens its file, the open fails (Spark 3.5 calls no abortTask there).
        StallingFileSystem.atCreate = atCreate
        StallingFileSystem.stallOn = "-batch-2-"
        s.input.addData(rowsOf(2): _*)
        assert(
          StallingFileSystem.stalled.await(queryTimeout.totalNanos, TimeUnit.NANOSECONDS),
          s"no task of batch 2 was held $moment"
        )
        q.stop()
        assert(!leaseOf(s).exists(), "the stopped run's lease is still there as stop() returns")
        assert(
          StallingFileSystem.interrupted.await(queryTimeout.totalNanos, TimeUnit.NANOSECONDS),
          "the held task was never interrupted"
        )
      }
    }
  }

  test("a task killed after its commit, as it completes, deletes its file") {
    onBatch2("json", "the killed tasks' files were deleted") { (s, q) =>
      // Both tasks of batch 2 committed their files and wait in their completion as the query
      // stops: Spark's executor reports them killed, and drops what they committed.
      FailureInjection.holdFrom = rowsOf(2).head.toLong
      FailureInjection.holdUntil = rowsOf(2).last.toLong + 1
      s.input.addData(rowsOf(2): _*)
      assert(
        FailureInjection.completing.await(queryTimeout.totalNanos, TimeUnit.NANOSECONDS),
        "the tasks of batch 2 never completed"
      )
      assert(dataFilesOf(s, 2).size === 2, "each task committed its file")
      q.stop()
      assert(!leaseOf(s).exists(), "the stopped run's lease is still there as stop() returns")
    }
  }

  test("a task's files reaching the driver after its batch aborted are deleted as they arrive") {
    onBatch2("parquet", "the late task's file was deleted") { (s, q) =>
      // A task of batch 2 is held; the other one's files reach the driver.
      FailureInjection.blockOn = rowsOf(2).last.toLong
      val firstDone = successfulTaskOfBatch(2)
      s.input.addData(rowsOf(2): _*)
      assert(
        FailureInjection.blocked.await(queryTimeout.totalNanos, TimeUnit.NANOSECONDS),
        "batch 2's task never reached its blocking row"
      )
      assert(firstDone.await(queryTimeout.totalNanos, TimeUnit.NANOSECONDS))
      spark.sparkContext.parallelize(Seq(1), 1).count() // the scheduler handled that task
      // The query's thread is interrupted while its batch's job runs (as stop() does just after
      // it asks Spark to cancel the job): the batch aborts at once, while the job runs on. The
      // abort is held as it deletes the other task's file; the held task goes on, and its files
      // reach the driver then, after the abort began.
      StallingFileSystem.onDriver = true
      StallingFileSystem.stallOn = f"part-${successfulPartition.get}%05d-batch-2-"
      queryThread(q).interrupt()
      assert(
        StallingFileSystem.stalled.await(queryTimeout.totalNanos, TimeUnit.NANOSECONDS),
        "the abort never reached the other task's file"
      )
      FailureInjection.unblock.countDown()
      awaitNoRunningTasks()
      StallingFileSystem.release.countDown()
      intercept[StreamingQueryException](q.awaitTermination(queryTimeout.toMillis))
      assert(!leaseOf(s).exists(), "the aborted run's lease is still there as the query ends")
    }
  }

  test("an interrupt landing as a failed batch aborts: the abort ends, the failure is kept") {
    onBatch2("parquet", "the failed job's files were removed") { (s, q) =>
      // The query's thread is interrupted as the abort runs: a stop() just after the failure.
      failBatchWithAbortHeld(s, 2)
      queryThread(q).interrupt()
      StallingFileSystem.release.countDown()
      val e = intercept[StreamingQueryException](q.awaitTermination())
      assert(e.getMessage.contains("injected failure on row 202"), e.getMessage)
      assert(!leaseOf(s).exists(), "the failed run's lease is still there as its failure is raised")
    }
  }

  test("an abort the store holds keeps an interrupted query's thread no longer than its grace") {
    val grace = BatchTaggedCommitProtocol.abortGraceMs
    BatchTaggedCommitProtocol.abortGraceMs = 500L
    try onBatch2("parquet", "the failed job's files were removed") { (s, q) =>
        // The abort hangs on the store; the query's thread is interrupted.
        failBatchWithAbortHeld(s, 2)
        queryThread(q).interrupt()
        val e = intercept[StreamingQueryException](q.awaitTermination(queryTimeout.toMillis))
        assert(e.getMessage.contains("injected failure on row 202"), e.getMessage)
        assert(dataFilesOf(s, 2).size === 1, "the abort is still held on the other task's file")
        // The store lets go: the abort finishes behind the ended query.
        StallingFileSystem.release.countDown()
        eventually(timeout(queryTimeout)) {
          assert(dataFilesOf(s, 2).isEmpty, "the failed job's files were removed")
          assert(!leaseOf(s).exists())
        }
      }
    finally BatchTaggedCommitProtocol.abortGraceMs = grace
  }

  test("a batch whose job fails is not logged; after a restart its rows are written once") {
    withSink("parquet", partitioned = false, interval = 3) { s =>
      val lease = new File(s.out, "_batchlog/_batchlog-lease.json")
      val (run, atFailure) = withQuery(s.start()) { q =>
        (0 to 2).foreach(runBatch(s, q, _))
        assert(lease.isFile)
        FailureInjection.failOn = rowsOf(3)(2).toLong
        FailureInjection.firstAttemptOnly = false
        // The batch's other task succeeds, and the driver has its files, before the job fails: so
        // abortJob deletes them. (One finishing just as the job fails may leave an orphan: see "a
        // stop() in the middle of a batch ...".)
        FailureInjection.lastFailureAfter = successfulTaskOfBatch(3)
        s.input.addData(rowsOf(3): _*)
        val e = intercept[StreamingQueryException](processAll(q))
        assert(e.getMessage.contains("injected failure on row 302"), e.getMessage)
        // The run ended as its batch failed, before the failure was raised: its lease is gone
        // already, not a moment after, while the caller may be copying or rewinding the sink.
        assert(!lease.exists(), "the failed run's lease is still there as its failure is raised")
        (q.runId.toString, batchlogFiles(s))
      }
      assertRunEnded(s, run, atFailure, "after the failure was raised")
      awaitNoRunningTasks()
      assert(FailureInjection.failures.get === 3, "3 attempts of the failing task")
      assert(!new File(s.meta, "3").exists(), "no log file for the failed batch")
      assert(!new File(s.checkpoint, "commits/3").exists())
      assert(new File(s.checkpoint, "offsets/3").exists())
      assert(
        dataFilesOf(s, 3).isEmpty,
        "the failed job's files were removed"
      )
      checkSink(s, 2)

      FailureInjection.reset()
      resumeAndCheck(s, 3)
      assert(FailureInjection.failures.get === 0)
    }
  }

  test("both newTaskTempFile overloads name a file by its batch, and the task commits it") {
    // Spark 3.5 and 4.0 call the older String overload for a sink without partition columns.
    withSink("json", partitioned = false, interval = 3) { s =>
      val p = new BatchTaggedCommitProtocol("1", s.out.toString)
      p.setupManifestOptions(new FileStreamSinkLog(1, spark, s.meta.toString, None), 4L)
      val conf = spark.sparkContext.hadoopConfiguration
      val ctx = new org.apache.hadoop.mapreduce.task.TaskAttemptContextImpl(
        conf,
        new org.apache.hadoop.mapreduce.TaskAttemptID("jt", 0, TaskType.MAP, 3, 0)
      )
      p.setupTask(ctx)
      val files = Seq(
        p.newTaskTempFile(ctx, None, ".json"),
        p.newTaskTempFile(ctx, Some("k=1"), FileNameSpec("", ".json"))
      )
      files.foreach { f =>
        val path = new Path(f)
        assert(DataFileNaming.batchIdOf(path.getName) === Some(4L), f)
        path.getFileSystem(conf).create(path).close()
      }
      val committed = p.commitTask(ctx).obj.asInstanceOf[Seq[SinkFileStatus]]
      assert(committed.map(st => new Path(st.path).getName) === files.map(new Path(_).getName))
    }
  }

  test("a batch already in the log fails the commit instead of being logged twice") {
    withSink("json", partitioned = false, interval = 3) { s =>
      val q = withQuery(s.start()) { q => runBatch(s, q, 0); q }
      val p = new BatchTaggedCommitProtocol("1", s.out.toString)
      val sinkLog = new FileStreamSinkLog(1, spark, s.meta.toString, None)
      // the same query (its id as Spark's stream thread sets it), committing batch 0 again
      spark.sparkContext.setLocalProperty(WriterGuard.QueryIdProperty, q.id.toString)
      try p.setupManifestOptions(sinkLog, 0L)
      finally spark.sparkContext.setLocalProperty(WriterGuard.QueryIdProperty, null)
      val job = org.apache.hadoop.mapreduce.Job.getInstance(spark.sparkContext.hadoopConfiguration)
      p.setupJob(job)
      val e = intercept[BatchLogException](p.commitJob(job, Seq.empty))
      assert(e.code === BatchLogException.RaceCommittingBatch)
      assert(e.getMessage.contains("Batch 0"))
      assert(logFileNames(s.meta, indexed = true) === Set("0"))
      checkSink(s, 0)
    }
  }
}
