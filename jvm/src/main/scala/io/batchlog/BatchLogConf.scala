package io.batchlog

import org.apache.spark.network.util.JavaUtils
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.internal.SQLConf

/**
 * Every configuration key batchlog reads, defined once.
 *
 * batchlog honours Spark's own file-sink log settings exactly as `FileStreamSinkLog` does (it reads
 * them from the same `SQLConf` accessors, and names them by Spark's own `SQLConf` entries), and
 * adds its own keys under `spark.batchlog.`, registered as `SQLConf` entries with their docs and
 * defaults (so `SET -v` lists them). Their values are checked where they are read, with a
 * [[BatchLogException]] `INVALID_ARGUMENT` that names the key, as every batchlog error does.
 */
object BatchLogConf {

  /** Spark's key that selects the sink's commit protocol; set it to [[CommitProtocolClass]]. */
  val CommitProtocolKey: String = SQLConf.STREAMING_FILE_COMMIT_PROTOCOL_CLASS.key

  /** The class name users put under [[CommitProtocolKey]]. */
  val CommitProtocolClass: String = classOf[BatchTaggedCommitProtocol].getName

  /** Spark's settings that shape the sink log; batchlog honours them unchanged. */
  val CompactIntervalKey: String = SQLConf.FILE_SINK_LOG_COMPACT_INTERVAL.key
  val CleanupDelayKey: String = SQLConf.FILE_SINK_LOG_CLEANUP_DELAY.key
  val DeletionKey: String = SQLConf.FILE_SINK_LOG_DELETION.key
  val MinBatchesToRetainKey: String = SQLConf.MIN_BATCHES_TO_RETAIN.key

  /**
   * Spark's key that lets a streaming file read infer its schema; the `batchlog` source follows it
   * as Spark's file sources do.
   */
  val StreamingSchemaInferenceKey: String = SQLConf.STREAMING_SCHEMA_INFERENCE.key

  /**
   * Registers batchlog key `name` as a `SQLConf` entry (a string: batchlog parses it, see above)
   * and returns it. Once per JVM: a second class loader of the jar (a Spark Connect session's, say)
   * finds the entry registered and keeps it.
   */
  private def key(name: String, doc: String, default: Option[String]): String = {
    scala.util.Try {
      val b = SQLConf.buildConf(name).doc(doc).version("0.1.0").stringConf
      default.fold(b.createOptional.key)(b.createWithDefault(_).key)
    }
    name
  }

  /**
   * Retention that keeps lineage: at each compaction, drop the entries of batches older than the
   * last `spark.batchlog.retention.batches` batches, and entries whose file is older than
   * `spark.batchlog.retention.age` (a duration like `30d`; also hidden from readers, as Spark's
   * sink option `retention` does). Entries kept keep their `batchId`; untagged entries are never
   * dropped by batch. Dropped counts are logged and recorded in the compact file's index.
   */
  val RetentionBatchesKey: String = key(
    "spark.batchlog.retention.batches",
    "At each compaction, drop the entries of batches older than the last N batches.",
    None
  )
  val RetentionAgeKey: String = key(
    "spark.batchlog.retention.age",
    "At each compaction, drop entries whose file is older than this duration (e.g. 30d); " +
      "readers do not see them either.",
    None
  )

  final case class Retention(batches: Option[Long], ageMs: Option[Long])

  def retention(spark: SparkSession): Retention = {
    val batches = spark.conf.getOption(RetentionBatchesKey).map { v =>
      val n = scala.util.Try(v.trim.toLong).getOrElse(-1L)
      if (n <= 0) throw BatchLogException.invalidArgument(
        RetentionBatchesKey,
        v,
        "it must be a positive number of batches"
      )
      n
    }
    val age = spark.conf.getOption(RetentionAgeKey).map(duration(RetentionAgeKey, _, "30d or 12h"))
    Retention(batches, age)
  }

  /** Threads that delete files (data files and state files of a rewind, vacuum). */
  private val DeleteParallelismDefault = "32"
  val DeleteParallelismKey: String = key(
    "spark.batchlog.delete.parallelism",
    "Threads that delete files (the data and state files of a rewind, orphans of a vacuum).",
    Some(DeleteParallelismDefault)
  )

