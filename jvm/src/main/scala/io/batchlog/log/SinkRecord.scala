package io.batchlog.log

/** A query that writes (or wrote) a sink, from batch `fromBatch` on. */
final case class SinkOwner(queryId: String, fromBatch: Long, sinceMs: Long)

/**
 * What a sink's log says about itself, `<output>/_batchlog/batchlog-sink.json`:
 * {{{
 *   {"version":1,"compactInterval":3,"epoch":2,
 *    "owners":[{"queryId":"8f1c…","fromBatch":0,"sinceMs":1795326048045}]}
 * }}}
 *   - `owners`: which query (the `id` in its checkpoint's `metadata`, stable across restarts) wrote
 *     the sink, from which batch on; the last one owns the sink now. A query that is not the owner
 *     is refused ([[io.batchlog.commit.WriterGuard]]) until a `takeover` names it. Spark itself
 *     cannot tell two queries apart: its sink silently skips every batch id already logged.
 *   - `epoch`: bumped by every operation that changes the sink under a writer (rewind, takeover,
 *     repair). A writer remembers the epoch it started with and re-reads it before committing, so a
 *     rewind from another process makes the running query fail before it commits, never after.
 *   - `compactInterval`: the interval of the query that writes the log, so that a log rebuilt by
 *     `repair` has the layout the restarting query expects even when no compact file survived.
 */
final case class SinkRecord(
    version: Int,
    compactInterval: Int,
    epoch: Long,
    owners: List[SinkOwner]
) {
  def owner: Option[SinkOwner] = owners.lastOption

  /** Owners after a rewind to `toBatch` by `queryId`: the batches from `toBatch` on are its. */
  def rewoundTo(toBatch: Long, queryId: String, now: Long): SinkRecord = {
    val kept = owners.filter(_.fromBatch < toBatch)
    val next =
      if (kept.lastOption.exists(_.queryId == queryId)) kept
      else kept :+ SinkOwner(queryId, toBatch, now)
    copy(epoch = epoch + 1, owners = next)
  }
}

object SinkRecord extends JsonRecordFile[SinkRecord]("batchlog-sink.json") {
  val Version = 1

  def first(queryId: String, fromBatch: Long, compactInterval: Int, now: Long): SinkRecord =
    SinkRecord(Version, compactInterval, 0L, List(SinkOwner(queryId, fromBatch, now)))
}
