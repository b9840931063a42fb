package io.batchlog.checkpoint

import java.util.UUID

import org.apache.hadoop.fs.Path
import org.apache.spark.sql.SparkSession

import io.batchlog.log.{Clock, FileTree}

/**
 * Waits out the state store maintenance that a stopped query still owes its checkpoint.
 *
 * Spark writes some state files after the batch that made them. The state store maintenance task
 * uploads a RocksDB snapshot (`V.zip`) and writes an HDFS-backed one (`V.snapshot`). It runs every
 * `spark.sql.streaming.stateStore.maintenanceInterval` (60 s by default) in each executor, and once
 * more when a stopped query's stores are unloaded. A rewind that deletes the versions above its
 * target before that last run sees a snapshot of the old run reappear above the target. The replay
 * would then load that stale snapshot instead of the state it rebuilds.
 *
 * So a rewind waits until the newest state file is older than the interval plus [[MarginMs]]. Both
 * times are the store's: the newest file's modification time, and that of a probe file written now.
 * No host's wall clock is compared with another's.
 */
object StateMaintenance {

  val IntervalKey = "spark.sql.streaming.stateStore.maintenanceInterval"

  /** Time for a maintenance run that began at the end of its interval to finish its writes. */
  val MarginMs = 5000L

  /** The probe file, in the checkpoint's root: written, read back and deleted. */
  val ProbeName = "_batchlog-state-clock"

  /**
   * Returns once `cp`'s state files are all older than the maintenance interval plus the margin (at
   * once when it has none); `waiting(msLeft)` is called before each wait. The ms waited.
   */
  def awaitSettled(spark: SparkSession, cp: QueryCheckpoint)(waiting: Long => Unit): Long = {
    val intervalMs = spark.sessionState.conf.streamingMaintenanceInterval
    val clock = Clock.current
    val start = clock.nanoTime()
    var left = msLeft(cp, intervalMs + MarginMs)
    while (left > 0) {
      waiting(left)
      clock.sleepMs(left)
      left = msLeft(cp, intervalMs + MarginMs)
    }
    clock.elapsedMs(start)
  }

  /** How long until the newest state file of `cp` is `quietMs` old, by the store's clock. */
  private def msLeft(cp: QueryCheckpoint, quietMs: Long): Long = {
    if (!cp.fs.exists(cp.stateDir)) return 0L
    var newest = Long.MinValue
    FileTree.foreachFile(cp.fs, cp.stateDir)(f => newest = math.max(newest, f.getModificationTime))
    if (newest == Long.MinValue) 0L else newest + quietMs - storeNow(cp)
  }

  /** The store's time now: the modification time of a file written for it. */
  private def storeNow(cp: QueryCheckpoint): Long = {
    val probe = new Path(cp.root, ProbeName)
    val out = cp.fs.create(probe, true)
    try out.write(UUID.randomUUID().toString.getBytes("UTF-8"))
    finally out.close()
    try cp.fs.getFileStatus(probe).getModificationTime
    finally cp.fs.delete(probe, false)
  }
}
