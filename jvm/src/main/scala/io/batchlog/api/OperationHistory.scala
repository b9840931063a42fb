package io.batchlog.api

import scala.util.control.NonFatal

import org.apache.hadoop.security.UserGroupInformation
import org.apache.spark.internal.Logging
import org.apache.spark.sql.SparkSession

import io.batchlog.{BatchLogConf, BatchLogException, BuildInfo}
import io.batchlog.log.{BatchTaggedFileStreamSinkLog, OperationLog, OperationRecord}
import io.batchlog.ops.{RewindPlanSummary, RewindResult}
import io.batchlog.shim.CheckpointFileManager

/**
 * Records each maintenance operation that ran (not a dry run) in the history of the sink it changed
 * ([[OperationLog]]): who ran it, where, when, with which arguments, and what it changed. The
 * record is written after the operation, so it never slows or blocks it: a record that cannot be
 * written is a warning, and the operation's own outcome stands. A failure is recorded too, unless
 * it changed nothing (its error says so) or the path is no sink: batchlog writes nothing into a
 * directory that is not a sink's output.
 */
private[api] object OperationHistory extends Logging {

  /** What a rewind of one sink changed (the batch it rewound to is among its arguments). */
  def rewound(plan: RewindPlanSummary, r: RewindResult): Map[String, Long] = Map(
    "batches" -> plan.affectedBatches.length.toLong,
    "dataFilesDeleted" -> r.dataFilesDeleted,
    "dataBytesDeleted" -> r.dataBytes
  )

  def done(
      spark: SparkSession,
      operation: String,
      arguments: Map[String, String],
      startMs: Long,
      changes: Seq[(String, Map[String, Long])]
  ): Unit = changes.foreach { case (sink, changed) =>
    append(spark, sink, record(spark, operation, arguments, startMs, "done", changed))
  }

  def failed(
      spark: SparkSession,
      sink: String,
      operation: String,
      arguments: Map[String, String],
      startMs: Long,
      error: Throwable
  ): Unit = error match {
    case e: BatchLogException if e.outcome.contains(BatchLogException.NothingChanged) =>
    case _ =>
      val code = error match {
        case e: BatchLogException => e.code
        case e => e.getClass.getSimpleName
      }
      val isSink = scala.util.Try(BatchTaggedFileStreamSinkLog.metadataPathIn(spark, sink)).toOption
        .exists { case (fs, m) =>
          fs.exists(m) || fs.exists(OperationLog.dir(m).getParent)
        }
      if (isSink) {
        append(
          spark,
          sink,
          record(spark, operation, arguments, startMs, s"failed: $code", Map.empty)
        )
      }
  }

  private def record(
      spark: SparkSession,
      operation: String,
      arguments: Map[String, String],
      startMs: Long,
      outcome: String,
      changed: Map[String, Long]
  ): OperationRecord = {
    val now = System.currentTimeMillis()
    OperationRecord(
      OperationLog.Version,
      operation,
      now,
      math.max(0L, now - startMs),
      scala.util.Try(UserGroupInformation.getCurrentUser.getShortUserName)
        .getOrElse(System.getProperty("user.name", "")),
      scala.util.Try(java.net.InetAddress.getLocalHost.getHostName).getOrElse(""),
      spark.sparkContext.applicationId,
      BuildInfo.version,
      arguments,
      outcome,
      changed
    )
  }

  private def append(spark: SparkSession, sink: String, r: OperationRecord): Unit =
    try {
      val (_, meta) = BatchTaggedFileStreamSinkLog.metadataPathIn(spark, sink)
      val fm = CheckpointFileManager.create(
        OperationLog.dir(meta),
        spark.sessionState.newHadoopConf()
      )
      OperationLog.append(fm, meta, r, BatchLogConf.historyRetentionMs(spark))
    } catch {
      case NonFatal(e) =>
        logWarning(s"batchlog could not record the ${r.operation} of $sink in its history", e)
    }
}
