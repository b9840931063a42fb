package io.batchlog.ops

import org.apache.hadoop.fs.Path

import io.batchlog.shim.CheckpointFileManager

import io.batchlog.BatchLogException
import io.batchlog.commit.WriterGuard
import io.batchlog.log.{SinkRecord, WriterLease}

/**
 * How an operation that changes a sink under its writer (rewind, takeover, repair) keeps out of a
 * running query's way, the other half of [[WriterGuard]]: refuse while a live writer lease exists
 * ([[refuseLiveWriter]]), then bump the sink record's epoch ([[bumpEpoch]]) so that a writer that
 * slipped in between fails before it commits.
 */
object WriterFence {

  /**
   * The lease of a live writer of the sink at `meta`, if any. A lease of a run of this JVM whose
   * query has stopped is not live (its keeper is about to remove it).
   */
  def liveWriter(fm: CheckpointFileManager, meta: Path): Option[WriterLease] = {
    val now = System.currentTimeMillis()
    WriterLease.read(fm, meta).filter(l => l.isLive(now) && !WriterGuard.isDeadHere(l.runId))
  }

  /** Fails with `WRITER_ACTIVE` if a live writer holds the sink, unless `force`. */
  def refuseLiveWriter(fm: CheckpointFileManager, meta: Path, force: Boolean): Unit =
    if (!force) liveWriter(fm, meta).foreach { l =>
      val now = System.currentTimeMillis()
      throw BatchLogException.writerActive(
        meta.getParent.toString,
        l.describe,
        l.ageMs(now),
        l.timeoutMs
      )
    }

  /** Writes `update(current record)` with the epoch bumped past the current one. */
  def bumpEpoch(fm: CheckpointFileManager, meta: Path)(
      update: Option[SinkRecord] => SinkRecord
  ): SinkRecord = {
    val current = SinkRecord.read(fm, meta)
    val next = update(current)
    val bumped = next.copy(epoch = math.max(next.epoch, current.map(_.epoch).getOrElse(-1L) + 1))
    SinkRecord.write(fm, meta, bumped)
    bumped
  }

  /** The record's owner must be the query of the checkpoint an operation was given. */
  def requireOwner(
      fm: CheckpointFileManager,
      meta: Path,
      checkpoint: String,
      checkpointQueryId: String
  ): Option[SinkRecord] = {
    val record = SinkRecord.read(fm, meta)
    record.flatMap(_.owner).filter(_.queryId != checkpointQueryId).foreach { o =>
      throw BatchLogException.unsupportedCheckpoint(
        checkpoint,
        s"it is the checkpoint of query $checkpointQueryId, but the sink ${meta.getParent} is " +
          s"written by query ${o.queryId} (from batch ${o.fromBatch}): they are not the " +
          "checkpoint and sink of one query"
      )
    }
    record
  }
}
