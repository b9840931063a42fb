package io.batchlog.log

import org.apache.hadoop.fs.Path

import io.batchlog.shim.CheckpointFileManager
import io.batchlog.shim.CompactibleFileStreamLog._

/**
 * Which log files a compactible log directory holds and which compact interval they imply, read
 * from a listing alone (Spark's rules, for the sink log and the file-source log alike).
 */
object LogLayout {

  /** Log file ids present in `dir` (ignoring other names, `.crc` files included), ascending. */
  def listIds(fm: CheckpointFileManager, dir: Path): Seq[Long] =
    if (!fm.exists(dir)) Nil
    else
      fm.list(dir).toSeq.flatMap { f =>
        try Some(getBatchIdFromFileName(f.getPath.getName))
        catch { case _: NumberFormatException => None }
      }.sorted

  /** Ids of the compact files present in `dir`, newest first. */
  def compactIds(fm: CheckpointFileManager, dir: Path): Seq[Long] =
    if (!fm.exists(dir)) Nil
    else
      fm.list(dir).map(_.getPath.getName).filter(isCompactName)
        .flatMap(n => scala.util.Try(getBatchIdFromFileName(n)).toOption)
        .sorted(Ordering.Long.reverse).toSeq

  /**
   * The compact files of a log and the interval they imply, Spark's own rule: the gap between the
   * two newest, else derived from the one there is (with `default`, the session's setting), else
   * none (no compact file: the session's setting will decide).
   */
  def intervalOf(fm: CheckpointFileManager, dir: Path, default: Int): (Seq[Long], Option[Int]) = {
    val ids = compactIds(fm, dir)
    ids -> (if (ids.isEmpty) None else Some(derivedInterval(ids, default)))
  }

  /**
   * The interval Spark derives for a log whose compact files are `compactIds` (newest first): the
   * gap between the two newest, else `deriveCompactInterval(default, c)` from the one there is,
   * else `default`.
   */
  def derivedInterval(compactIds: Seq[Long], default: Int): Int = compactIds match {
    case a +: b +: _ => (a - b).toInt
    case Seq(a) => deriveCompactInterval(default, a.toInt)
    case _ => default
  }

  /**
   * The newest `n` compaction batches at or below `latest` for `interval`, oldest first (Spark's
   * schedule: the one before [[CompactibleFileStreamLog.nextCompactionBatchId]]).
   */
  def lastCompactions(latest: Long, interval: Int, n: Int): Seq[Long] = {
    val newest = nextCompactionBatchId(latest, interval) - interval
    (0 until n).map(i => newest - i.toLong * interval).filter(_ >= 0).reverse
  }

  /** The name of log file `id`: `N.compact` for a compact file, else `N` (Spark's naming). */
  def fileName(id: Long, isCompact: Boolean): String =
    if (isCompact) s"$id$COMPACT_FILE_SUFFIX" else id.toString

  /** The name of log file `id` in a log compacted every `interval` batches. */
  def fileName(id: Long, interval: Int): String = fileName(id, isCompactionBatch(id, interval))

  /**
   * The batch of log file `name` (`N` or `N.compact`), or of the compact index beside one; None for
   * any other name. Read from the characters, not by catching a parse error: a sweep of the log
   * reads every name in it, every batch.
   */
  def idOfName(name: String): Option[Long] = {
    val log = name.stripSuffix(CompactIndex.Suffix).stripSuffix(COMPACT_FILE_SUFFIX)
    if (log.isEmpty || log.length > 18 || !log.forall(c => c >= '0' && c <= '9')) None
    else Some(log.toLong)
  }

  /** True for a compact file's name (`N.compact`). */
  def isCompactName(name: String): Boolean = name.endsWith(COMPACT_FILE_SUFFIX)

  /**
   * Why the log in `dir` does not fit `interval` (from `source`), if it does not: compact files off
   * that interval's compaction batches, or files a query with that interval needs to read its
   * latest batch (and to compact the next time) that are not there. Either makes that query fail.
   */
  def misfit(
      fm: CheckpointFileManager,
      dir: Path,
      interval: Int,
      source: String
  ): Option[String] = {
    val names =
      if (!fm.exists(dir)) Set.empty[String] else fm.list(dir).map(_.getPath.getName).toSet
    def nameOf(id: Long) = fileName(id, interval)
    val ids = listIds(fm, dir)
    val offInterval = compactIds(fm, dir).filterNot(c => isCompactionBatch(c, interval)).reverse
    val missing = ids.lastOption.toSeq
      .flatMap(latest => getAllValidBatches(latest, interval)).map(nameOf).filterNot(names)
    if (offInterval.isEmpty && missing.isEmpty) None
    else {
      val why = Seq(
        if (missing.isEmpty) None else Some(s"it lacks ${missing.mkString(", ")}"),
        if (offInterval.isEmpty) None
        else Some(
          s"its ${offInterval.map(fileName(_, isCompact = true)).mkString(", ")} fall off " +
            "that interval's compaction batches"
        )
      ).flatten.mkString(" and ")
      Some(
        s"the log does not fit compact interval $interval ($source): $why, so the query " +
          "would fail reading or compacting it"
      )
    }
  }

  /**
   * Why the log in `dir` does not read at every compact interval, if it does not. It does when its
   * interval is fixed by the log itself: two compact files or more (their gap; the layout must fit
   * it, see [[misfit]]), or one, of its newest batch (every interval derived from `L.compact`
   * divides L+1, see `deriveCompactInterval`). A log ending in a batch file with fewer than two
   * compact files reads only at the intervals of the query that wrote it.
   */
  def misfitAnyInterval(fm: CheckpointFileManager, dir: Path): Option[String] = {
    val compacts = compactIds(fm, dir)
    listIds(fm, dir).lastOption.flatMap { latest =>
      if (compacts.length >= 2) {
        misfit(fm, dir, derivedInterval(compacts, 1), "its two newest compact files'")
      } else if (compacts == Seq(latest)) None
      else Some(
        s"the log ends in batch file $latest with ${compacts.length} compact file(s), so its " +
          "compact interval cannot be told from it, and nothing records the query's: a query or " +
          "reader of another interval than the writer's fails on it"
      )
    }
  }
}
