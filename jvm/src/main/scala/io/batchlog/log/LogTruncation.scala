package io.batchlog.log

import org.apache.hadoop.fs.Path

import io.batchlog.shim.CheckpointFileManager
import io.batchlog.shim.CompactibleFileStreamLog._

import io.batchlog.BatchLogException

/**
 * A plan to truncate a compactible log directory (files `N` and `N.compact`, a `v1` header, one
 * JSON entry per line, every entry's batch known) so that its latest batch is `keepUpTo`.
 *
 * One operation serves both logs a rewind must cut back: the sink's batch-tagged log and the file
 * source's log under `checkpoint/sources/<i>/` (whose entries carry the source's log offset as
 * `batchId`). Reading batch `keepUpTo` afterwards needs the compact file at or below it and the
 * batch files after that ([[getAllValidBatches]]); the plan rebuilds any of them that cleanup
 * already deleted, by filtering the oldest compact file above `keepUpTo` on the entries' batch,
 * then deletes every file above `keepUpTo`, newest first, so that at every moment the log's latest
 * batch can still be read.
 *
 * @param rebuild
 *   log file ids to write, filtered from compact file `rebuildFrom`
 * @param delete
 *   log file ids to delete, newest first
 */
final case class LogTruncation(
    dir: Path,
    keepUpTo: Long,
    interval: Int,
    rebuild: Seq[Long],
    rebuildFrom: Option[Long],
    delete: Seq[Long]
) {

  def isNoop: Boolean = rebuild.isEmpty && delete.isEmpty

  def fileName(id: Long): String = LogLayout.fileName(id, interval)
}

object LogTruncation {

  def plan(fm: CheckpointFileManager, dir: Path, keepUpTo: Long, interval: Int): LogTruncation = {
    val present = LogLayout.listIds(fm, dir)
    val needed = if (keepUpTo < 0) Nil else getAllValidBatches(keepUpTo, interval)
    val missing = needed.filterNot(present.contains)
    val from =
      if (missing.isEmpty) None
      else present.filter(id => id > keepUpTo && isCompactionBatch(id, interval)).headOption
    if (missing.nonEmpty && from.isEmpty) {
      val name =
        if (isCompactionBatch(missing.head, interval)) s"${missing.head}$COMPACT_FILE_SUFFIX"
        else missing.head.toString
      throw BatchLogException.missingLogFile(
        new Path(dir, name).toString,
        s"it is needed to cut the log back to batch $keepUpTo and no later compact file holds " +
          "its entries"
      )
    }
    LogTruncation(dir, keepUpTo, interval, missing, from, present.filter(_ > keepUpTo).reverse)
  }

  /**
   * A cut that readers can follow. Spark derives a log's interval from its compact files
   * ([[LogLayout.derivedInterval]]), so a cut that leaves fewer than two of them changes the
   * interval readers derive: from `5.compact, 6, 7` (interval 3) Spark derives 6, and a cut to
   * batch 3 laid out for 6 (batch files 0..3) leaves no compact file, so readers fall back to
   * `configured` (3) and look for `2.compact`. The cut is laid out for the interval readers will
   * derive from what it leaves: planned with the log's `interval`, re-planned with the derived one
   * until both agree.
   *
   * @param configured
   *   the interval the writing query is configured with (readers' default)
   */
  def planReadable(
      fm: CheckpointFileManager,
      dir: Path,
      keepUpTo: Long,
      interval: Int,
      configured: Int
  ): LogTruncation = {
    val compacts = LogLayout.compactIds(fm, dir).filter(_ <= keepUpTo)
    def derived(t: LogTruncation) = LogLayout.derivedInterval(
      (compacts ++ t.rebuild.filter(isCompactionBatch(_, t.interval))).distinct
        .sorted(Ordering.Long.reverse),
      configured
    )
    Iterator.iterate(plan(fm, dir, keepUpTo, interval))(t => plan(fm, dir, keepUpTo, derived(t)))
      .take(3).find(t => derived(t) == t.interval).getOrElse(
        throw BatchLogException.unsupportedCheckpoint(
          dir.toString,
          s"no layout of the log cut back to batch $keepUpTo keeps the compact interval readers " +
            s"derive from it (the log's is $interval, the configured one $configured)"
        )
      )
  }

  /**
   * Carries out `t`. `batchOf(line)` gives an entry line's batch (None if unknown: then a rebuild
   * that needs it fails rather than guess). Re-running after a crash is safe: it re-plans from what
   * is on disk, and each file is written atomically.
   */
  def apply(fm: CheckpointFileManager, t: LogTruncation)(batchOf: String => Option[Long]): Unit = {
    t.rebuildFrom.foreach { src =>
      val srcPath = new Path(t.dir, t.fileName(src))
      t.rebuild.foreach { id =>
        val keep: Long => Boolean =
          if (isCompactionBatch(id, t.interval)) _ <= id else _ == id
        LogFiles.writeAtomic(fm, new Path(t.dir, t.fileName(id)), overwrite = false) { w =>
          LogFiles.foreachLine(fm, srcPath, s"it holds the entries to rebuild ${t.fileName(id)}") {
            (line, lineNo) =>
              val b = batchOf(line).getOrElse(throw BatchLogException.corruptLine(
                srcPath.toString,
                lineNo,
                "its batch is unknown, so it cannot be split by batch"
              ))
              if (keep(b)) LogFiles.writeLine(w, line)
          }
        }
      }
    }
    t.delete.foreach { id =>
      // By the names present: a cut laid out for another interval than the log's
      // (planReadable) names a file differently from how it was written.
      Seq(true, false).map(c => new Path(t.dir, LogLayout.fileName(id, c))).filter(fm.exists)
        .foreach { file =>
          // the index first: a crash between never leaves an index without its compact file
          if (LogLayout.isCompactName(file.getName)) fm.delete(CompactIndex.pathOf(file))
          fm.delete(file)
        }
    }
  }
}
