package io.batchlog.log

import java.util.concurrent.ConcurrentHashMap

/**
 * Bounds the per-compact-file caches of a log instance (indexes, lineage proofs): a writer's log
 * lives as long as its query run and compacts every `compactInterval` batches, so a cache by
 * compact id that only grew would grow by one entry per compaction for weeks. Reads and compactions
 * use the newest compact file and, while a compaction runs, the one before it; older ones are read
 * again if ever asked for.
 */
private[log] object Newest {

  /** Removes all but the `n` highest keys of `m`. */
  def keep[V](m: ConcurrentHashMap[Long, V], n: Int): Unit =
    keys(m).dropRight(n).foreach(k => m.remove(k))

  /** The keys of `m`, ascending. */
  def keys[V](m: ConcurrentHashMap[Long, V]): Seq[Long] =
    m.keySet().toArray(new Array[java.lang.Long](0)).map(_.longValue).toSeq.sorted
}
