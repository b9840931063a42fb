package io.batchlog.ops

import scala.collection.mutable

import java.io.FileNotFoundException

import org.apache.hadoop.fs.{FileStatus, FileSystem, Path}

import org.apache.spark.paths.SparkPath
import org.apache.spark.sql.SparkSession

import io.batchlog.BatchLogException
import io.batchlog.log.{
  BatchTaggedFileStreamSinkLog,
  CompactIndex,
  DataFileNaming,
  IndexCheck,
  JsonRecordFile,
  LogLayout,
  OpenUploads,
  SinkLogEntry,
  SinkRecord
}

/**
 * Checks a sink's log against its output directory, changing nothing: every live logged file must
 * exist with the logged size and (when both are known) the batch in its name must equal its logged
 * batch; every log file the log needs must be readable. Data files in the output that the log does
 * not list are reported as orphans: plain Spark reading through the log never sees them (a crashed
 * or failed batch leaves them), but globs and other engines do; `vacuum` deletes old ones.
 *
 * Every index file beside a live compact file (`N.compact.index`) is proved; one that is not is an
 * `indexProblem`. Readers do not use it (they rebuild the index in memory) and compaction never
 * copies through it, so no read is wrong, but every read of the sink pays a scan of the compact
 * file until `repair` rewrites it. A missing or legacy (v1) index is not a problem: it is counted
 * as rebuilt in memory.
 *
 * A compact file whose index is proved (so it keeps the name, length and modification time the
 * index records) but some of whose runs do not match their CRC32C is damaged: a compact file is
 * written once, so that is bit rot or an edit in place, never a newer version. Every compact file
 * present with an index is checked (lookups of one batch read older compact files through theirs);
 * each damaged one is a log error (the `CORRUPT_LOG` text compaction and readers fail with) and its
 * runs are listed in `damagedRuns`, which `repair` restores. The entries of a damaged run are not
 * checked against the data files (what they say is not to be trusted; a wrong path or size there is
 * the damage itself), but the files they name are not orphans.
 *
 * Every entry must lie inside the output directory ([[SinkBoundary]]): one that does not is
 * *foreign* (reported by path and reason, never looked at), and rewind and vacuum refuse to act
 * while the log holds one. Orphans are files named as data files only
 * ([[io.batchlog.log.DataFileNaming.isDataFileName]]); the walk follows no link. Links, other files
 * and checkpoints found inside the output are reported, not judged.
 *
 * Healthy means: reading the sink through its log returns exactly the logged files, all inside the
 * output, and every index present is proved. Orphans alone do not make a sink unhealthy.
 *
 * Cost on an object store: the output is walked once, first (one LIST a 1,000 keys), and each live
 * entry is checked against that listing; only an entry the walk did not see (a file committed
 * since, a name not a data file's) is asked for by itself, one request. Before, every live file
 * cost two (an existence check, then its status): 5,800 requests for a sink of 2,900 files. The log
 * is read as one listing of `_spark_metadata/` and `_batchlog/` saw it
 * ([[io.batchlog.log.ListedOnce]]), and each log file is read once, whole: the live compact file's
 * runs are checked in the read that gives its entries. So a sink costs 13 requests and its log's
 * bytes once, plus a LIST a 1,000 files and two GETs an older compact file still present.
 */
object Verify {

  /** A data file in the output directory that the log does not list (path as listed). */
  final case class Orphan(path: Path, size: Long, modificationTime: Long, batchId: Option[Long]) {
    def report: OrphanFile = OrphanFile(path.toString, size, batchId, modificationTime)
  }

  /** The longest run of a compact file verify holds whole to read it once (one batch's lines). */
  val RunBytes: Long = 64L << 20

  /** What to do about an index problem, and what it means until then. */
  val IndexAdvice: String =
    "`python -m batchlog repair <sink>` rewrites the damaged index from its compact file; until " +
      "then readers rebuild it in memory (a scan of the compact file) and compaction " +
      "never copies through it."

  /** What [[indexes]] found. */
  final case class IndexFindings(
      problems: Seq[IndexProblem],
      inMemory: Int,
      damaged: Seq[DamagedRun],
      damageErrors: Seq[String]
  )

