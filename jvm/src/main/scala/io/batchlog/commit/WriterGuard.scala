package io.batchlog.commit

import java.net.InetAddress
import java.util.concurrent.ConcurrentHashMap

import org.apache.hadoop.fs.Path

import org.apache.spark.internal.Logging
import org.apache.spark.sql.SparkSession
import io.batchlog.shim.CheckpointFileManager

import io.batchlog.{BatchLogConf, BatchLogException}
import io.batchlog.Compat
import io.batchlog.log.{
  BatchTaggedFileStreamSinkLog,
  RewindIntent,
  SinkOwner,
  SinkRecord,
  WriterLease
}

/**
 * Keeps one run of a streaming query the only writer of its sink, and makes it stop before it
 * commits when another process changed the sink under it. One guard per sink log, i.e. per query
 * run (Spark builds a new sink, hence a new log, at every start).
 *
 * Before the first batch of the run ([[beforeBatch]]):
 *   - an unfinished rewind ([[RewindIntent]]) refuses the batch;
 *   - the sink's [[SinkRecord]] must name this query (the checkpoint's query id) as its owner; a
 *     sink without a record is claimed. Another owner refuses the batch: two queries on one sink
 *     would otherwise each skip the other's batch ids (Spark's sink skips every id already logged);
 *   - the record's `epoch` must be the one this run started with;
 *   - the run takes the [[WriterLease]] (once) and a daemon thread refreshes it every quarter of
 *     its timeout until the query's thread ends, then removes it.
 *
 * Before each batch is logged ([[beforeCommit]]) the record is read again, and that is all a batch
 * costs after the first (one request on an object store while the record is unchanged:
 * [[io.batchlog.log.JsonRecordFile#Watched]]). A rewind or takeover bumps the epoch *after* it
 * found no live lease, and before it changes anything; the writer re-reads it *after* taking its
 * lease: so either the rewind sees the lease and refuses, or the writer sees the new epoch and
 * fails before committing; never both succeed. A writer that wakes up between a rewind's check of
 * its lease and the epoch bump (its lease expired: stalled, or declared dead with `force`) may
 * commit that one batch; the rewind then finds the sink's latest batch moved and stops before it
 * changed anything ([[io.batchlog.ops.Rewind]]), and the writer stops at its next batch. A writer
 * that passed its last check just before a forced rewind cut the log is caught by the log itself,
 * which accepts only the next batch id ([[BatchTaggedFileStreamSinkLog.add]]).
 */
