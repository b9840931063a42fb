package io.batchlog.log

/**
 * The lease of the query writing a sink now, `<output>/_batchlog/batchlog-lease.json`. The writer's
 * driver refreshes it every `timeoutMs / 4` while the query runs and removes it when the query
 * stops ([[io.batchlog.commit.WriterGuard]]). It is *live* while `now - refreshedAtMs <=
 * timeoutMs`: rewind and takeover refuse while a live lease exists (unless forced, for a writer
 * known to be dead), so a rewind cannot succeed under a running query.
 */
final case class WriterLease(
    queryId: String,
    runId: String,
    host: String,
    pid: Long,
    batchId: Long,
    refreshedAtMs: Long,
    timeoutMs: Long
) {
  def ageMs(now: Long): Long = math.max(0L, now - refreshedAtMs)

  def isLive(now: Long): Boolean = ageMs(now) <= timeoutMs

  def describe: String = s"query $queryId (run $runId, driver pid $pid on $host, batch $batchId)"
}

object WriterLease extends JsonRecordFile[WriterLease]("batchlog-lease.json")