  /**
   * Checks the index of every live compact file: its problems and the number of live compact files
   * without a usable index, whose index readers rebuild in memory (missing or legacy ones); and
   * every compact file present against its index, for damage (see above). `checked`: a compact
   * file's check made already (the live one's, made as its entries were read).
   */
  def indexes(
      log: BatchTaggedFileStreamSinkLog,
      checked: Option[(Long, IndexCheck)] = None
  ): IndexFindings = {
    val problems = mutable.ArrayBuffer.empty[IndexProblem]
    val damaged = mutable.ArrayBuffer.empty[DamagedRun]
    val errors = mutable.ArrayBuffer.empty[String]
    var inMemory = 0
    val live = log.liveLogBatchIds().filter(log.isCompactFile).toSet
    val ids =
      (live ++ LogLayout.compactIds(log.reads, log.metadataPath)).toSeq.sorted
    ids.foreach { id =>
      val indexFile = CompactIndex.pathOf(log.logFilePath(id))
      checked.filter(_._1 == id).map(_._2).orElse(log.checkIndex(id)) match {
        case Some(IndexCheck.Unused(why)) if CompactIndex.isExpectedReason(why) && live(id) =>
          inMemory += 1
        case Some(IndexCheck.Unused(why)) if live(id) =>
          problems += IndexProblem(indexFile.toString, id, why)
        case Some(IndexCheck.Damaged(_, runs)) =>
          errors += log.damageError(id, runs).getMessage
          damaged ++= runs.map { r =>
            DamagedRun(log.logFilePath(id).toString, id, r.batchId, r.offset, r.length, r.count)
          }
        case _ =>
      }
    }
    IndexFindings(problems.toSeq, inMemory, damaged.toSeq, errors.toSeq)
  }

  /** The key under which a logged path and a listed data file compare equal. */
  def key(p: Path): String = p.toUri.getPath

  def entryPath(e: SinkLogEntry): Path = SparkPath.fromUrlString(e.path).toPath

  /**
   * Every data file under `sink` not in `logged` (keys from [[key]]), and what else the walk met
   * (links, other files, checkpoints inside the output: see [[OutputFiles]]).
   */
  def orphans(
      fs: FileSystem,
      sink: Path,
      logged: collection.Set[String]
  ): (Seq[Orphan], OutputFiles.Extras) = {
    val (listed, extras) = dataFiles(fs, sink)
    (orphansOf(listed, logged), extras)
  }

  /** Every data file under `sink` by [[key]], in the walk's order, and what else the walk met. */
  def dataFiles(
      fs: FileSystem,
      sink: Path
  ): (collection.Map[String, FileStatus], OutputFiles.Extras) = {
    val listed = mutable.LinkedHashMap.empty[String, FileStatus]
    val extras = OutputFiles.foreachDataFile(fs, sink)(f => listed(key(f.getPath)) = f)
    (listed, extras)
  }

  /** The files of `listed` not in `logged`, in the walk's order. */
  def orphansOf(
      listed: collection.Map[String, FileStatus],
      logged: collection.Set[String]
  ): Seq[Orphan] =
    listed.iterator.collect {
      case (k, f) if !logged.contains(k) =>
        Orphan(
          f.getPath,
          f.getLen,
          f.getModificationTime,
          DataFileNaming.batchIdOf(f.getPath.getName)
        )
    }.toSeq

  /** Fails with FOREIGN_PATH, naming the first of `foreign`, unless it is empty. */
  def refuseForeign(op: String, sink: Path, foreign: Seq[ForeignEntry]): Unit =
    if (foreign.nonEmpty) {
      throw BatchLogException.foreignPath(
        op,
        sink.toString,
        foreign.length,
        foreign.take(SinkBoundary.Examples).map(f => f.path -> f.reason)
      )
    }

  def run(spark: SparkSession, sinkPath: String): VerifyReport =
    run(BatchTaggedFileStreamSinkLog.listedOnce(spark, sinkPath), None)

