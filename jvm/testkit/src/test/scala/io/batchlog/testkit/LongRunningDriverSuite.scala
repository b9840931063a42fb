package io.batchlog.testkit

import java.io.File

import scala.collection.mutable

import org.apache.hadoop.fs.Path

import org.apache.spark.sql.streaming.StreamingQuery

import io.batchlog.{
  BatchLogConf,
  BatchLogException,
  BatchTaggedCommitProtocol,
  SparkSessionTestBase
}
import io.batchlog.commit.WriterGuard
import io.batchlog.log.{BatchTaggedFileStreamSinkLog, CompactIndex, SinkLogEntry}
import io.batchlog.shim.{FileStreamSink, FileStreamSinkLog}
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

  /**
   * Runs one query over 3 batches to its own sink under `root` and stops it; the query (stopped),
   * and whether the run was guarded while it ran.
   */
  private def runOnce(root: File, i: Int): (StreamingQuery, Boolean) = {
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
    (q, guarded)
  }

  test("a query run's writer guard and log go when the run ends: none kept per run") {
    withTempDir { root =>
      val runs = 4
      assert((0 until runs).map(runOnce(root, _)._2) == Seq.fill(runs)(true))
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

  /** The value of the first field of `obj` (its class or a superclass) holding a `T`. */
  private def fieldOf[T](obj: AnyRef, cls: Class[T]): T = {
    val fields = Iterator
      .iterate[Class[_]](obj.getClass)(_.getSuperclass)
      .takeWhile(_ != null)
      .flatMap(_.getDeclaredFields)
    fields
      .map { f => f.setAccessible(true); f.get(obj) }
      .collectFirst { case v if cls.isInstance(v) => cls.cast(v) }
      .getOrElse(fail(s"no ${cls.getName} in $obj"))
  }

  test("a run's guard and log go when it ends while its stopped query is still held") {
    // A Spark Connect server keeps every stopped query for an hour after its last access
    // (SparkConnectService.streamingSessionManager), and with it the query's sink and Spark's log
    // of the sink, which keyed the guard and the log. Here the test holds the queries.
    withTempDir { root =>
      val runs = 3
      val held = (0 until runs).map(runOnce(root, _))
      assert(held.map(_._2) == Seq.fill(runs)(true))
      val deadline = System.currentTimeMillis() + 30000
      while (
        (ours(root, WriterGuard.guardedSinks).nonEmpty ||
          ours(root, BatchTaggedFileStreamSinkLog.loggedSinks).nonEmpty) &&
        System.currentTimeMillis() < deadline
      ) Thread.sleep(20)
      assert(
        ours(root, WriterGuard.guardedSinks).isEmpty &&
          ours(root, BatchTaggedFileStreamSinkLog.loggedSinks).isEmpty,
        s"still held 30 s after $runs runs ended, their queries held: guards " +
          s"${ours(root, WriterGuard.guardedSinks)}, logs " +
          ours(root, BatchTaggedFileStreamSinkLog.loggedSinks)
      )

      // Spark's log of the first run's sink, still reachable from its stopped query: a committer
      // set up with it is refused, and no guard or log comes back for that run.
      val execution = held.head._1.getClass.getMethod("streamingQuery").invoke(held.head._1)
      val sink = fieldOf(execution, classOf[FileStreamSink])
      val sparkLog = fieldOf(sink, classOf[FileStreamSinkLog])
      val p = new BatchTaggedCommitProtocol("1", new File(root, "out-0").toString)
      val e = intercept[BatchLogException](p.setupManifestOptions(sparkLog, 3L))
      assert(e.code == BatchLogException.WriterLeaseLost, e.getMessage)
      assert(e.getMessage.contains("its query run has ended"), e.getMessage)
      assert(e.getMessage.contains("Batch 3 was not written to the sink"), e.getMessage)
      assert(ours(root, WriterGuard.guardedSinks).isEmpty)
      assert(ours(root, BatchTaggedFileStreamSinkLog.loggedSinks).isEmpty)
      assert(spark.read.parquet(new File(root, "out-0").toString).count() == 3)
    }
  }

  test("a stopped batchlog source keeps no index of its sink, while its query is still held") {
    // The downstream query a Connect server keeps for an hour holds its source, and the source
    // its sink's log: the log's cached compact indexes go when the query stops.
    withTempDir { root =>
      runOnce(root, 0) // 3 batches, 2.compact
      val q = spark.readStream.format("batchlog").schema("value INT")
        .load(new File(root, "out-0").toString)
        .writeStream.format("noop")
        .option("checkpointLocation", new File(root, "chk-down").toString).start()
      val source =
        try {
          q.processAllAvailable()
          val execution = q.getClass.getMethod("streamingQuery").invoke(q)
          val sources = execution.getClass.getMethod("sources").invoke(execution)
          val found = sources.asInstanceOf[Seq[AnyRef]].collectFirst {
            case s: io.batchlog.source.BatchLogSource => s
          }
          val s = found.getOrElse(fail(s"no batchlog source in $sources"))
          assert(s.sink.cachedIndexIds == Seq(2L), "the running source reads through 2.compact")
          s
        } finally q.stop()
      assert(source.sink.cachedIndexIds.isEmpty, source.sink.cachedIndexIds)
    }
  }

  private def entry(b: Long, i: Int): SinkLogEntry = SinkLogEntry(
    f"file:///out/part-0000$i-batch-$b-00000000-0000-0000-0000-${b * 10 + i}%012d.parquet",
    100L + i,
    isDir = false,
    1700000000000L,
    1,
    1024L,
    "add",
    Some(b)
  )

  private def pathsOf(log: BatchTaggedFileStreamSinkLog, b: Long): Set[String] = {
    val out = mutable.Set.empty[String]
    log.foreachLivePathWhere(_.contains(b))(out += _)
    out.toSet
  }

  test("a log keeps its newest two compact files' indexes and reads an index file once") {
    withTempDir { root =>
      val meta = new File(root, "_spark_metadata").toString
      val writer = new BatchTaggedFileStreamSinkLog(spark, meta)
      (0L until 30L).foreach { b =>
        assert(writer.add(b, Array.tabulate(2)(entry(b, _))))
        // compactions read the previous compact file's index: kept, two at most
        assert(writer.cachedIndexIds.size <= 2, s"after batch $b: ${writer.cachedIndexIds}")
      }
      assert(writer.cachedIndexIds == Seq(23L, 26L))
      assert(new File(root, "_spark_metadata/29.compact" + CompactIndex.Suffix).isFile)

      // A reader counts the opens of 29.compact's index: those of its first lookup (the v3 head,
      // then its blocks), however many lookups it answers, and the answers are the whole log's.
      val opens = new java.util.concurrent.atomic.AtomicInteger()
      FaultInjectingCheckpointFileManager.reset()
      FaultInjectingCheckpointFileManager.callback = (_, _) => opens.incrementAndGet()
      try
        withSQLConf(
          TestkitConf.CheckpointFileManagerClassKey -> FaultManager,
          TestkitConf.FaultOpKey -> "open",
          TestkitConf.FaultPathRegexKey -> "/29\\.compact\\.index$",
          TestkitConf.FaultActionKey -> "call"
        ) {
          val reader = new BatchTaggedFileStreamSinkLog(spark, meta)
          assert(pathsOf(reader, 0) == Array.tabulate(2)(entry(0, _).path).toSet)
          val perReader = opens.get
          assert(perReader >= 1 && perReader <= 2, s"$perReader opens")
          (1L until 30L).foreach { b =>
            assert(pathsOf(reader, b) == Array.tabulate(2)(entry(b, _).path).toSet, s"batch $b")
          }
          assert(opens.get == perReader)
          assert((reader.cachedIndexIds ++ reader.cachedHeadIds).distinct == Seq(29L))
          // another instance reads it as often once more (the count is real)
          assert(pathsOf(new BatchTaggedFileStreamSinkLog(spark, meta), 5).size == 2)
          assert(opens.get == 2 * perReader)

          // Bit rot after the reader cached the index: one digit of batch 5's entry changes, the
          // compact file keeps its name, length and mtime. The cached index still checks each
          // run's CRC32C, so the same reader refuses the damaged run instead of serving it.
          val compact = new File(root, "_spark_metadata/29.compact")
          val mtime = compact.lastModified()
          val text = new String(java.nio.file.Files.readAllBytes(compact.toPath), "UTF-8")
          val rotten = text.replace("-000000000050.parquet", "-000000000059.parquet")
          assert(rotten != text && rotten.length == text.length)
          java.nio.file.Files.write(compact.toPath, rotten.getBytes("UTF-8"))
          assert(compact.setLastModified(mtime))
          val e = intercept[BatchLogException](pathsOf(reader, 5))
          assert(e.code == BatchLogException.CorruptLog, e.getMessage)
          assert(e.getMessage.contains("29.compact is damaged"), e.getMessage)
          // the cached index found it; the refusal reads the index head once more at most
          assert(opens.get <= 2 * perReader + 1)
          assert(pathsOf(reader, 6) == Array.tabulate(2)(entry(6, _).path).toSet)
        }
      finally FaultInjectingCheckpointFileManager.callback = (_, _) => ()
    }
  }
}
