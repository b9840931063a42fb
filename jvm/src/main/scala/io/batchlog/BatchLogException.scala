package io.batchlog

/**
 * The errors batchlog raises, each with a message that names the file or argument at fault and the
 * way out. `code` is stable: the Python facade maps it to a Python exception class.
 */
class BatchLogException(val code: String, message: String, cause: Throwable = null)
    extends RuntimeException(message, cause)

object BatchLogException {
  val NotASink = "NOT_A_SINK"
  val CorruptLog = "CORRUPT_LOG"
  val MissingLogFile = "MISSING_LOG_FILE"
  val InvalidArgument = "INVALID_ARGUMENT"
  val RaceCommittingBatch = "RACE_COMMITTING_BATCH"
  val NotACheckpoint = "NOT_A_CHECKPOINT"
  val UnsupportedCheckpoint = "UNSUPPORTED_CHECKPOINT"
  val BeyondHorizon = "BEYOND_REWIND_HORIZON"
  val RewindInProgress = "REWIND_IN_PROGRESS"
  val QueryActive = "QUERY_ACTIVE"

  def notASink(path: String): BatchLogException = new BatchLogException(
    NotASink,
    s"$path is not a file-sink output: it has no _spark_metadata directory. Pass the path given to " +
      "writeStream...start(path) (the directory that holds _spark_metadata)."
  )

  def corruptLine(file: String, lineNo: Long, detail: String): BatchLogException =
    new BatchLogException(
      CorruptLog,
      s"Sink log file $file, line $lineNo, is not a valid log entry ($detail). Nothing was changed. " +
        "Restore the file from a backup, or run `python -m batchlog repair` to rebuild the log " +
        "from the data files' batch-tagged names."
    )

  def badHeader(file: String, header: String): BatchLogException = {
    val detail =
      if (header == null) "it is empty (a truncated write)"
      else if (header.matches("v\\d+"))
        s"its version header is '$header' but only 'v1' is supported"
      else s"its first line '${header.take(40)}' is not a version header like 'v1'"
    new BatchLogException(
      CorruptLog,
      s"Sink log file $file cannot be read: $detail. Nothing was changed. If a newer tool wrote " +
        "it, read it with that tool; otherwise restore it from a backup or run " +
        "`python -m batchlog repair`."
    )
  }

  def missingLogFile(file: String, why: String): BatchLogException = new BatchLogException(
    MissingLogFile,
    s"Sink log file $file is missing: $why. Nothing was changed. Restore it from a backup, or run " +
      "`python -m batchlog repair` to rebuild the log from the data files' batch-tagged names."
  )

  def invalidArgument(name: String, value: Any, why: String): BatchLogException =
    new BatchLogException(InvalidArgument, s"Invalid $name = $value: $why")

  def raceCommittingBatch(batchId: Long, logPath: String): BatchLogException =
    new BatchLogException(
      RaceCommittingBatch,
      s"Batch $batchId is already in the sink log $logPath: another query is writing to the same " +
        "sink. Stop the other query; each sink must have exactly one writer."
    )

  def notACheckpoint(path: String): BatchLogException = new BatchLogException(
    NotACheckpoint,
    s"$path is not a streaming query checkpoint: it has no 'metadata' file and 'offsets' " +
      "directory. Pass the query's checkpointLocation."
  )

  def unsupportedCheckpoint(what: String, why: String): BatchLogException = new BatchLogException(
    UnsupportedCheckpoint,
    s"Cannot roll back $what: $why. Nothing was changed. Rewind supports the file source, " +
      "sources that only log their initial offsets (Kafka, rate), and the HDFS-backed and RocksDB " +
      "state stores; rebuild this query's output from scratch with a new checkpoint instead."
  )

  def beyondHorizon(toBatch: Long, horizon: Long, why: String): BatchLogException =
    new BatchLogException(
      BeyondHorizon,
      s"Cannot rewind to batch $toBatch: the oldest batch a rewind can reach is $horizon ($why). " +
        "Nothing was changed."
    )

  def rewindInProgress(sink: String, toBatch: Long, checkpoint: String): BatchLogException =
    new BatchLogException(
      RewindInProgress,
      s"The sink $sink is being rewound to batch $toBatch (checkpoint $checkpoint) and the " +
        "rewind did not finish. Nothing is written to it until it does: re-run " +
        s"`python -m batchlog rewind $sink --checkpoint $checkpoint --to-batch $toBatch` to " +
        "finish it, then restart the query."
    )

  def queryActive(sink: String): BatchLogException = new BatchLogException(
    QueryActive,
    s"A streaming query of this session is writing to $sink. Stop it (query.stop()) before " +
      "rewinding; nothing was changed."
  )
}
