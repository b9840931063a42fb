package io.batchlog.commit

import java.net.InetAddress
import java.util.concurrent.{ConcurrentHashMap, TimeUnit}
import java.util.concurrent.locks.ReentrantLock

import org.apache.hadoop.fs.Path

import org.apache.spark.internal.Logging
import org.apache.spark.sql.SparkSession
import io.batchlog.shim.{CheckpointFileManager, FileStreamSinkLog}

import io.batchlog.{BatchLogConf, BatchLogException}
import io.batchlog.Compat
import io.batchlog.log.{
  BatchTaggedFileStreamSinkLog,
  Clock,
  LeaseWatch,
  SinkOwner,
  SinkRecord,
  WriterLease
}

/**
 * Keeps one run of a streaming query the only writer of its sink, and makes it stop before it
 * commits when another process changed the sink under it. One guard per sink log, i.e. per query
 * run (Spark builds a new sink, hence a new log, at every start), and it goes when the run's thread
 * ends ([[WriterGuard.forSink]]).
 *
 * Before the first batch of the run ([[beforeBatch]]):
 *   - an unfinished rewind or repair ([[HeadStart.unfinishedOperation]]) refuses the batch;
 *   - the sink's [[SinkRecord]] must name this query (the checkpoint's query id) as its owner; a
 *     sink without a record is claimed. Another owner refuses the batch: two queries on one sink
 *     would otherwise each skip the other's batch ids (Spark's sink skips every id already logged);
 *   - the record's `epoch` must be the one this run started with;
 *   - the run takes the [[WriterLease]] (once) and a daemon thread refreshes it every quarter of
 *     its timeout until the query's thread ends, then removes it. A record change (the claim of a
 *     new sink, the interval) is a compare-and-set ([[SinkRecord.compareAndSet]]): a concurrent
 *     epoch bump wins and this run stops.
 *
 * Before each batch is logged ([[beforeCommit]]) the record is read again, and that is all a batch
 * costs after the first (one request on an object store while the record is unchanged:
 * [[io.batchlog.log.JsonRecordFile#Watched]]). A rewind or takeover bumps the epoch *after* it saw
 * no live lease, and before it changes anything; the writer re-reads it *after* taking its lease:
 * so either the rewind sees the lease and refuses, or the writer sees the new epoch and fails
 * before committing.
 *
 * Liveness never compares two hosts' clocks. The writer fences itself on its own monotonic clock
 * ([[requireLease]], before each batch, each commit and right before its log file is published):
 * once its last successful refresh is older than the timeout minus one refresh interval, or a
 * refresh failed, it stops (`WRITER_LEASE_LOST`); an observer calls the lease dead only after
 * watching it unchanged for the whole timeout ([[io.batchlog.log.LeaseWatch]]), by then this writer
 * has stopped. A writer already past its checks when a rewind bumps the epoch loses to the rewind's
 * create-once claim of the next log id ([[BatchTaggedFileStreamSinkLog.claimNext]]).
 */
