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
  val ForeignPath = "FOREIGN_PATH"
  val CheckpointInOutput = "CHECKPOINT_IN_OUTPUT"
  val BatchesExpired = "BATCHES_EXPIRED"
  val WriterLeaseLost = "WRITER_LEASE_LOST"
  val RepairInProgress = "REPAIR_IN_PROGRESS"
  val CommitOutcomeUnknown = "COMMIT_OUTCOME_UNKNOWN"

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
    UpstreamRewound,
    ForeignPath,
    CheckpointInOutput,
    BatchesExpired,
    WriterLeaseLost,
    RepairInProgress,
    CommitOutcomeUnknown
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

  /**
   * Compact file `file` of the sink `sink` no longer holds the bytes its index `indexFile` recorded
   * for `runs` (each as `batch 7 (bytes 120..480)`), though it keeps the name, length and
   * modification time the index records. A compact file is written once, so that is damage, never a
   * newer version: nothing is read from it or copied out of it, and `repair` restores those
   * batches' entries (it is what sends the user there).
   */
  def damagedCompactFile(
      file: String,
      indexFile: String,
      sink: String,
      runs: Seq[String]
  ): BatchLogException = new BatchLogException(
    CorruptLog,
    s"Sink log file $file is damaged: the bytes of ${runs.mkString(", ")} do not match the " +
      s"CRC32C its index $indexFile recorded when the file was written, yet the file keeps the " +
      "name, length and modification time the index records. A compact file is written once, so " +
      "this is damage (bit rot or an edit in place), not a newer version of it; it is not used. " +
      s"Stop the query and run `python -m batchlog repair $sink`: it restores the entries of " +
      (if (runs.length == 1) "that batch" else "those batches") + " from their batch files or " +
      "from the data files' batch-tagged names, and keeps the damaged file in " +
      "_spark_metadata.damaged-<time>."
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

  def newerRecord(
      file: String,
      version: Long,
      supported: Long,
      writtenBy: Option[String] = None
  ): BatchLogException =
    new BatchLogException(
      CorruptLog,
      s"batchlog's record $file is of version $version, written by " +
        writtenBy.fold("a newer batchlog")(r => s"batchlog $r") + "; this " +
        s"batchlog (${BuildInfo.version}) reads version $supported and neither uses nor " +
        "changes it. Use " + writtenBy.fold("the newer batchlog")(r => s"batchlog $r or later") +
        " on this sink (see docs/format.md, Versions)."
    )

  def missingLogFile(file: String, why: String): BatchLogException = new BatchLogException(
    MissingLogFile,
    s"Sink log file $file is missing: $why. Restore it from a backup, or run " +
      "`python -m batchlog repair` to rebuild the log from the data files' batch-tagged names " +
      "(it lays the log out for the interval the sink records, or for every interval)."
  )

  /**
   * Log file `file` of this session's layout is missing because the session reads the log at
   * compact interval `sessionInterval` while its writer writes it at `sinkInterval` (the sink
   * record `record` says so): the log is sound, and repair would change nothing.
   */
  def logReadAtOtherInterval(
      file: String,
      sessionInterval: Int,
      sinkInterval: Int,
      record: String
  ): BatchLogException = invalidArgument(
    BatchLogConf.CompactIntervalKey,
    sessionInterval,
    s"this session reads the sink log at compact interval $sessionInterval, but the sink is " +
      s"written at $sinkInterval (its record $record), so $file, which the log at " +
      s"$sessionInterval would have, does not exist. The log is sound: set " +
      s"${BatchLogConf.CompactIntervalKey}=$sinkInterval in this session to read it"
  )

  def invalidArgument(name: String, value: Any, why: String): BatchLogException =
    new BatchLogException(InvalidArgument, s"Invalid $name = $value: $why")

  def raceCommittingBatch(batchId: Long, logPath: String): BatchLogException =
    new BatchLogException(
      RaceCommittingBatch,
      s"Batch $batchId is already in the sink log $logPath: another query is writing to the same " +
        "sink. Stop the other query; each sink must have exactly one writer."
    )

  /**
   * The request that publishes log file `file` failed without a definite answer (a timeout, a 5xx,
   * a reset), and reading the store back did not find the file, or could not be done. The request
   * may still be applied later, so the batch's data files are kept: deleting them could leave a
   * published log file naming files that are gone.
   */
  def commitOutcomeUnknown(file: String, batchId: Long, cause: Throwable): BatchLogException =
    new BatchLogException(
      CommitOutcomeUnknown,
      s"The publish of log file $file (batch $batchId) failed without a definite answer " +
        s"(${cause.getClass.getSimpleName}: ${cause.getMessage}), and the store does not show " +
        s"the file now. Batch $batchId is not committed. Its data files are kept, as a late " +
        "application of the request could still publish them; `vacuum` removes them once no " +
        "log file lists them. Restart the query: batch " + batchId + " runs again, exactly once.",
      cause
    )

  def notACheckpoint(path: String): BatchLogException = new BatchLogException(
    NotACheckpoint,
    s"$path is not a streaming query checkpoint: it has no 'metadata' file (the query " +
      "id Spark writes as a query starts). Pass the query's checkpointLocation."
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

  def rewindInProgress(
      sink: String,
      toBatch: Long,
      checkpoint: String,
      andThen: String = "restart the query",
      finishWith: Option[String] = None
  ): BatchLogException =
    new BatchLogException(
      RewindInProgress,
      s"The sink $sink is being rewound to batch $toBatch (checkpoint $checkpoint) and the " +
        s"${if (finishWith.isDefined) "pipeline rewind it is part of" else "rewind"} did not " +
        "finish. Nothing is written to it until it does: re-run `" +
        finishWith.getOrElse(
          s"python -m batchlog rewind $sink --checkpoint $checkpoint --to-batch $toBatch"
        ) + s"` to finish it, then $andThen."
    )

  def queryActive(sink: String): BatchLogException = new BatchLogException(
    QueryActive,
    s"A streaming query of this session is writing to $sink. Stop it (query.stop()) before " +
      "rewinding."
  )

  /**
   * A writer lease not (yet) seen dead: `unchangedMs` is how long this process has seen it
   * unchanged (`refreshed`: it changed while watched, the writer lives).
   */
  def writerActive(
      sink: String,
      writer: String,
      unchangedMs: Long,
      timeoutMs: Long,
      refreshed: Boolean
  ): BatchLogException = {
    val seen =
      if (refreshed) "which was refreshed while this process watched it: the writer lives"
      else {
        s"which this process has seen unchanged for ${unchangedMs / 1000} s; a lease is dead " +
          s"once seen unchanged for its timeout, ${timeoutMs / 1000} s (" +
          s"${BatchLogConf.WriterLeaseTimeoutKey} of the writer; no two hosts' clocks are " +
          s"compared). If the query is dead (its driver was killed), watch its lease for its " +
          s"timeout: the CLI does by default (--wait ${(timeoutMs + 999) / 1000}s); a session " +
          s"with ${BatchLogConf.FenceWaitKey}=lease (or ${(timeoutMs + 999) / 1000}s). Or give " +
          "up the lease rule with --force (force=True) if you know it is dead"
      }
    new BatchLogException(
      WriterActive,
      s"A streaming query is writing to $sink: $writer, whose writer lease " +
        s"(${sink.stripSuffix("/")}/_batchlog/_batchlog-lease.json) is refreshed every " +
        s"${math.max(1L, timeoutMs / 4000)} s while it runs and removed when it stops, $seen. " +
        "Stop that query first."
    )
  }

  /**
   * The writer can no longer prove it holds its lease: its last successful refresh is older than
   * the lease's timeout minus a margin, or a refresh failed, or the lease names another run. It
   * stops before an observer could call it dead and change the sink under it.
   */
  def writerLeaseLost(sink: String, batchId: Long, why: String): BatchLogException =
    new BatchLogException(
      WriterLeaseLost,
      s"This query no longer holds its writer lease on $sink ($why), so batch $batchId is not " +
        "committed and the query stops: a rewind or takeover may already treat it as dead. " +
        s"Restart the query from its checkpoint; if its lease refreshes stall (a slow store, long " +
        s"GC pauses), raise ${BatchLogConf.WriterLeaseTimeoutKey}."
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
      s"$batchId were not written to it. " + ownerWayOut(sink, owner)
  )

  /**
   * The same refusal, made when the query started, before its first batch: Spark's sink would have
   * skipped its batches up to the sink's latest without calling batchlog, so it is stopped before.
   * `owner`: the owner's query id and first batch, None when the sink has no owner on record.
   */
  def sinkOwnedAtStart(
      sink: String,
      ourQuery: String,
      owner: Option[(String, Long)],
      nextBatch: Long,
      latest: Long
  ): BatchLogException = {
    val (writtenBy, name) = owner match {
      case Some((id, from)) =>
        (
          s"the sink is written by another query, query $id (its batches from $from on",
          s"query $id"
        )
      case None =>
        (
          "the sink's log was written by another writer, which left no owner record (plain " +
            "Spark's file sink, or a log rebuilt by `repair`",
          "that writer"
        )
    }
    new BatchLogException(
      SinkOwnedByOtherQuery,
      s"Query $ourQuery cannot write to $sink: $writtenBy; each sink has one writer). It was " +
        s"stopped as it started, before its batch $nextBatch: Spark's file sink skips every " +
        s"batch id already in the sink's log (its latest batch is $latest)" +
        (if (nextBatch <= latest) {
           s", so this query's batches $nextBatch to $latest would have been dropped without " +
             "an error. "
         } else ". ") + ownerWayOut(sink, name)
    )
  }

  private def ownerWayOut(sink: String, owner: String): String =
    s"Give this query its own output path; or, if it is meant to replace $owner, stop that " +
      s"one and run `python -m batchlog takeover $sink --checkpoint <this query's checkpoint> " +
      "--dry-run`, then without --dry-run."

  def sinkChangedWhileWriting(sink: String, batchId: Long, what: String): BatchLogException =
    new BatchLogException(
      SinkChangedWhileWriting,
      s"The sink $sink was $what while this query was writing to it, so batch $batchId is not " +
        "committed and the query stops. Restart the query from its checkpoint (after a rewind: " +
        "the rewound checkpoint)."
    )

  /** A repair did not finish: its log may lack its newest batches until it does. */
  def repairInProgress(sink: String, startedAtMs: Long, movedAside: String): BatchLogException =
    new BatchLogException(
      RepairInProgress,
      s"The sink $sink is being repaired (since ${new java.sql.Timestamp(startedAtMs)}) and the " +
        s"repair did not finish: its log may lack batches until it does (the old log files are " +
        s"copied in $movedAside). Nothing is written to it meanwhile: re-run `python -m batchlog " +
        s"repair $sink` to finish it, then restart the query."
    )

  /** A rewind's plan no longer holds: a writer committed after it was made. */
  def sinkWrittenDuringRewind(sink: String, latest: Long, planned: Long): BatchLogException =
    sinkWrittenDuring("rewind", sink, latest, planned)

  /** `op`'s (a rewind's, a takeover's) plan no longer holds: a writer committed after it. */
  def sinkWrittenDuring(op: String, sink: String, latest: Long, planned: Long): BatchLogException =
    new BatchLogException(
      SinkChangedWhileWriting,
      s"The sink $sink was written to while the $op was starting: its latest batch is now " +
        s"$latest, the $op was planned with $planned. Stop the query writing it, then re-run " +
        s"the $op."
    )

  def batchOutOfOrder(logPath: String, batchId: Long, latest: Long): BatchLogException =
    new BatchLogException(
      BatchOutOfOrder,
      s"Cannot commit batch $batchId to the sink log $logPath: its latest batch is $latest, so " +
        s"the next batch must be ${latest + 1}. Another process changed the sink (a rewind, a " +
        "repair or a second writer) while this query ran. Restart the query from its checkpoint."
    )

  /**
   * A downstream query reading a sink (`readStream.format("batchlog")`, or Spark's file source with
   * batchlog's extension) consumed batch `consumed`, which the sink no longer holds as it was read:
   * the sink was rewound. `fix`, when the query writes a file sink: its sink, its checkpoint and
   * its first batch that read a rewound batch, from which one cascade rewinds it and every query
   * downstream of it (the upstream, already rewound, is left as it is).
   */
  def upstreamRewound(
      sink: String,
      consumed: Long,
      latest: Long,
      fix: Option[(String, String, Long)] = None
  ): BatchLogException =
    new BatchLogException(
      UpstreamRewound,
      s"This query read the sink $sink up to its batch $consumed, but that batch " +
        (if (latest < consumed) s"is gone: the sink was rewound (its latest batch is now $latest)"
         else "was rewritten: the sink was rewound and its batches written again") +
        ". Rows this query already emitted from the rewound batches would be counted twice or " +
        "lost, so it stops. " + (fix match {
          case Some((ownSink, checkpoint, batch)) =>
            s"Its batch $batch is the first that read a rewound batch. Rewind it and every query " +
              s"downstream of it with one command: `python -m batchlog rewind $ownSink " +
              s"--checkpoint $checkpoint --to-batch $batch --cascade` (add --dry-run to see the " +
              "plan first), then restart the queries; or restart this one from a new checkpoint " +
              "with option startingBatch set to the first upstream batch to read."
          case None =>
            "Rewind the pipeline from that sink, this query included, with one command: " +
              s"`python -m batchlog rewind $sink --checkpoint <the upstream query's checkpoint> " +
              "--to-batch N --cascade` (N: the batch the upstream was rewound to; each " +
              "downstream query goes back to its first batch that read a rewound batch), then " +
              "restart the queries; or restart this one from a new checkpoint with option " +
              "startingBatch set to the first upstream batch to read."
        })
    )

  /**
   * The sink's log names files that are not inside its output directory (see
   * `io.batchlog.ops.SinkBoundary`): `op` acts on none of them. `examples` are (path, why).
   */
  def foreignPath(
      op: String,
      sink: String,
      count: Long,
      examples: Seq[(String, String)]
  ): BatchLogException = new BatchLogException(
    ForeignPath,
    s"The log of the sink $sink names $count file(s) that are not inside its output directory: " +
      examples.map { case (p, why) => s"$p ($why)" }.mkString("; ") +
      (if (count > examples.length) s"; and ${count - examples.length} more" else "") +
      s". $op acts only inside the output directory and deletes nothing outside it, so it stops. " +
      s"`python -m batchlog verify $sink` lists them. If they are not the sink's files, " +
      s"`python -m batchlog repair $sink` rebuilds the log from the data files inside the output " +
      "(the current log is kept as _spark_metadata.broken-<time>); if they are, move them into " +
      "the output directory first, then repair."
  )

  /** `op` met a streaming query checkpoint (`dir`) inside the sink's output directory. */
  def checkpointInOutput(op: String, sink: String, dirs: Seq[String]): BatchLogException =
    new BatchLogException(
      CheckpointInOutput,
      s"The output directory $sink holds a streaming query checkpoint: ${dirs.mkString(", ")} " +
        s"(a 'metadata' file and an 'offsets' directory). $op deletes files in the output that " +
        "the log does not list, and a checkpoint is not the sink's to clean, so it stops. Move " +
        "the checkpoint out of the output directory (stop its query, move the directory, restart " +
        "the query with the new checkpointLocation), then run it again."
    )

  /**
   * A downstream query must read upstream batches `from` to `to`, whose log entries the sink's
   * retention dropped at a compaction: their files are gone from the sink as every reader sees it.
   */
  def batchesExpired(sink: String, from: Long, to: Long, retainedFrom: Long): BatchLogException =
    new BatchLogException(
      BatchesExpired,
      s"This query must read batches ${if (from == to) s"$from" else s"$from to $to"} of the " +
        s"sink $sink next, but the sink's retention dropped them from its log (" +
        s"${BatchLogConf.RetentionBatchesKey}, ${BatchLogConf.RetentionAgeKey} or the sink's " +
        s"retention option); the oldest batch it still holds is $retainedFrom. Reading on " +
        "would silently skip their rows, so the query stops. Either restart it from a new " +
        s"checkpoint with option startingBatch=$retainedFrom (the dropped rows are not read), " +
        "or raise the upstream sink's retention so that a downstream lagging this far behind " +
        "still finds its batches."
    )
}
