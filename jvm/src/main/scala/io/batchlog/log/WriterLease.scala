package io.batchlog.log

import org.apache.hadoop.fs.Path

import io.batchlog.shim.CheckpointFileManager

/**
 * The lease of the query writing a sink now, `<output>/_batchlog/_batchlog-lease.json`. The
 * writer's driver refreshes it every `timeoutMs / 4` while the query runs and removes it when the
 * query stops ([[io.batchlog.commit.WriterGuard]]). Each refresh writes a new version: `refreshes`
 * counts them, so a refresh changes the record even when the writer's wall clock stands still or
 * goes back.
 *
 * Liveness is never judged from `refreshedAtMs` (the writer's wall clock, for people to read): an
 * observer judges a lease dead once it has seen the same version for `timeoutMs` on its own
 * monotonic clock ([[LeaseWatch]]), and the writer stops committing once its own last successful
 * refresh is older than `timeoutMs` minus a margin ([[WriterLease.selfFenceMs]]), so it stops
 * before any observer can call it dead.
 */
final case class WriterLease(
    queryId: String,
    runId: String,
    host: String,
    pid: Long,
    batchId: Long,
    refreshedAtMs: Long,
    timeoutMs: Long,
    refreshes: Long = 0L
) {
  def describe: String = s"query $queryId (run $runId, driver pid $pid on $host, batch $batchId)"
}

object WriterLease extends JsonRecordFile[WriterLease]("batchlog-lease.json") {

  /**
   * How long after finding no lease it is read again where a refresh replaces it by a delete, then
   * a rename ([[LogFiles.replaceLeavesGap]]: Spark's manager on ABFS).
   */
  val AbsentRecheckMs: Long = 500L

  /**
   * The lease, read as an observer must read it: where a refresh replaces it by a delete, then a
   * rename, a read between the two finds none while the writer lives, and a rewind, takeover or new
   * run would act under it. There a lease found absent is read again [[AbsentRecheckMs]] later.
   */
  def readSettled(fm: CheckpointFileManager, meta: Path, clock: Clock): Option[WriterLease] =
    read(fm, meta).orElse {
      if (!LogFiles.replaceLeavesGap(fm, path(meta))) None
      else { clock.sleepMs(AbsentRecheckMs); read(fm, meta) }
    }

  /** How often the writer refreshes a lease of `timeoutMs`. */
  def refreshIntervalMs(timeoutMs: Long): Long = math.max(1L, timeoutMs / 4)

  /**
   * The age of its last successful refresh (on its own monotonic clock, from when that refresh
   * started) past which a writer no longer commits: the timeout minus one refresh interval. The
   * margin covers a commit already past its check (publishing takes that long at most before the
   * claim of the next log id, [[io.batchlog.ops.Rewind]], makes it lose) and clocks that run at
   * slightly different rates; an observer needs a whole timeout of no change to call it dead.
   */
  def selfFenceMs(timeoutMs: Long): Long = timeoutMs - refreshIntervalMs(timeoutMs)

  /**
   * How long after the start of a writer's previous successful refresh its next one may land and
   * still count ([[io.batchlog.commit.WriterGuard]]): the timeout minus half a refresh interval. An
   * observer calls a version dead only after watching it unchanged for the whole timeout from when
   * it first saw it, after that version landed, so a refresh landing within the timeout of the
   * previous one's start is seen first; half an interval covers clock rates. No commit margin here
   * (that is [[selfFenceMs]]'s): a busy driver's refresh that lands a little late is not lost.
   */
  def lateRefreshMs(timeoutMs: Long): Long = timeoutMs - refreshIntervalMs(timeoutMs) / 2
}
