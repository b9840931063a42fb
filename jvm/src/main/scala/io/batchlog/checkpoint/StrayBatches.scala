package io.batchlog.checkpoint

import org.apache.spark.internal.Logging
import org.apache.spark.sql.SparkSession

import io.batchlog.log.{JsonField, LogLayout, LogTruncation}

/**
 * Batches planned above a gap in a checkpoint's `offsets/`: what a fenced zombie left.
 *
 * Spark plans batches in order, so `offsets/` is one run of consecutive ids (from the oldest
 * retained). A driver that was paused or partitioned while its sink was rewound wakes up with its
 * old next batch id in memory: it plans that batch on the rewound checkpoint (`offsets/N`, and a
 * file source's `sources/<i>/<k>` for the files it found) and only then reaches the sink, which
 * refuses it. What it planned sits above a gap, where Spark's restart fails (it reads
 * `offsets/N-1`) and a file source would take the files logged there as already seen, never to read
 * them again.
 *
 * [[heal]] removes it, as a rewind to the last batch planned in order would: state versions above
 * it, the source logs past that batch's log offsets, then the stray offsets (last, so that a crash
 * in between leaves them for the next heal to find). A rewind plans the same cut with the rest
 * (`io.batchlog.ops.Rewind`); a restart of the sink's owner heals before its first batch
 * (`io.batchlog.commit.HeadStart`).
 */
object StrayBatches extends Logging {

  /**
   * The latest batch `offsets` (ascending) planned in order, for a sink whose latest batch is
   * `sinkLatest`: the end of the run of consecutive ids it starts with, when that run reaches the
   * sink's latest (what lies above the gap was planned by a zombie after a rewind); else its last
   * id (a hole below what the sink committed is not a zombie's: sparse logs, refused by a rewind).
   * -1: none.
   */
  def plannedLatest(offsets: Seq[Long], sinkLatest: Long): Long =
    offsets.headOption.fold(-1L) { first =>
      val inOrder = offsets.zipWithIndex.takeWhile { case (id, i) => id == first + i }.last._1
      if (inOrder >= sinkLatest) inOrder else offsets.last
    }

  /** True if `offsets` (ascending) is not one run of consecutive ids. */
  def hasGap(offsets: Seq[Long]): Boolean =
    offsets.nonEmpty && offsets.last - offsets.head + 1 != offsets.length

  /**
   * Removes what was planned above the gap of `cp`, the checkpoint of a query whose sink's latest
   * batch is `sinkLatest` (see the class); the stray batch ids.
   */
  def heal(spark: SparkSession, cp: QueryCheckpoint, sinkLatest: Long): Seq[Long] = {
    val offsets = cp.offsetIds
    val kept = plannedLatest(offsets, sinkLatest)
    val strays = offsets.filter(_ > kept)
    if (strays.nonEmpty) {
      logWarning(
        s"${cp.offsetsDir} has batches ${strays.mkString(", ")} planned above a gap after batch " +
          s"$kept (a fenced writer's, on a rewound checkpoint): removing them, with the state " +
          s"versions above $kept and the source logs past batch $kept's offsets"
      )
      StateFiles.toDelete(cp, kept, None).foreach(f => cp.fm.delete(f.getPath))
      val at = cp.offsets(kept)
      val default = spark.sessionState.conf.fileSourceLogCompactInterval
      cp.sourceIndexes.foreach { i =>
        at.fileSourceLogOffset(i).foreach { k =>
          val dir = cp.sourceDir(i)
          val interval = LogLayout.intervalOf(cp.fm, dir, default)._2.getOrElse(default)
          val cut = LogTruncation.planReadable(cp.fm, dir, k, interval, default)
          if (!cut.isNoop) LogTruncation.apply(cp.fm, cut)(JsonField.long(_, "batchId"))
          cp.removeStrayChecksums(dir, k)
        }
      }
      strays.reverse.foreach(n => cp.fm.delete(cp.offsetsFile(n)))
      cp.removeStrayChecksums(cp.offsetsDir, kept)
    }
    strays
  }
}
