package io.batchlog.log

import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.atomic.AtomicLong

import com.codahale.metrics.{Counter, Gauge, Histogram, MetricRegistry}
import org.apache.hadoop.fs.Path

import org.apache.spark.batchlog.MetricsBridge

/**
 * A sink's metrics in this JVM, registered in Spark's own metrics system as the source
 * `batchlog.<sink>` ([[SinkMetrics.nameOf]]), so that the sinks users already run (JMX, Spark's
 * `PrometheusServlet`, Graphite, ...) report them. The full name of a metric is
 * `<spark.metrics.namespace, else the app id>.driver.batchlog.<sink>.<metric>`.
 *
 * What a writer updates: the batches it commits, its compactions, the log bytes it publishes, its
 * lease refreshes; what an operation run in this JVM updates: rewinds. Values are since this JVM
 * started (counters, histograms) or as last seen here (gauges); `-1` where there is none yet. Each
 * update is a few atomic operations: nothing here reads or writes the store.
 */
final class SinkMetrics private (val sourceName: String) {
  val registry = new MetricRegistry

  private def gauge(name: String)(value: => Long): Unit =
    registry.register(name, new Gauge[java.lang.Long] { def getValue: java.lang.Long = value })

  private val latest = new AtomicLong(-1)
  private val compactEntries = new AtomicLong(-1)
  private val compactBytes = new AtomicLong(-1)
  private val logBytesSeen = new AtomicLong(-1)
  @volatile private var leaseAge: () => Long = () => -1L

  gauge(SinkMetrics.LatestBatch)(latest.get)
  gauge(SinkMetrics.CompactEntries)(compactEntries.get)
  gauge(SinkMetrics.CompactBytes)(compactBytes.get)
  gauge(SinkMetrics.LogBytes)(logBytesSeen.get)
  gauge(SinkMetrics.LeaseRefreshAgeMs)(leaseAge())
  private val commits: Counter = registry.counter(SinkMetrics.Commits)
  private val commitLatency: Histogram = registry.histogram(SinkMetrics.CommitLatencyMs)
  private val compactions: Counter = registry.counter(SinkMetrics.Compactions)
  private val compactionTime: Histogram = registry.histogram(SinkMetrics.CompactionMs)
  private val leaseFailures: Counter = registry.counter(SinkMetrics.LeaseRefreshFailures)
  private val rewinds: Counter = registry.counter(SinkMetrics.Rewinds)

  /** Batch `batchId` is committed: its log file published, in `ms` of the driver's commit. */
  def committed(batchId: Long, ms: Long): Unit = {
    latest.set(batchId); commits.inc(); commitLatency.update(ms)
  }

  /** A batch file of `bytes` is published: the live log grew by that much. */
  def batchFilePublished(bytes: Long): Unit =
    if (logBytesSeen.get >= 0) logBytesSeen.addAndGet(bytes)

  /**
   * A compact file of `entries` entries and `bytes` bytes is published: the live log is that file
   * until the next batch file.
   */
  def compacted(entries: Long, bytes: Long): Unit = {
    compactEntries.set(entries); compactBytes.set(bytes); logBytesSeen.set(bytes)
  }

  /** A compaction (published or not) took `ms`. */
  def compactionTook(ms: Long): Unit = { compactions.inc(); compactionTime.update(ms) }

  /** The writer's lease refresh age from now on (ms since its last successful refresh). */
  def leaseHeld(ageMs: () => Long): Unit = leaseAge = ageMs

  /** The writer's run ended: it holds no lease. */
  def leaseReleased(): Unit = leaseAge = () => -1L

  /** A refresh of the writer's lease failed, landed late, or found the lease lost. */
  def leaseRefreshFailed(): Unit = leaseFailures.inc()

  /** A rewind of the sink finished in this JVM. */
  def rewound(): Unit = rewinds.inc()

  /** The Spark (its `SparkEnv`) this source is registered with; None: not yet, or no Spark. */
  @volatile private var registeredWith: Option[AnyRef] = None

  /** Registers this source with the running Spark, unless it is registered with it already. */
  private def registerWithSpark(): Unit = {
    def current(env: Option[AnyRef]) = env.exists(e => registeredWith.exists(_ eq e))
    val env = MetricsBridge.currentEnv
    if (env.isDefined && !current(env)) synchronized {
      if (!current(env)) registeredWith = MetricsBridge.register(sourceName, registry)
    }
  }
}

object SinkMetrics {

  // The metric names, defined once (docs/metrics.md lists them, a test scrapes each)
  val LatestBatch = "latestBatch"
  val Commits = "commits"
  val CommitLatencyMs = "commitLatencyMs"
  val Compactions = "compactions"
  val CompactionMs = "compactionMs"
  val CompactEntries = "compactEntries"
  val CompactBytes = "compactBytes"
  val LogBytes = "logBytes"
  val LeaseRefreshAgeMs = "leaseRefreshAgeMs"
  val LeaseRefreshFailures = "leaseRefreshFailures"
  val Rewinds = "rewinds"

  /** How many sinks a JVM keeps metrics for; past it a new sink's are neither kept nor reported. */
  val MaxSinks = 4096

  private val bySink = new ConcurrentHashMap[String, SinkMetrics]()

  /**
   * The metrics of the sink whose log is `metadataPath`, registered with the running Spark's
   * metrics system (again, if Spark was restarted in this JVM since).
   */
  def of(metadataPath: Path): SinkMetrics = {
    val key = metadataPath.toString
    val found = bySink.get(key)
    val kept =
      if (found != null) Some(found)
      else if (bySink.size >= MaxSinks) None
      else
        Some(bySink.synchronized {
          val again = bySink.get(key)
          if (again != null) again
          else { val m = new SinkMetrics(uniqueName(key)); bySink.put(key, m); m }
        })
    kept.fold(new SinkMetrics(nameOf(metadataPath))) { m => m.registerWithSpark(); m }
  }

  /**
   * `batchlog.<the output directory, scheme dropped, every other character but letters and digits
   * made `_`>`: `file:/data/events/_spark_metadata` is `batchlog.data_events`, and
   * `s3a://bucket/events/_spark_metadata` is `batchlog.bucket_events`.
   */
  def nameOf(metadataPath: Path): String = {
    val out = Option(metadataPath.getParent).getOrElse(metadataPath).toUri
    val raw = Option(out.getAuthority).getOrElse("") + "/" + Option(out.getPath).getOrElse("")
    "batchlog." + raw.map(c => if (c.isLetterOrDigit && c < 128) c else '_').mkString
      .replaceAll("_+", "_").stripPrefix("_").stripSuffix("_")
  }

  /** [[nameOf]], with a suffix if another sink of this JVM has that name already. */
  private def uniqueName(key: String): String = {
    val base = nameOf(new Path(key))
    var clash = false
    val it = bySink.values().iterator()
    while (it.hasNext) if (it.next().sourceName == base) clash = true
    if (!clash) base
    else s"${base}_${Integer.toHexString(key.hashCode)}"
  }
}
