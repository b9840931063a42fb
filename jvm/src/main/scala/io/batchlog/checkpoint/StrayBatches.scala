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
      cutAbove(spark, cp, kept)
    }
    strays
  }

  /**
   * The one batch `cp` commits above `sinkLatest`, the latest batch of the sink its query owns,
   * made to run again; its id (none: nothing done).
   *
   * Spark writes `commits/N` after the sink logged batch N, so a commit above the sink's latest is
   * not the sink's. A fenced zombie renames its `commits/N` after the rewind that cut N (it wrote
   * the file before its pause); a `repair` cannot rebuild a last batch that wrote no file. Either
   * way the sink would refuse the query's next batch for good (it expects `sinkLatest + 1`). The
   * checkpoint is cut as a rewind to `sinkLatest + 1` would cut it: state versions above it, the
   * source logs past its offsets, the offsets above it, then the commit (last, so that a crash in
   * between leaves it for the next start to find).
   *
   * Only one commit, above a log that has batches: more (or a log with none) is a damaged or
   * deleted log, which `repair` rebuilds from the data files; re-running those batches instead
   * would write them all again. The query then fails as before, naming the log.
   */
  def healAhead(spark: SparkSession, cp: QueryCheckpoint, sinkLatest: Long): Seq[Long] = {
    val next = sinkLatest + 1
    if (sinkLatest < 0 || cp.commitIds.filter(_ >= next) != Seq(next)) return Nil
    logWarning(
      s"${cp.commitsDir} commits batch $next, above the sink's latest batch $sinkLatest (a " +
        "fenced writer's commit after a rewind, or a last batch a repair could not rebuild): it " +
        "runs again; removing the offsets and state versions above it, the source logs past its " +
        "offsets and its commit"
    )
    cutAbove(spark, cp, next)
    cp.fm.delete(cp.commitFile(next))
    cp.removeStrayChecksums(cp.commitsDir, sinkLatest)
    Seq(next)
  }

  /** Cuts `cp` back above batch `kept`: state versions, source logs past its offsets, offsets. */
  private def cutAbove(spark: SparkSession, cp: QueryCheckpoint, kept: Long): Unit = {
    StateFiles.toDelete(cp, kept, None).foreach(f => cp.fm.delete(f.getPath))
    if (cp.offsetIds.contains(kept)) {
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
    }
    cp.offsetIds.filter(_ > kept).reverse.foreach(n => cp.fm.delete(cp.offsetsFile(n)))
    cp.removeStrayChecksums(cp.offsetsDir, kept)
  }
}
