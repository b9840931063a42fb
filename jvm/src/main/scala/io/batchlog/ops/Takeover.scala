package io.batchlog.ops

import org.apache.hadoop.fs.Path

import org.apache.spark.sql.SparkSession
import io.batchlog.shim.CheckpointFileManager

import io.batchlog.{BatchLogConf, BatchLogException}
import io.batchlog.checkpoint.QueryCheckpoint
import io.batchlog.log.{
  BatchTaggedFileStreamSinkLog,
  CompactIndex,
  RewindIntent,
  SinkOwner,
  SinkRecord,
  WriterLease
}

/**
 * Hands a sink to another query: the query of `checkpoint` becomes the sink's owner from the batch
 * after the sink's latest, and the record's epoch moves on, so the previous owner is refused from
 * then on ([[io.batchlog.commit.WriterGuard]]). Refused while a live writer holds the sink, unless
 * `force` (the writer is known to be dead), and while a rewind is unfinished (REWIND_IN_PROGRESS:
 * its error says how to finish it; a takeover would change the owner the rewind's re-run checks).
 *
 * Spark's file sink skips every batch id already in the log, so the new owner writes nothing until
 * its batch ids pass the sink's latest; the plan says how many of its batches that is.
 */
object Takeover {

  final case class Plan(
      sink: String,
      checkpoint: String,
      queryId: String,
      previousOwner: Option[SinkOwner],
      sinkLatest: Long,
      checkpointNextBatch: Long,
      compactInterval: Int
  ) {
    def fromBatch: Long = sinkLatest + 1

    /** Batches of the new owner that Spark's sink will skip (ids <= the sink's latest). */
    def skippedBatches: Long = math.max(0L, sinkLatest + 1 - checkpointNextBatch)

    def noop: Boolean = previousOwner.exists(_.queryId == queryId)

    def report(dryRun: Boolean, done: Boolean): TakeoverReport = TakeoverReport(
      sink,
      checkpoint,
      queryId,
      previousOwner.map(_.queryId),
      previousOwner.map(_.fromBatch),
      sinkLatest,
      fromBatch,
      checkpointNextBatch,
      skippedBatches,
      alreadyOwner = noop,
      dryRun,
      done
    )
  }

  /** Plans a takeover, changing nothing; refuses while a live writer holds the sink. */
  def plan(spark: SparkSession, sinkPath: String, checkpointPath: String, force: Boolean): Plan =
    BatchLogException.unchanged {
      val meta = BatchTaggedFileStreamSinkLog.metadataPathOf(spark, sinkPath)
      val fm = CheckpointFileManager.create(meta, spark.sessionState.newHadoopConf())
      WriterFence.refuseLiveWriter(fm, meta, force, BatchLogConf.fenceWaitMs(spark))
      // A takeover during an unfinished rewind would change the owner the rewind checks: its
      // re-run would then be refused and the sink stay stuck. The rewind is finished first.
      RewindIntent.read(fm, meta).foreach { i =>
        throw BatchLogException.rewindInProgress(
          i.sink,
          i.toBatch,
          i.checkpoint,
          andThen = s"run the takeover again",
          finishWith = i.finishWith
        )
      }
      val cp = new QueryCheckpoint(spark, checkpointPath)
      val log = new BatchTaggedFileStreamSinkLog(spark, meta.toString)
      Plan(
        meta.getParent.toString,
        cp.root.toString,
        cp.queryId,
        SinkRecord.read(fm, meta).flatMap(_.owner),
        log.getLatestBatchId().getOrElse(-1L),
        cp.commitIds.lastOption.map(_ + 1).getOrElse(0L),
        log.interval
      )
    }

  /** Carries out `plan` unless `dryRun` (or the query already owns the sink). */
  def apply(spark: SparkSession, sinkPath: String, plan: Plan, dryRun: Boolean): TakeoverReport = {
    if (dryRun || plan.noop) return plan.report(dryRun, done = false)
    val meta = BatchTaggedFileStreamSinkLog.metadataPathOf(spark, sinkPath)
    val fm = CheckpointFileManager.create(meta, spark.sessionState.newHadoopConf())
    val now = System.currentTimeMillis()
    // The store arbitrates, as for a rewind: the sink's next log id is claimed (created once)
    // before the epoch moves and released once it has. A writer of the old owner that passed its
    // checks before the bump (its lease had expired: stalled, or judged dead) and publishes that id
    // meanwhile is refused; one that published it first makes the claim fail, and the takeover
    // stops having changed nothing. The claim is released, not kept: the id is the new owner's
    // first batch, which Spark's sink would otherwise skip.
    val log = new BatchTaggedFileStreamSinkLog(spark, meta.toString)
    val next = plan.sinkLatest + 1
    val latest = log.getLatestBatchId().getOrElse(-1L)
    if (latest != plan.sinkLatest || !log.claimNext(next)) {
      throw BatchLogException
        .sinkWrittenDuring("takeover", plan.sink, math.max(latest, next), plan.sinkLatest)
        .withOutcome(BatchLogException.NothingChanged)
    }
    try {
      WriterFence.bumpEpoch(fm, meta) {
        case Some(r) => r.copy(owners = r.owners :+ SinkOwner(plan.queryId, plan.fromBatch, now))
        case None => SinkRecord.first(plan.queryId, plan.fromBatch, plan.compactInterval, now)
      }
    } finally release(fm, log, next)
    removeOtherLease(fm, meta, plan.queryId)
    plan.report(dryRun, done = true)
  }

  /**
   * The lease of a query other than the new owner, which the plan judged dead (or the takeover was
   * forced past): removed, so that the new owner starts at once instead of watching it for its
   * timeout again. Its writer, if it were alive after all, is refused at its next commit (the epoch
   * moved) and writes nothing more.
   */
  private def removeOtherLease(fm: CheckpointFileManager, meta: Path, newOwner: String): Unit =
    if (WriterLease.read(fm, meta).exists(_.queryId != newOwner)) WriterLease.delete(fm, meta)

  /** Removes the claim of log id `id` (an empty batch file, or a compact file and its index). */
  private def release(
      fm: CheckpointFileManager,
      log: BatchTaggedFileStreamSinkLog,
      id: Long
  ): Unit = {
    val file = log.batchIdToPath(id)
    if (log.isCompactFile(id)) fm.delete(CompactIndex.pathOf(file))
    fm.delete(file)
  }
}