final class WriterGuard private (
    val taggedLog: BatchTaggedFileStreamSinkLog,
    queryId: String,
    runId: String,
    timeoutMs: Long,
    fenceWaitMs: Long,
    clock: Clock
) extends Logging {
  private val fm: CheckpointFileManager = taggedLog.checkpointFileManager
  private[commit] val meta: Path = taggedLog.metadataPath
  private def sink: String = meta.getParent.toString

  @volatile private var epoch: Option[Long] = None
  @volatile private var currentBatch = -1L

  /**
   * True once the run took its lease, from when its watcher ([[watch]]) refreshes it. Not the
   * watcher thread itself: that thread holds the query's thread, hence the query and its sink, and
   * the guard must not, or a guard kept weakly by Spark's log of the sink ([[WriterGuard.bySink]])
   * would keep that log, hence itself.
   */
  @volatile private var keeping = false

  /**
   * True once the run's thread ended ([[watch]]): from then on this guard refuses every batch and
   * commit. Nothing in Spark calls it then; this is the guard's own word that an ended run never
   * writes, whoever still holds it.
   */
  @volatile private var ended = false

  /** When (this JVM's monotonic clock) the last lease write that succeeded started. */
  @volatile private var lastRefreshNanos = 0L
  @volatile private var refreshes = 0L

  /**
   * The version ([[WriterLease.refreshes]]) of this run's last lease write known to have landed in
   * time: a file holding it was written by no one since. A later version of this run's (a refresh
   * that landed late, or whose answer was lost) may have replaced another writer's lease.
   */
  @volatile private var lastOnTime = -1L

  /** Why the keeper no longer holds the lease (a failed refresh, the lease taken), if so. */
  @volatile private var lost: Option[String] = None

  /**
   * The run whose lease this run replaced when it took it, if any. That run may still write once
   * more: a refresh it checked before the takeover can land after it ([[refresh]]). Such a late
   * version is taken back, never obeyed: the run that wrote it has fenced itself by then.
   */
  @volatile private var replaced: Option[String] = None

  /** Reads the sink's record from the first check on (the run's first batch writes it). */
  private lazy val record = new SinkRecord.Watched(taggedLog.fileSystem, meta)

  def beforeBatch(batchId: Long): Unit = synchronized {
    requireRunning(batchId)
    currentBatch = batchId
    // Checked at the run's first batch; from then on each commit re-reads the record, which every
    // rewind, takeover and repair changes before it changes anything else.
    if (!keeping) firstBatch(batchId)
    else requireLease(batchId)
  }

  private def firstBatch(batchId: Long): Unit = {
    refuseUnfinishedOperation()
    SinkRecord.migrate(fm, meta) // a sink last written before records moved to _batchlog/
    val now = clock.currentTimeMillis()
    val record = this.record.read() match {
      case None => claim(batchId, None, SinkRecord.first(queryId, batchId, taggedLog.interval, now))
      case Some(r) if r.owner.isEmpty =>
        // written by repair when the damaged log named no owner: this query claims it
        claim(batchId, Some(r), r.copy(owners = List(SinkOwner(queryId, batchId, now))))
      case Some(r) =>
        checkOwner(r, batchId)
        // The interval in force is derived from the compact files, as Spark does; keep the
        // record true so that a repair rebuilds the layout this query reads.
        if (r.compactInterval == taggedLog.interval) r
        else claim(batchId, Some(r), r.copy(compactInterval = taggedLog.interval))
    }
    checkEpoch(record, batchId)
    val found = WriterLease.readSettled(fm, meta, clock) match {
      case Some(l) if l.runId != runId && WriterGuard.awaitRemovalHere(l.runId, timeoutMs) =>
        WriterLease.read(fm, meta) // that run, ended in this JVM, removed it (or left it)
      case other => other
    }
    found.filter(l => l.queryId != queryId).foreach { other =>
      LeaseWatch.watch(WriterLease.path(meta).toString, fenceWaitMs, clock) { () =>
        WriterLease.read(fm, meta).filterNot(l => WriterGuard.isDeadHere(l.runId))
      } match {
        case LeaseWatch.Live(l, unchanged, refreshed) if l.queryId != queryId =>
          throw BatchLogException.writerActive(sink, l.describe, unchanged, l.timeoutMs, refreshed)
        case _ =>
      }
    }
    replaced = found.map(_.runId).filter(_ != runId)
    lastRefreshNanos = writeLease()
    lastOnTime = refreshes
    taggedLog.metrics.leaseHeld(() => clock.elapsedMs(lastRefreshNanos))
    taggedLog.beforePublish = (file: Path) => requireLease(currentBatch)
    keeping = true
  }

  /**
   * The record changed by compare-and-set from `expected`: a rewind, takeover or repair that
   * changed it meanwhile wins, and this query stops before it wrote anything.
   */
  private def claim(batchId: Long, expected: Option[SinkRecord], next: SinkRecord): SinkRecord =
    try SinkRecord.compareAndSet(fm, meta, expected, next)
    catch {
      case c: SinkRecord.Conflict =>
        throw BatchLogException.sinkChangedWhileWriting(
          sink,
          batchId,
          s"changed by another process (a rewind, takeover or repair) as this query claimed it " +
            s"(its record ${c.file} moved past version ${c.expected})"
        )
    }

  def beforeCommit(batchId: Long): Unit = {
    requireLease(batchId)
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

  /**
   * The writer's own fence, on its own monotonic clock and without a request: it commits only while
   * its last successful lease refresh started less than [[WriterLease.selfFenceMs]] ago (and no
   * refresh failed). An observer calls the lease dead only after seeing it unchanged for the whole
   * timeout, so this writer has stopped before any rewind or takeover can act on its death. Checked
   * before each batch, before each commit, and again right before the log file is published.
   */
  def requireLease(batchId: Long): Unit = {
    requireRunning(batchId)
    lost.foreach(why => throw BatchLogException.writerLeaseLost(sink, batchId, why))
    val age = clock.elapsedMs(lastRefreshNanos)
    val limit = WriterLease.selfFenceMs(timeoutMs)
    if (age > limit) {
      throw BatchLogException.writerLeaseLost(
        sink,
        batchId,
        s"its last successful refresh started ${age / 1000.0} s ago, more than the ${limit / 1000.0}" +
          s" s it may be old (the lease timeout ${timeoutMs / 1000.0} s minus one refresh interval)"
      )
    }
  }

  private def requireRunning(batchId: Long): Unit =
    if (ended) throw BatchLogException.writerLeaseLost(sink, batchId, WriterGuard.RunEnded)

  /** A refused publish of `batchId`'s log file: the sink changed if its record did. */
  def afterRefusedPublish(batchId: Long, e: BatchLogException): Nothing = {
    record.read() match {
      case Some(r) => checkOwner(r, batchId); checkEpoch(r, batchId)
      case None =>
    }
    throw e
  }

  /** A rewind or repair that did not finish ([[HeadStart.unfinishedOperation]]). */
  private def refuseUnfinishedOperation(): Unit =
    HeadStart.unfinishedOperation(fm, meta, sink).foreach(e => throw e)

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

  /** Writes the lease's next version; returns when (this JVM's monotonic clock) it started. */
  private def writeLease(): Long = {
    val started = clock.nanoTime()
    refreshes += 1
    WriterLease.write(
      fm,
      meta,
      WriterLease(
        queryId,
        runId,
        WriterGuard.host,
        WriterGuard.pid,
        currentBatch,
        clock.currentTimeMillis(),
        timeoutMs,
        refreshes
      )
    )
    started
  }

  /** The lease is lost for `why`: counted in the sink's metrics (`leaseRefreshFailures`). */
  private def lostBecause(why: String): Option[String] = {
    taggedLog.metrics.leaseRefreshFailed()
    Some(why)
  }

  /**
   * One refresh by the watcher, counted only if it landed in time. A lease version stays live for
   * an observer until it has seen it unchanged for the whole timeout, so the next version must be
   * written before the previous one could be called dead: within [[WriterLease.lateRefreshMs]] of
   * the start of the previous successful refresh. A refresh that is not (the watcher paused between
   * its check and its write, a PUT that hung and then went through) may have landed after an
   * observer called this run dead and a new writer took the lease, and replaced that writer's
   * lease: this run then keeps the lease no longer, never writes it again, and leaves it at its end
   * (the new writer takes its lease back, as [[replaced]] says).
   */
  private def refresh(): Unit = {
    val previous = lastRefreshNanos
    val limit = WriterLease.lateRefreshMs(timeoutMs)
    val before = clock.elapsedMs(previous)
    if (before > limit) {
      lost = lostBecause(
        s"its last successful refresh started ${before / 1000.0} s ago, more than the " +
          s"${limit / 1000.0} s a lease may go unrefreshed, so another writer may own it by now"
      )
    } else {
      val started = writeLease()
      val landed = clock.elapsedMs(previous)
      if (landed <= limit) { lastRefreshNanos = started; lastOnTime = refreshes }
      else {
        lost = lostBecause(
          s"a refresh of its lease ${WriterLease.path(meta)} landed ${landed / 1000.0} s after " +
            s"the previous one started, more than the ${limit / 1000.0} s a lease may go " +
            "unrefreshed: another writer may have taken the lease meanwhile"
        )
        logWarning(s"A late refresh of the writer lease of $sink: ${lost.get}")
      }
    }
  }

  /**
   * Held by the watcher for each check and refresh of the lease, and by [[endRun]] for its removal,
   * so that no refresh lands after the removal and writes the lease of an ended run again.
   */
  private val leaseLock = new ReentrantLock()

  /**
   * Ends the run: this guard refuses every batch and commit from now on, and the run's lease is
   * removed if it still names this run. The watcher calls it once the query's thread ended; the
   * committer calls it sooner, on the query's thread, when a batch failed ([[abortRun]]).
   *
   * The lease is removed while it still holds this run's last version known to have landed in time
   * ([[lastOnTime]]), read right before the delete: only this run writes its run id, and no one
   * wrote the file since that version, however long ago it was (a run fenced after a pause past its
   * lease removes it too, so that the next command or start need not watch a dead run's lease for
   * its timeout). A lease another writer took meanwhile names that writer's run and stays; so does
   * a later version of this run's (a refresh that landed late may have replaced another writer's
   * lease, which that writer takes back). (A delete that hangs past another writer's takeover and
   * then lands removes that writer's lease: its next refresh sees it gone, and it stops loudly at
   * its next batch; `WriterFencingSuite`.) Waits at most `waitMs` for a refresh in flight; if one
   * is still going then, the watcher removes the lease after it, once the query's thread ends.
   */
  private def endRun(waitMs: Long): Unit = {
    ended = true // refused from now on, before its lease goes
    if (keeping) taggedLog.metrics.leaseReleased()
    if (keeping && leaseLock.tryLock(waitMs, TimeUnit.MILLISECONDS)) {
      try
        if (WriterLease.read(fm, meta).exists(l => l.runId == runId && l.refreshes == lastOnTime)) {
          val age = clock.elapsedMs(lastRefreshNanos)
          if (age > WriterLease.selfFenceMs(timeoutMs)) {
            logWarning(
              s"Removing the writer lease of $sink, which still names this run, whose last " +
                s"refresh started ${age / 1000.0} s ago (a lease may go unrefreshed " +
                s"${WriterLease.selfFenceMs(timeoutMs) / 1000.0} s)"
            )
          }
          WriterLease.delete(fm, meta)
        }
      catch {
        case e: Exception => logWarning(s"Could not remove the writer lease of $sink", e)
      } finally leaseLock.unlock()
    }
  }

  /**
   * A batch of the run failed (the committer's `abortJob`, on the query's thread): Spark ends the
   * query with the failure, so the run ends here, before the failure reaches the caller, and its
   * lease is gone by the time `processAllAvailable` or `awaitTermination` raises, or `stop` returns
   * from stopping a batch. Without it the watcher removed the lease just after the query's thread
   * ended, a moment after those calls returned, while the caller may already be reading, copying,
   * rewinding or deleting the sink. Waits at most one second for a refresh in flight.
   */
  def abortRun(): Unit = endRun(1000L)

  /** True once the run ended ([[endRun]]): it refuses every batch and commit. */
  def isEnded: Boolean = ended

  /**
   * Why this run may no longer write the sink, if it may not: its lease is lost ([[requireLease]]),
   * or the sink's record names another owner or a moved epoch (a rewind, takeover or repair). Asked
   * by a failed batch before the run ends: a batch that failed because the sink was changed under
   * it (a task's file deleted by a rewind, say) reports that, not the symptom it met.
   */
  def fencedError(batchId: Long): Option[BatchLogException] =
    try {
      requireLease(batchId)
      record.read() match {
        case Some(r) => checkOwner(r, batchId); checkEpoch(r, batchId)
        case None =>
      }
      None
    } catch {
      case e: BatchLogException => Some(e)
      case _: java.io.IOException => None // the store cannot say: the batch's own error stands
    }

  /** The watcher's check of the lease, and its refresh while the lease is this run's. */
  private def keep(queryThread: Thread, lose: String => Unit): Unit =
    try {
      WriterLease.read(fm, meta) match {
        case Some(l) if l.runId == runId => if (queryThread.isAlive) refresh()
        case Some(l) if replaced.contains(l.runId) =>
          // a late refresh of the run this one replaced: that run has fenced itself
          logWarning(
            s"The writer lease of $sink names ${l.describe} again, the run this run " +
              "replaced: a refresh of it landed late. Taking the lease back."
          )
          if (queryThread.isAlive) refresh()
        case Some(_) => lose(s"its lease ${WriterLease.path(meta)} names another run now")
        case None =>
          // a forced rewind, a hand, or the late removal by a run this one replaced
          // (its delete hung past this run's takeover): no lease, so an observer may
          // act on the sink now, and the epoch check, not this run, decides who wins
          lose(
            s"its lease ${WriterLease.path(meta)} was removed by another process " +
              "(a forced rewind, or the late removal by a run it replaced)"
          )
      }
    } catch {
      case e: Exception =>
        lost = lostBecause(s"a refresh of its lease ${WriterLease.path(meta)} failed: $e")
        logWarning(s"Could not refresh the writer lease of $sink", e)
    }

  /**
   * Watches the run from its guard's creation: while `queryThread` (the query's micro-batch thread)
   * lives it refreshes the lease every refresh interval, once the run took it ([[keeping]]); when
   * the thread ends it ends the run ([[endRun]]: the lease goes, unless a failed batch removed it
   * already) and calls `release`, which drops the run's guard and log from the JVM's maps
   * ([[WriterGuard.forSink]]). A refresh that fails, a lease that names another run (taken over) or
   * a lease removed (a forced rewind, the late delete of the run this one replaced) ends the
   * refreshing: the lease is lost, and the query's next check ([[requireLease]]) fails it. A
   * refresh that stalls is caught by the same check, by its age; one that lands late ends the
   * refreshing too ([[refresh]]). A lease naming the run this one replaced is that run's late
   * refresh: it is taken back ([[replaced]]).
   */
  private def watch(queryThread: Thread, release: () => Unit): Unit = {
    // the lease is found lost: refreshing ends, and the query's next check fails it
    def lose(why: String): Unit = {
      lost = lostBecause(why)
      logWarning(s"The writer lease of $sink is lost: $why. ${WriterGuard.LostConsequence}")
    }
    val t = new Thread(s"batchlog-writer-lease-$runId") {
      override def run(): Unit =
        try {
          while (lost.isEmpty && !ended && queryThread.isAlive) {
            queryThread.join(WriterLease.refreshIntervalMs(timeoutMs))
            if (keeping) {
              leaseLock.lock()
              try if (!ended) keep(queryThread, lose)
              finally leaseLock.unlock()
            }
          }
          queryThread.join()
          endRun(Long.MaxValue)
        } finally {
          ended = true
          WriterGuard.runsHere.remove(runId)
          release()
        }
    }
    t.setDaemon(true)
    WriterGuard.runsHere.put(runId, WriterGuard.RunHere(queryThread, t))
    t.start()
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

  /** A run holding a lease from this JVM: its micro-batch thread and its lease watcher. */
  final private case class RunHere(query: Thread, watcher: Thread)

  /** The runs holding a lease from this JVM, by run id, until their watcher let go of it. */
  private val runsHere = new ConcurrentHashMap[String, RunHere]()

  /** `runId`, if it ran in this JVM and its query thread has ended (its lease is going away). */
  private def endedHere(runId: String): Option[RunHere] =
    Option(runsHere.get(runId)).filter(!_.query.isAlive)

  /** True if `runId` ran in this JVM and its query thread has ended (its lease is going away). */
  def isDeadHere(runId: String): Boolean = endedHere(runId).isDefined

  /**
   * Waits up to `ms` for the watcher of `runId`, a run of this JVM whose query thread has ended, to
   * remove its lease and go; true if there was such a run. A query restarted right after it stopped
   * would otherwise take its lease while the ended run's watcher is between its check that the
   * lease is its own and its delete, and lose the lease it just took to that delete. A delete that
   * hangs past the wait and lands later still removes the new run's lease: that run then stops
   * ([[requireLease]]), loudly, and the next start takes the lease again.
   */
  private[commit] def awaitRemovalHere(runId: String, ms: Long): Boolean =
    endedHere(runId).exists { run =>
      run.watcher.join(ms)
      true
    }

  /** What a lost lease means for its query, as the lease watcher logs the loss. */
  private val LostConsequence =
    "The query's next batch fails (WRITER_LEASE_LOST) and commits nothing."

  /** Why an ended run's guard refuses ([[requireRunning]], [[forSink]]). */
  private val RunEnded =
    "its query run has ended; a run's guard is not made again for it, so nothing it still has " +
      "is committed"

  /**
   * The guard of each running query run's sink, keyed by Spark's log of the sink (one per run:
   * Spark builds a new sink at every start). The entry is removed when the run's thread ends
   * ([[watch]]), with batchlog's log of the run ([[BatchTaggedFileStreamSinkLog.release]]), whoever
   * still holds Spark's query: the Spark Connect server keeps every stopped query, hence its sink
   * and Spark's log, for an hour after its last access
   * (`SparkConnectService.streamingSessionManager`), and a map that only let go of a run with
   * Spark's log kept each run's guard, log and cached indexes that long. The keys are weak as well,
   * for a guard whose run never ends while its caller lives (a commit protocol driven outside a
   * query), and the guard holds batchlog's log of the sink, never Spark's, so that such an entry
   * still goes with Spark's log.
   */
  private val bySink = new java.util.WeakHashMap[FileStreamSinkLog, WriterGuard]()

  /**
   * Spark's logs of the runs that ended here, guarded by `bySink`'s lock: [[forSink]] refuses them,
   * so that a run whose guard and lease went never gets a fresh guard that would commit. Weak keys
   * to a constant: an entry costs a few dozen bytes while Spark keeps that run's query.
   */
  private val endedRuns = new java.util.WeakHashMap[FileStreamSinkLog, java.lang.Boolean]()

  /** The sinks (their `_spark_metadata` paths) with a guard in this JVM. */
  private[batchlog] def guardedSinks: Seq[Path] =
    bySink.synchronized(bySink.values().toArray(Array.empty[WriterGuard]).toSeq.map(_.meta))

  /**
   * The guard of the run writing the sink of `sinkLog` (Spark's log), committing through its
   * [[taggedLog]] (batchlog's, [[BatchTaggedFileStreamSinkLog.forSink]]). Called on the query's
   * thread (Spark's sink sets up its committer there, before each batch): the ids come from that
   * thread, and the first call of a run starts the guard's watcher of that thread, which drops the
   * guard and the log when the thread ends. A run that ended is refused (`WRITER_LEASE_LOST`) at
   * `batchId`, never given a new guard.
   */
  def forSink(spark: SparkSession, sinkLog: FileStreamSinkLog, batchId: Long): WriterGuard =
    bySink.synchronized {
      if (endedRuns.containsKey(sinkLog)) {
        throw BatchLogException.writerLeaseLost(
          sinkLog.metadataPath.getParent.toString,
          batchId,
          RunEnded
        )
      }
      val existing = bySink.get(sinkLog)
      if (existing != null) existing
      else {
        val sc = spark.sparkContext
        val queryId = Option(sc.getLocalProperty(QueryIdProperty)).getOrElse("unknown")
        val runId = Option(sc.getLocalProperty(JobGroupProperty)).getOrElse(queryId)
        val g = new WriterGuard(
          BatchTaggedFileStreamSinkLog.forSink(spark, sinkLog),
          queryId,
          runId,
          BatchLogConf.writerLeaseTimeoutMs(spark),
          BatchLogConf.fenceWaitMs(spark),
          Clock.current
        )
        bySink.put(sinkLog, g)
        g.watch(Thread.currentThread(), () => runEnded(sinkLog, g))
        g
      }
    }

  /** The run of `guard` ended: its guard and log go, and `sinkLog` gets no guard again. */
  private def runEnded(sinkLog: FileStreamSinkLog, guard: WriterGuard): Unit =
    bySink.synchronized {
      endedRuns.put(sinkLog, java.lang.Boolean.TRUE)
      if (bySink.get(sinkLog) eq guard) bySink.remove(sinkLog)
      BatchTaggedFileStreamSinkLog.release(sinkLog, guard.taggedLog)
    }
}