  def deleteParallelism(spark: SparkSession): Int = {
    val v = spark.conf.getOption(DeleteParallelismKey).getOrElse(DeleteParallelismDefault)
    scala.util.Try(v.trim.toInt).filter(_ > 0).getOrElse(
      throw BatchLogException.invalidArgument(
        DeleteParallelismKey,
        v,
        "it must be a positive number"
      )
    )
  }

  /**
   * How long a writer lease stays live without a refresh (a duration like `2m`). A query writing a
   * sink refreshes its lease (`_batchlog/_batchlog-lease.json`) every quarter of this and removes
   * it when it stops; rewind and takeover refuse while a live lease names another writer.
   */
  private val WriterLeaseTimeoutDefault = "2m"
  val WriterLeaseTimeoutKey: String = key(
    "spark.batchlog.writer.leaseTimeout",
    "How long a writer lease stays live without a refresh; the writing query refreshes it every " +
      "quarter of this. Rewind, takeover and repair refuse while a lease is live.",
    Some(WriterLeaseTimeoutDefault)
  )

  def writerLeaseTimeoutMs(spark: SparkSession): Long =
    durationOf(spark, WriterLeaseTimeoutKey, WriterLeaseTimeoutDefault, "2m or 30s")

  /**
   * How long an operation that fences a writer (rewind, takeover, repair, vacuum, a starting
   * writer) watches a writer lease it finds before it gives up. A lease is dead only once this
   * process has seen it unchanged for the lease's whole timeout (no two hosts' clocks are compared,
   * [[io.batchlog.log.LeaseWatch]]); with the default `0s` nothing waits, and the `WRITER_ACTIVE`
   * error says how long to watch (a re-run in the same session counts the time already seen).
   * `lease`: the found lease's own timeout, the wait that tells a dead writer from a live one (the
   * CLI's default).
   */
  private val FenceWaitDefault = "0s"
  val FenceWaitKey: String = key(
    "spark.batchlog.writer.fenceWait",
    "How long rewind, takeover, repair and vacuum watch a writer lease they find before they give " +
      "up: a lease is dead once this process has seen it unchanged for the lease's timeout. " +
      "`lease`: that timeout, as the writer set it (the CLI's --wait default).",
    Some(FenceWaitDefault)
  )

  /** [[fenceWaitMs]] of `lease`: watch a lease for its own timeout. */
  val FenceWaitLease: Long = -1L

  def fenceWaitMs(spark: SparkSession): Long = {
    val v = spark.conf.getOption(FenceWaitKey).getOrElse(FenceWaitDefault)
    if (v.trim == "lease") FenceWaitLease
    else
      scala.util.Try(JavaUtils.timeStringAsMs(v)).filter(_ >= 0).getOrElse(
        throw BatchLogException.invalidArgument(
          FenceWaitKey,
          v,
          "it must be a duration such as 2m, or `lease` (the lease's own timeout)"
        )
      )
  }

  /**
   * How long a reader of a sink (a query reading it with the `batchlog` source or Spark's file
   * source, registered at each of its starts in `_batchlog/_readers/`) may go unseen before
   * `inspect` shows it as stale: probably gone (its checkpoint deleted, its query retired).
   */
  private val ReadersStaleAfterDefault = "7d"
  val ReadersStaleAfterKey: String = key(
    "spark.batchlog.readers.staleAfter",
    "How long a registered reader of a sink (a query reading it, registered at each of its " +
      "starts) may go unseen before inspect shows it as stale.",
    Some(ReadersStaleAfterDefault)
  )

  def readersStaleAfterMs(spark: SparkSession): Long =
    durationOf(spark, ReadersStaleAfterKey, ReadersStaleAfterDefault, "7d or 12h")

