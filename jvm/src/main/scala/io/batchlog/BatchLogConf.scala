package io.batchlog

import org.apache.spark.network.util.JavaUtils
import org.apache.spark.sql.SparkSession

/**
 * Every configuration key batchlog reads, defined once.
 *
 * batchlog honours Spark's own file-sink log settings exactly as `FileStreamSinkLog` does (it reads
 * them from the same `SQLConf` accessors), and adds its own keys under `spark.batchlog.`.
 */
object BatchLogConf {

  /** Spark's key that selects the sink's commit protocol; set it to [[CommitProtocolClass]]. */
  val CommitProtocolKey = "spark.sql.streaming.commitProtocolClass"

  /** The class name users put under [[CommitProtocolKey]]. */
  val CommitProtocolClass: String = classOf[BatchTaggedCommitProtocol].getName

  /** Spark's settings that shape the sink log; batchlog honours them unchanged. */
  val CompactIntervalKey = "spark.sql.streaming.fileSink.log.compactInterval"
  val CleanupDelayKey = "spark.sql.streaming.fileSink.log.cleanupDelay"
  val DeletionKey = "spark.sql.streaming.fileSink.log.deletion"
  val MinBatchesToRetainKey = "spark.sql.streaming.minBatchesToRetain"

  /**
   * Retention that keeps lineage: at each compaction, drop the entries of batches older than the
   * last `spark.batchlog.retention.batches` batches, and entries whose file is older than
   * `spark.batchlog.retention.age` (a duration like `30d`; also hidden from readers, as Spark's
   * sink option `retention` does). Entries kept keep their `batchId`; untagged entries are never
   * dropped by batch. Dropped counts are logged and recorded in the compact file's index.
   */
  val RetentionBatchesKey = "spark.batchlog.retention.batches"
  val RetentionAgeKey = "spark.batchlog.retention.age"

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
    val age = spark.conf.getOption(RetentionAgeKey).map { v =>
      scala.util.Try(JavaUtils.timeStringAsMs(v)).filter(_ > 0).getOrElse(
        throw BatchLogException.invalidArgument(
          RetentionAgeKey,
          v,
          "it must be a positive duration such as 30d or 12h"
        )
      )
    }
    Retention(batches, age)
  }

  /** Threads that delete files (data files and state files of a rewind, vacuum). */
  val DeleteParallelismKey = "spark.batchlog.delete.parallelism"
  val DeleteParallelismDefault = 32

  def deleteParallelism(spark: SparkSession): Int =
    spark.conf.getOption(DeleteParallelismKey).map(_.toInt).getOrElse(DeleteParallelismDefault)

  /**
   * How long a writer lease stays live without a refresh (a duration like `2m`). A query writing a
   * sink refreshes its lease (`_spark_metadata/batchlog-lease.json`) every quarter of this and
   * removes it when it stops; rewind and takeover refuse while a live lease names another writer.
   */
  val WriterLeaseTimeoutKey = "spark.batchlog.writer.leaseTimeout"
  val WriterLeaseTimeoutDefault = "2m"

  def writerLeaseTimeoutMs(spark: SparkSession): Long = {
    val v = spark.conf.getOption(WriterLeaseTimeoutKey).getOrElse(WriterLeaseTimeoutDefault)
    scala.util.Try(JavaUtils.timeStringAsMs(v)).filter(_ > 0).getOrElse(
      throw BatchLogException.invalidArgument(
        WriterLeaseTimeoutKey,
        v,
        "it must be a positive duration such as 2m or 30s"
      )
    )
  }

  /**
   * An observer of rewinds: the name of a class implementing `io.batchlog.ops.RewindStepListener`
   * (with a public constructor taking the `SparkSession`, or none), told the name of each rewind
   * step (one of `io.batchlog.ops.Rewind.Steps`) once it is done. For monitoring, or for tests that
   * stop a rewind between two steps. Default: none.
   */
  val RewindStepListenerKey = "spark.batchlog.rewind.stepListener"

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
