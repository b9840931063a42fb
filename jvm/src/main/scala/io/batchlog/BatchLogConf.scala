package io.batchlog

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

  /** Threads that delete files (data files and state files of a rewind, vacuum). */
  val DeleteParallelismKey = "spark.batchlog.delete.parallelism"
  val DeleteParallelismDefault = 32

  def deleteParallelism(spark: SparkSession): Int =
    spark.conf.getOption(DeleteParallelismKey).map(_.toInt).getOrElse(DeleteParallelismDefault)

  /**
   * Test-only fault injection: the JVM halts (as if killed) right after the named rewind step (one
   * of `io.batchlog.ops.Rewind.Steps`).
   */
  val FaultHaltAfterRewindStep = "spark.batchlog.test.haltAfterRewindStep"

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
