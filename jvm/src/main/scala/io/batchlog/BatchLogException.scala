package io.batchlog

/**
 * The errors batchlog raises, each with a message that names the file or argument at fault and the
 * way out. `code` is stable: the Python facade maps it to a Python exception class.
 *
 * What the failed call left behind is not the raiser's to say: the same corrupt line is met by a
 * read (which changes nothing), a compaction (whose temp file is discarded) and a rewind (which may
 * have done half its steps). So the message says what is wrong and how out; the entry point that
 * knows adds the `outcome` ([[withOutcome]], [[BatchLogException.unchanged]]), e.g. "Nothing was
 * changed." — and only where that is true.
 */
class BatchLogException(
    val code: String,
    val problem: String,
    cause: Throwable = null,
    val outcome: Option[String] = None
) extends RuntimeException(
      problem + outcome.map(o => (if (problem.endsWith(".")) " " else ". ") + o).getOrElse(""),
      cause
    ) {

  /** The same error with what the failed call left behind, unless that is already said. */
  def withOutcome(what: String): BatchLogException =
    if (outcome.isDefined) this else new BatchLogException(code, problem, this, Some(what))
}

object BatchLogException {

  val NothingChanged = "Nothing was changed."

  /** Runs `body`, a call that has changed nothing when it fails: its errors say so. */
  def unchanged[T](body: => T): T =
    try body
    catch { case e: BatchLogException => throw e.withOutcome(NothingChanged) }

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
  val WriterActive = "WRITER_ACTIVE"
  val SinkOwnedByOtherQuery = "SINK_OWNED_BY_OTHER_QUERY"
  val SinkChangedWhileWriting = "SINK_CHANGED_WHILE_WRITING"
  val BatchOutOfOrder = "BATCH_OUT_OF_ORDER"
  val UnsupportedSpark = "UNSUPPORTED_SPARK_VERSION"
  val UpstreamRewound = "UPSTREAM_REWOUND"

  /** Every error code; Python's `batchlog.errors` has one exception class per code (tested). */
  val Codes: Seq[String] = Seq(
    NotASink,
    CorruptLog,
    MissingLogFile,
    InvalidArgument,
    RaceCommittingBatch,
    NotACheckpoint,
    UnsupportedCheckpoint,
    BeyondHorizon,
    RewindInProgress,
    QueryActive,
    WriterActive,
    SinkOwnedByOtherQuery,
    SinkChangedWhileWriting,
    BatchOutOfOrder,
    UnsupportedSpark,
    UpstreamRewound
  )

  def notASink(path: String): BatchLogException = new BatchLogException(
    NotASink,
    s"$path is not a file-sink output: it has no _spark_metadata directory. Pass the path given to " +
      "writeStream...start(path) (the directory that holds _spark_metadata)."
  )

  def corruptLine(file: String, lineNo: Long, detail: String): BatchLogException =
    new BatchLogException(
      CorruptLog,
      s"Sink log file $file, line $lineNo, is not a valid log entry ($detail). " +
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
      s"Sink log file $file cannot be read: $detail. If a newer tool wrote " +
        "it, read it with that tool; otherwise restore it from a backup or run " +
        "`python -m batchlog repair`."
    )
  }

  def missingLogFile(file: String, why: String): BatchLogException = new BatchLogException(
    MissingLogFile,
    s"Sink log file $file is missing: $why. Restore it from a backup, or run " +
      "`python -m batchlog repair` to rebuild the log from the data files' batch-tagged names " +
      "(it lays the log out for the interval the sink records, or for every interval)."
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
    s"Cannot roll back $what: $why. Rewind supports the file source, " +
      "sources that only log their initial offsets (Kafka, rate), and the HDFS-backed and RocksDB " +
      "state stores; rebuild this query's output from scratch with a new checkpoint instead."
  )

  def beyondHorizon(toBatch: Long, horizon: Long, why: String): BatchLogException =
    new BatchLogException(
      BeyondHorizon,
      s"Cannot rewind to batch $toBatch: the oldest batch a rewind can reach is $horizon ($why)."
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
      "rewinding."
  )

  def writerActive(sink: String, writer: String, ageMs: Long, timeoutMs: Long): BatchLogException =
    new BatchLogException(
      WriterActive,
      s"A streaming query is writing to $sink: $writer, whose writer lease was refreshed " +
        s"${ageMs / 1000} s ago (a lease is live while refreshed within ${timeoutMs / 1000} s, " +
        s"${BatchLogConf.WriterLeaseTimeoutKey}; a running query refreshes it every " +
        s"${timeoutMs / 4000} s and removes it when it stops). Stop that query first. If it is " +
        "known to be dead (its driver was killed), wait until its lease is older than the " +
        "timeout, or pass --force (force=True)."
    )

  def sinkOwnedByOtherQuery(
      sink: String,
      ourQuery: String,
      owner: String,
      ownerSince: Long,
      batchId: Long
  ): BatchLogException = new BatchLogException(
    SinkOwnedByOtherQuery,
    s"Query $ourQuery cannot write batch $batchId to $sink: the sink is written by another " +
      s"query, $owner (its batches from $ownerSince on; each sink has one writer). Spark's file " +
      s"sink skips every batch id already in the sink's log, so this query's batches below " +
      s"$batchId were not written to it. Give this query its own output path; or, if it is " +
      s"meant to replace $owner, stop that one and run `python -m batchlog takeover $sink " +
      "--checkpoint <this query's checkpoint> --dry-run`, then without --dry-run."
  )

  def sinkChangedWhileWriting(sink: String, batchId: Long, what: String): BatchLogException =
    new BatchLogException(
      SinkChangedWhileWriting,
      s"The sink $sink was $what while this query was writing to it, so batch $batchId is not " +
        "committed and the query stops. Restart the query from its checkpoint (after a rewind: " +
        "the rewound checkpoint)."
    )

  /** A rewind's plan no longer holds: a writer committed after it was made. */
  def sinkWrittenDuringRewind(sink: String, latest: Long, planned: Long): BatchLogException =
    new BatchLogException(
      SinkChangedWhileWriting,
      s"The sink $sink was written to while the rewind was starting: its latest batch is now " +
        s"$latest, the rewind was planned with $planned. Stop the query writing it, then re-run " +
        "the rewind."
    )

  def batchOutOfOrder(logPath: String, batchId: Long, latest: Long): BatchLogException =
    new BatchLogException(
      BatchOutOfOrder,
      s"Cannot commit batch $batchId to the sink log $logPath: its latest batch is $latest, so " +
        s"the next batch must be ${latest + 1}. Another process changed the sink (a rewind, a " +
        "repair or a second writer) while this query ran. Restart the query from its checkpoint."
    )

  /**
   * A downstream query reading a sink by batch (`readStream.format("batchlog")`) consumed batch
   * `consumed`, which the sink no longer holds as it was read: the sink was rewound.
   */
  def upstreamRewound(sink: String, consumed: Long, latest: Long): BatchLogException =
    new BatchLogException(
      UpstreamRewound,
      s"This query read the sink $sink up to its batch $consumed, but that batch " +
        (if (latest < consumed) s"is gone: the sink was rewound (its latest batch is now $latest)"
         else "was rewritten: the sink was rewound and its batches written again") +
        ". Rows this query already emitted from the rewound batches would be counted twice or " +
        "lost, so it stops. Either rewind this query too, to the batch where it first read a " +
        "rewound upstream batch (`python -m batchlog rewind <its sink> --checkpoint <its " +
        "checkpoint> --to-batch N`), or restart it from a new checkpoint with option " +
        "startingBatch set to the first upstream batch to read."
    )
}
