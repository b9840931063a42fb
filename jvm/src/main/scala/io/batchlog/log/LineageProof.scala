package io.batchlog.log

import scala.collection.mutable

import io.batchlog.shim.CompactibleFileStreamLog._

/**
 * The batches that surviving log files prove for entries that carry no batch: lines written or
 * compacted by plain Spark (a vanilla interlude, or a sink started without batchlog) whose data
 * file names are not batch-tagged either.
 *
 * Proof of an entry's batch: it is listed in the per-batch log file `N` (Spark writes exactly the
 * files of batch N there, and keeps the file `minBatchesToRetain` batches); or it is in compact
 * file `N.compact` but in none of the log files that compaction merged (the previous compact file
 * and the batch files since, all still present): then batch `N` wrote it, for Spark writes no file
 * `N` for a compaction batch. Nothing else is taken as proof: an entry that none of these covers
 * stays untagged, and the rewind horizon stays above every batch it could belong to.
 *
 * Only entries whose file names are not batch-tagged are collected (batchlog's own files carry
 * their batch in their name), so the memory is that of the plain-Spark entries alone.
 *
 * @param paths
 *   the proven batch of each such entry, by logged path
 * @param provenBatches
 *   batches whose own entries are all enumerated here (their batch file survives, or their
 *   compaction was proven by difference)
 */
final case class LineageProof(paths: Map[String, Long], provenBatches: Set[Long]) {
  def batchOf(path: String): Option[Long] = paths.get(path)
}

object LineageProof {

  /** The proof surviving log files give for batches up to `upTo` of `log`. */
  def of(log: BatchTaggedFileStreamSinkLog, upTo: Long): LineageProof = {
    val fm = log.checkpointFileManager
    val present = LogLayout.listIds(fm, log.metadataPath).filter(_ <= upTo).toSet
    val interval = log.interval
    val paths = mutable.HashMap.empty[String, Long]
    val proven = mutable.HashSet.empty[Long]
    // Entries whose names carry no batch, tagged or not: a line tagged in a batch file may be
    // untagged in a compact file that plain Spark wrote since.
    def plainPaths(id: Long)(fn: String => Unit): Unit = log.foreachLineIn(id) { (line, _) =>
      val path = LogFormat.decode(line).path
      if (DataFileNaming.batchIdOf(path).isEmpty) fn(path)
    }

    present.filterNot(isCompactionBatch(_, interval)).foreach { id =>
      plainPaths(id)(p => paths(p) = id)
      proven += id
    }
    // A compaction batch's own entries: in N.compact, in none of the files it merged.
    present.filter(isCompactionBatch(_, interval)).toSeq.sorted.foreach { id =>
      val merged = getValidBatchesBeforeCompactionBatch(id, interval)
      if (merged.forall(present.contains)) {
        val before = mutable.HashSet.empty[String]
        merged.foreach(i => plainPaths(i)(before += _))
        plainPaths(id)(p => if (!before.contains(p) && !paths.contains(p)) paths(p) = id)
        proven += id
      }
    }
    LineageProof(paths.toMap, proven.toSet)
  }
}