  /**
   * Verifies the sink of `log` (one built with a [[io.batchlog.log.ListedOnce]] listing), with the
   * walk of its output already made (`walked`, from [[dataFiles]]), or made here first.
   */
  def run(
      log: BatchTaggedFileStreamSinkLog,
      walked: Option[(collection.Map[String, FileStatus], OutputFiles.Extras)]
  ): VerifyReport = {
    val meta = log.metadataPath
    val sink = meta.getParent
    val fs = log.fileSystem
    val logged = mutable.HashSet.empty[String]
    val missing = mutable.ArrayBuffer.empty[SinkLogEntry]
    val sizeMismatch = mutable.ArrayBuffer.empty[(SinkLogEntry, Long)]
    val wrongBatch = mutable.ArrayBuffer.empty[(SinkLogEntry, Long)]
    val logErrors = mutable.ArrayBuffer.empty[String]
    val foreign = mutable.ArrayBuffer.empty[ForeignEntry]
    val boundary = new SinkBoundary(fs, sink)
    var liveFiles, liveBytes, untagged = 0L
    val indexErrors = mutable.ArrayBuffer.empty[String]
    // The walk first: a file a running writer commits after it is logged when the log is read,
    // so it is no orphan, and is asked for by itself (not in the listing), so it is not missing.
    val (listed, extras) = walked.getOrElse(dataFiles(fs, sink))
    val latest = log.getLatestBatchId().getOrElse(-1L)
    def check(e: SinkLogEntry): Unit = {
      val p = entryPath(e)
      val named = DataFileNaming.batchIdOf(p.getName)
      for (b <- e.batchId; n <- named if b != n) wrongBatch += ((e, n))
      if (e.batchId.exists(_ > latest)) {
        logErrors += s"${e.path} is logged with batch ${e.batchId.get}, after the latest " +
          s"batch $latest"
      }
      boundary.foreignEntry(e) match {
        case Some(f) => foreign += f // never looked at: not the sink's file
        case None =>
          listed.get(key(p)).orElse(statusOf(fs, p)) match {
            case None => missing += e
            case Some(st) => if (st.getLen != e.size) sizeMismatch += ((e, st.getLen))
          }
      }
    }
    // The live compact file is checked for damage in the read that gives its entries, so it is
    // read once; the entries of a damaged run are not to be trusted, so not checked.
    var liveChecked: Option[(Long, IndexCheck)] = None
    try {
      liveChecked = log.foreachLiveEntryChecked(RunBytes) { (e, sound) =>
        val p = entryPath(e)
        logged += key(p)
        liveFiles += 1
        liveBytes += e.size
        if (e.batchId.isEmpty) untagged += 1
        if (sound) check(e)
      }
    } catch {
      case e: BatchLogException => logErrors += e.getMessage
    }
    val found =
      try indexes(log, liveChecked)
      catch {
        case e: BatchLogException => indexErrors += e.getMessage; IndexFindings(Nil, 0, Nil, Nil)
      }
    // The layout must fit the interval of the query that writes the sink (its record), or that
    // query fails at its next compaction for want of a compact file. (A log that could not be
    // read has said why already.)
    val fm = log.reads
    if (logErrors.isEmpty) {
      try SinkRecord.read(fm, meta).foreach { r =>
          logErrors ++= LogLayout.misfit(fm, meta, r.compactInterval, "the sink record's")
        }
      catch { case e: BatchLogException => logErrors += e.getMessage }
    }
    // With an unreadable log, every data file would look orphaned: list none rather than mislead.
    val orphanFiles = if (logErrors.isEmpty) orphansOf(listed, logged) else Nil
    logErrors ++= indexErrors
    logErrors ++= found.damageErrors
    val indexProblems = found.problems
    def loggedFile(e: SinkLogEntry) = LoggedFile(e.path, e.size, e.batchId)
    val limit = Reports.ListLimit
    VerifyReport(
      sink.toString,
      meta.toString,
      healthy = missing.isEmpty && sizeMismatch.isEmpty && wrongBatch.isEmpty &&
        logErrors.isEmpty && indexProblems.isEmpty && foreign.isEmpty,
      latest,
      log.interval,
      liveFiles,
      liveBytes,
      untagged,
      logErrors.toSeq,
      indexProblems,
      if (indexProblems.isEmpty) None else Some(IndexAdvice),
      found.inMemory,
      found.damaged,
      missing.length,
      missing.take(limit).map(loggedFile).toSeq,
      sizeMismatch.length,
      sizeMismatch.take(limit).map { case (e, actual) =>
        SizeMismatch(e.path, e.size, e.batchId, actual)
      }.toSeq,
      wrongBatch.length,
      wrongBatch.take(limit).map { case (e, named) =>
        WrongBatch(e.path, e.size, e.batchId, named)
      }.toSeq,
      orphanFiles.length,
      orphanFiles.map(_.size).sum,
      orphanFiles.take(limit).map(_.report),
      foreign.length,
      foreign.take(limit).toSeq,
      extras.links.take(limit).map(_.toString).toSeq,
      extras.checkpoints.map(_.toString),
      extras.otherCount,
      openUploads(fs, meta).map(OpenUpload(_))
    )
  }

  /** The status of `p`, or None if there is no such file: one request. */
  private def statusOf(fs: FileSystem, p: Path): Option[FileStatus] =
    try Some(fs.getFileStatus(p))
    catch { case _: FileNotFoundException => None }

  /**
   * The multipart uploads open under the sink's `_spark_metadata/` and `_batchlog/` (S3A; none
   * elsewhere), oldest first ([[OpenUploads]]): one listing of the sink's uploads (one request a
   * 1,000 uploads), not one a directory.
   */
  def openUploads(fs: FileSystem, meta: Path): Seq[OpenUploads.Open] = {
    val dirs = Seq(meta, new Path(meta.getParent, JsonRecordFile.RecordDir))
      .map(d => fs.makeQualified(d).toUri.getPath.stripSuffix("/") + "/")
    OpenUploads.list(fs, Seq(meta.getParent)).getOrElse(Nil)
      .filter(o => dirs.exists(o.path.toUri.getPath.startsWith))
  }
}
