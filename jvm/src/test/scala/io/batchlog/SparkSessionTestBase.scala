package io.batchlog

import java.io.File
import java.nio.file.Files

import scala.collection.mutable

import org.scalatest.BeforeAndAfterAll
import org.scalatest.concurrent.{Signaler, ThreadSignaler, TimeLimits}
import org.scalatest.time.{Seconds, Span}

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.streaming.StreamingQuery

import io.batchlog.log.BatchTaggedFileStreamSinkLog

/**
 * One local `SparkSession` per suite (graphframes style): created in `beforeAll`, stopped in
 * `afterAll`. Suites run one after another in one forked JVM, so each suite owns the session while
 * it runs.
 */
trait SparkSessionTestBase extends TempDirs with BeforeAndAfterAll with TimeLimits {

  /** The master URL; a suite that needs task retries overrides it (e.g. `local[2,3]`). */
  protected def master: String = "local[2]"

  /** Extra session settings for the whole suite. */
  protected def sparkConf: Map[String, String] = Map.empty

  @transient private var _spark: SparkSession = _
  private val tempDirs = mutable.ArrayBuffer.empty[File]

  protected def spark: SparkSession = _spark

  /** The JVM's CPU time (ns) and the wall clock (ns) as the suite started: see [[afterAll]]. */
  private var started = (0L, 0L)

  private def processCpuNanos: Long =
    java.lang.management.ManagementFactory.getOperatingSystemMXBean match {
      case os: com.sun.management.OperatingSystemMXBean => os.getProcessCpuTime
      case _ => 0L
    }

  override protected def beforeAll(): Unit = {
    started = (processCpuNanos, System.nanoTime())
    super.beforeAll()
    val builder = SparkSession
      .builder()
      .master(master)
      .appName(getClass.getSimpleName)
      .config("spark.ui.enabled", "false")
      .config("spark.sql.shuffle.partitions", "2")
      .config("spark.sql.streaming.stopTimeout", "10s")
    sparkConf.foreach { case (k, v) => builder.config(k, v) }
    _spark = builder.getOrCreate()
  }

  override protected def afterAll(): Unit = {
    try {
      if (_spark != null) {
        _spark.streams.active.foreach(_.stop())
        _spark.stop()
        _spark = null
      }
      SparkSession.clearActiveSession()
      SparkSession.clearDefaultSession()
      tempDirs.foreach(deleteRecursively)
    } finally {
      super.afterAll()
      // What the suite cost the machine, its session included (BATCHLOG_TEST_CPU=1; the suites
      // run one at a time in their fork, so the JVM's CPU is theirs): for choosing what to make
      // cheaper, as tests/cpu_report.py does for pytest's modules.
      if (sys.env.get("BATCHLOG_TEST_CPU").contains("1")) {
        val (cpu0, wall0) = started
        println(
          f"[cpu] ${getClass.getSimpleName}%-36s ${(processCpuNanos - cpu0) / 1e9}%7.1f s CPU " +
            f"${(System.nanoTime() - wall0) / 1e9}%7.1f s wall"
        )
      }
    }
  }

  /** A fresh temporary directory, deleted recursively at the end of the suite. */
  protected def createTempDir(prefix: String = "batchlog"): File = {
    val dir = Files.createTempDirectory(prefix).toFile.getCanonicalFile
    tempDirs += dir
    dir
  }

  /** The batch-tagged log in metadata directory `dir`, with the session's settings. */
  protected def ours(dir: File): BatchTaggedFileStreamSinkLog =
    new BatchTaggedFileStreamSinkLog(spark, dir.toString)

  /** Spark's own sink log in metadata directory `dir`, with the session's settings. */
  protected def vanilla(dir: File): VanillaSinkLog = new VanillaSinkLog(spark, dir.toString)

  /** The writer-lease watcher (the keeper) of query run `runId`, while it runs. */
  protected def leaseWatcher(runId: String): Option[Thread] =
    Thread.getAllStackTraces.keySet.toArray(Array.empty[Thread])
      .find(_.getName == s"batchlog-writer-lease-$runId")

  /**
   * Waits (up to 30 s) for the writer-lease watcher of query run `runId` to end: after that thread,
   * nothing of batchlog's run writes to its sink.
   */
  protected def awaitLeaseWatcher(runId: String): Unit = leaseWatcher(runId).foreach(_.join(30000))

  /** Runs `body` with the query `start` starts, stopping it afterwards whatever happens. */
  protected def withQuery[A](start: => StreamingQuery)(body: StreamingQuery => A): A = {
    val q = start
    try body(q)
    finally q.stop()
  }

  /** How long a query may take to process what it was given before the test fails. */
  protected val queryTimeout: Span = Span(120, Seconds)

  /**
   * `q.processAllAvailable()`, which has no timeout of its own: after [[queryTimeout]] the wait is
   * interrupted and the test fails, saying so, instead of hanging the build.
   */
  protected def processAll(q: StreamingQuery): Unit = {
    implicit val signaler: Signaler = ThreadSignaler
    failAfter(queryTimeout)(q.processAllAvailable())
  }

  /** Sets session SQL confs for the duration of `f`, restoring the previous values. */
  protected def withSQLConf[A](pairs: (String, String)*)(f: => A): A = {
    val conf = spark.conf
    val previous = pairs.map { case (k, _) => k -> conf.getOption(k) }
    pairs.foreach { case (k, v) => conf.set(k, v) }
    try f
    finally previous.foreach {
        case (k, Some(v)) => conf.set(k, v)
        case (k, None) => conf.unset(k)
      }
  }
}
