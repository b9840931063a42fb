package io.batchlog.ops

import org.apache.hadoop.fs.Path

import io.batchlog.shim.CheckpointFileManager

import io.batchlog.BatchLogException
import io.batchlog.commit.WriterGuard
import io.batchlog.log.{Clock, LeaseWatch, SinkRecord, WriterLease}

/**
 * How an operation that changes a sink under its writer (rewind, takeover, repair) keeps out of a
 * running query's way, the other half of [[WriterGuard]]: refuse while a writer lease is not seen
 * dead ([[refuseLiveWriter]]: judged on this process's monotonic clock alone, [[LeaseWatch]]), then
 * bump the sink record's epoch by compare-and-set ([[bumpEpoch]]) so that a writer that slipped in
 * between fails before it commits, and no writer's own record update can undo the bump.
 */
object WriterFence {

  /**
   * The lease of a live writer of the sink at `meta`, if any, watched up to `waitMs`
   * ([[LeaseWatch.watch]]). A lease of a run of this JVM whose query has stopped is not live (its
   * keeper is about to remove it).
   */
  def liveWriter(
      fm: CheckpointFileManager,
      meta: Path,
      waitMs: Long = 0L,
      clock: Clock = Clock.current
  ): Option[LeaseWatch.Live] =
    LeaseWatch.watch(WriterLease.path(meta).toString, waitMs, clock, watching(meta)) { () =>
      WriterLease.readSettled(fm, meta, clock).filterNot(l => WriterGuard.isDeadHere(l.runId))
    } match {
      case l: LeaseWatch.Live => Some(l)
      case LeaseWatch.NoWriter => None
    }

  /** The progress of a wait on a lease, on stderr as every long operation's. */
  private def watching(meta: Path)(unchangedMs: Long, timeoutMs: Long): Unit =
    System.err.println(
      s"[batchlog] watching the writer lease of ${meta.getParent}: ${unchangedMs / 1000} / " +
        s"${timeoutMs / 1000} s unchanged (dead at ${timeoutMs / 1000} s; a refresh: alive)"
    )

  /** Fails with `WRITER_ACTIVE` unless the lease is absent or seen dead, or `force`. */
  def refuseLiveWriter(
      fm: CheckpointFileManager,
      meta: Path,
      force: Boolean,
      waitMs: Long = 0L,
      clock: Clock = Clock.current
  ): Unit =
    if (!force) liveWriter(fm, meta, waitMs, clock).foreach { l =>
      throw BatchLogException.writerActive(
        meta.getParent.toString,
        l.lease.describe,
        l.unchangedMs,
        l.lease.timeoutMs,
        l.refreshed
      )
    }

  /**
   * Writes `update(current record)` with the epoch bumped past the current one, by compare-and-set
   * ([[SinkRecord.compareAndSet]]): a record changed meanwhile (a writer claiming the sink) is
   * re-read and the update applied to it again, so the bump is never lost.
   */
  def bumpEpoch(fm: CheckpointFileManager, meta: Path)(
      update: Option[SinkRecord] => SinkRecord
  ): SinkRecord = {
    var attempts = 0
    var done: SinkRecord = null
    while (done == null) {
      val current = SinkRecord.read(fm, meta)
      val next = update(current)
      val bumped = next.copy(epoch = math.max(next.epoch, current.map(_.epoch).getOrElse(-1L) + 1))
      try done = SinkRecord.compareAndSet(fm, meta, current, bumped)
      catch {
        case c: SinkRecord.Conflict if attempts < 5 => attempts += 1
        case c: SinkRecord.Conflict =>
          throw BatchLogException.sinkChangedWhileWriting(
            meta.getParent.toString,
            -1L,
            s"changed by another process at every attempt to bump its epoch (${c.getMessage})"
          )
      }
    }
    done
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