  /**
   * How long a sink keeps the record of each maintenance operation run on it (rewind, cascade,
   * takeover, adopt, repair, vacuum; `_batchlog/_history/`): the next operation deletes older ones.
   * Batches have no records of their own: their history is the log's, bounded as it is.
   */
  private val HistoryRetentionDefault = "90d"
  val HistoryRetentionKey: String = key(
    "spark.batchlog.history.retention",
    "How long a sink keeps the record of each maintenance operation run on it (rewind, takeover, " +
      "adopt, repair, vacuum); the next operation deletes older ones.",
    Some(HistoryRetentionDefault)
  )

  def historyRetentionMs(spark: SparkSession): Long =
    durationOf(spark, HistoryRetentionKey, HistoryRetentionDefault, "90d or 12h")

  /** The positive duration set for `key` in the session (else `default`), in ms. */
  private def durationOf(spark: SparkSession, key: String, default: String, example: String): Long =
    duration(key, spark.conf.getOption(key).getOrElse(default), example)

  private def duration(key: String, v: String, example: String): Long =
    scala.util.Try(JavaUtils.timeStringAsMs(v)).filter(_ > 0).getOrElse(
      throw BatchLogException.invalidArgument(
        key,
        v,
        s"it must be a positive duration such as $example"
      )
    )

  /**
   * An observer of rewinds: the name of a class implementing `io.batchlog.ops.RewindStepListener`
   * (with a public constructor taking the `SparkSession`, or none), told the name of each rewind
   * step (one of `io.batchlog.ops.Rewind.Steps`) once it is done. For monitoring, or for tests that
   * stop a rewind between two steps. Default: none.
   */
  val RewindStepListenerKey = "spark.batchlog.rewind.stepListener"

  /**
   * Whether a compaction on S3A copies the previous compact file's runs on the store (a multipart
   * upload of ranged part copies, `io.batchlog.log.ObjectStoreCopy`), and on GCS composes it with
   * the new lines (`io.batchlog.log.GcsCompose`), where it can: `true` (default) or `false` (always
   * through the driver, as on other file systems).
   */
  val ServerSideCompactionKey: String = key(
    "spark.batchlog.compaction.serverSide",
    "On S3A, copy the previous compact file on the store (a multipart upload of ranged part " +
      "copies); on GCS, compose it with the new lines; where it can. False: through the driver.",
    Some("true")
  )

  /**
   * The size from which a previous compact file is compacted on the store (S3A copy, GCS compose):
   * below it, one upload through the driver costs less than a copy and an upload.
   */
  val ServerSideMinBytesKey: String = key(
    "spark.batchlog.compaction.serverSideMinBytes",
    "Compact on the store only when the previous compact file is at least this large (e.g. 8m); " +
      "below it one upload through the driver costs less.",
    Some("8m")
  )

  def serverSideMinBytes(spark: SparkSession): Long = {
    val v = spark.conf.getOption(ServerSideMinBytesKey).getOrElse("8m").trim
    try org.apache.spark.network.util.JavaUtils.byteStringAsBytes(v)
    catch {
      case _: NumberFormatException =>
        throw BatchLogException.invalidArgument(
          ServerSideMinBytesKey,
          v,
          "it must be a size such as 8m, 512k or 0"
        )
    }
  }

  def serverSideCompaction(spark: SparkSession): Boolean =
    spark.conf.getOption(ServerSideCompactionKey).map(_.trim.toLowerCase) match {
      case None | Some("true") => true
      case Some("false") => false
      case Some(v) =>
        throw BatchLogException.invalidArgument(
          ServerSideCompactionKey,
          v,
          "it must be true or false"
        )
    }

  /** The Spark settings above, as this session resolves them (defaults included). */
  final case class SinkLogSettings(
      compactInterval: Int,
      cleanupDelayMs: Long,
      deletion: Boolean,
      minBatchesToRetain: Int
  )

  def sinkLogSettings(spark: SparkSession): SinkLogSettings = {
    val conf = spark.sessionState.conf
    SinkLogSettings(
      conf.fileSinkLogCompactInterval,
      conf.fileSinkLogCleanupDelay,
      conf.fileSinkLogDeletion,
      conf.minBatchesToRetain
    )
  }
}