final class WriterGuard private (
    log: BatchTaggedFileStreamSinkLog,
    queryId: String,
    runId: String,
    timeoutMs: Long
) extends Logging {
  private val fm: CheckpointFileManager = log.checkpointFileManager
  private val meta: Path = log.metadataPath
  private def sink: String = meta.getParent.toString

  @volatile private var epoch: Option[Long] = None
  @volatile private var currentBatch = -1L
  private var keeper: Thread = _

  /** Reads the sink's record from the first check on (the run's first batch writes it). */
  private lazy val record = new SinkRecord.Watched(log.fileSystem, meta)

  def beforeBatch(batchId: Long): Unit = synchronized {
    currentBatch = batchId
    // Checked at the run's first batch; from then on each commit re-reads the record, which every
    // rewind, takeover and repair changes before it changes anything else.
    if (keeper == null) firstBatch(batchId)
  }

  private def firstBatch(batchId: Long): Unit = {
    refuseUnfinishedRewind()
    SinkRecord.migrate(fm, meta) // a sink last written before records moved to _batchlog/
    val now = System.currentTimeMillis()
    val record = this.record.read() match {
      case None =>
        val r = SinkRecord.first(queryId, batchId, log.interval, now)
        SinkRecord.write(fm, meta, r)
        r
      case Some(r) if r.owner.isEmpty =>
        // written by repair when the damaged log named no owner: this query claims it
        val claimed = r.copy(owners = List(SinkOwner(queryId, batchId, now)))
        SinkRecord.write(fm, meta, claimed)
        claimed
      case Some(r) =>
        checkOwner(r, batchId)
        if (r.compactInterval != log.interval) {
          // The interval in force is derived from the compact files, as Spark does; keep the
          // record true so that a repair rebuilds the layout this query reads.
          SinkRecord.write(fm, meta, r.copy(compactInterval = log.interval))
        }
        r
    }
    checkEpoch(record, batchId)
    WriterLease.read(fm, meta).foreach { l =>
      if (l.queryId != queryId && l.isLive(now) && !WriterGuard.isDeadHere(l.runId)) {
        throw BatchLogException.writerActive(sink, l.describe, l.ageMs(now), l.timeoutMs)
      }
    }
    writeLease(now)
    keeper = startKeeper(Thread.currentThread())
  }

  def beforeCommit(batchId: Long): Unit = {
    record.read() match {
      case Some(r) => checkOwner(r, batchId); checkEpoch(r, batchId)
      case None =>
        throw BatchLogException.sinkChangedWhileWriting(
          sink,
          batchId,
          s"changed (its record ${SinkRecord.path(meta)} was removed)"
        )
    }
  }

  /** A rewind that did not finish: writing now would mix old and new output. */
  private def refuseUnfinishedRewind(): Unit =
    RewindIntent.read(fm, meta).foreach { i =>
      throw BatchLogException.rewindInProgress(i.sink, i.toBatch, i.checkpoint)
    }

  private def checkOwner(r: SinkRecord, batchId: Long): Unit =
    r.owner.filter(_.queryId != queryId).foreach { o =>
      throw BatchLogException.sinkOwnedByOtherQuery(
        sink,
        queryId,
        s"query ${o.queryId}",
        o.fromBatch,
        batchId
      )
    }

  private def checkEpoch(r: SinkRecord, batchId: Long): Unit = epoch match {
    case None => epoch = Some(r.epoch)
    case Some(e) if e != r.epoch =>
      throw BatchLogException.sinkChangedWhileWriting(
        sink,
        batchId,
        s"rewound, repaired or taken over (its record's epoch moved from $e to ${r.epoch})"
      )
    case _ =>
  }

  private def writeLease(now: Long): Unit = WriterLease.write(
    fm,
    meta,
    WriterLease(queryId, runId, WriterGuard.host, WriterGuard.pid, currentBatch, now, timeoutMs)
  )

  /**
   * Refreshes the lease every `timeoutMs / 4` while `queryThread` (the query's micro-batch thread)
   * lives, then removes it. It stops refreshing once the lease names another run (taken over or
   * removed by a forced rewind): the epoch check then stops this writer.
   */
  private def startKeeper(queryThread: Thread): Thread = {
    WriterGuard.runsHere.put(runId, queryThread)
    val t = new Thread(s"batchlog-writer-lease-$runId") {
      override def run(): Unit = {
        var ours = true
        while (ours && queryThread.isAlive) {
          queryThread.join(math.max(1L, timeoutMs / 4))
          try {
            ours = WriterLease.read(fm, meta).exists(_.runId == runId)
            if (ours && queryThread.isAlive) writeLease(System.currentTimeMillis())
          } catch {
            case e: Exception => logWarning(s"Could not refresh the writer lease of $sink", e)
          }
        }
        try if (WriterLease.read(fm, meta).exists(_.runId == runId)) WriterLease.delete(fm, meta)
        catch {
          case e: Exception => logWarning(s"Could not remove the writer lease of $sink", e)
        } finally WriterGuard.runsHere.remove(runId)
      }
    }
    t.setDaemon(true)
    t.start()
    t
  }
}

object WriterGuard {

  /** Spark's local property holding the query id (`StreamExecution.QUERY_ID_KEY`). */
  val QueryIdProperty = "sql.streaming.queryId"

  /** Spark's job group, which a streaming query sets to its run id. */
  val JobGroupProperty = "spark.jobGroup.id"

  private lazy val host: String =
    try InetAddress.getLocalHost.getHostName
    catch { case _: Exception => "unknown-host" }

  private lazy val pid: Long = Compat.pid

  /** The micro-batch threads of the runs holding a lease from this JVM, by run id. */
  private val runsHere = new ConcurrentHashMap[String, Thread]()

  /** True if `runId` ran in this JVM and its query thread has ended (its lease is going away). */
  def isDeadHere(runId: String): Boolean =
    Option(runsHere.get(runId)).exists(!_.isAlive)

  private val bySink = new java.util.WeakHashMap[BatchTaggedFileStreamSinkLog, WriterGuard]()

  /** The guard of the run writing through `log`; the ids come from the query's thread. */
  def forLog(spark: SparkSession, log: BatchTaggedFileStreamSinkLog): WriterGuard =
    bySink.synchronized {
      var g = bySink.get(log)
      if (g == null) {
        val sc = spark.sparkContext
        val queryId = Option(sc.getLocalProperty(QueryIdProperty)).getOrElse("unknown")
        val runId = Option(sc.getLocalProperty(JobGroupProperty)).getOrElse(queryId)
        g = new WriterGuard(log, queryId, runId, BatchLogConf.writerLeaseTimeoutMs(spark))
        bySink.put(log, g)
      }
      g
    }
}
