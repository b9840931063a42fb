package io.batchlog.ops

import scala.collection.mutable

import org.apache.hadoop.fs.{FileSystem, Path}
import org.json4s.JsonAST.JObject
import org.json4s.JsonDSL._
import org.json4s.jackson.JsonMethods.{compact, render}

import org.apache.spark.paths.SparkPath
import org.apache.spark.sql.SparkSession

import io.batchlog.BatchLogException
import io.batchlog.log.{
  BatchTaggedFileStreamSinkLog,
  CompactIndex,
  DataFileNaming,
  LogLayout,
  SinkLogEntry,
  SinkRecord
}

/** An index file beside a live compact file that is not used, and why. */
final case class IndexProblem(file: Path, compactId: Long, problem: String)

/** A data file in the output directory that the log does not list. */
final case class OrphanFile(path: Path, size: Long, modificationTime: Long, batchId: Option[Long])

/**
 * Checks a sink's log against its output directory, changing nothing: every live logged file must
 * exist with the logged size and (when both are known) the batch in its name must equal its logged
 * batch; every log file the log needs must be readable. Data files in the output that the log does
 * not list are reported as orphans: plain Spark reading through the log never sees them (a crashed
 * or failed batch leaves them), but globs and other engines do; `vacuum` deletes old ones.
 *
 * Every index file beside a live compact file (`N.compact.index`) is proved and each of its runs
 * checked against the compact file's bytes; one that fails is an `indexProblem`. Readers do not use
 * it (they rebuild the index in memory) and compaction never copies through it, so no read is
 * wrong, but every read of the sink pays a scan of the compact file until `repair` rewrites it. A
 * missing or legacy (v1) index is not a problem: it is counted as rebuilt in memory.
 *
 * Healthy means: reading the sink through its log returns exactly the logged files, and every index
 * present is proved. Orphans alone do not make a sink unhealthy.
 */
object Verify {

  /** At most this many paths of each kind are listed in a report (counts are always complete). */
  val ListLimit = 1000

  final case class Report(
      sink: Path,
      metadataPath: Path,
      latestBatch: Long,
      compactInterval: Int,
      liveFiles: Long,
      liveBytes: Long,
      untaggedEntries: Long,
      missing: Seq[SinkLogEntry],
      sizeMismatch: Seq[(SinkLogEntry, Long)],
      wrongBatch: Seq[(SinkLogEntry, Long)],
      orphans: Seq[OrphanFile],
      logErrors: Seq[String],
      indexProblems: Seq[IndexProblem] = Nil,
      indexesRebuiltInMemory: Int = 0
  ) {
    def healthy: Boolean =
      missing.isEmpty && sizeMismatch.isEmpty && wrongBatch.isEmpty && logErrors.isEmpty &&
        indexProblems.isEmpty

    def toJson: String = {
      def entry(e: SinkLogEntry): JObject =
        ("path" -> e.path) ~ ("size" -> e.size) ~ ("batchId" -> e.batchId)
      compact(render(
        ("sink" -> sink.toString) ~ ("metadataPath" -> metadataPath.toString) ~
          ("healthy" -> healthy) ~ ("latestBatch" -> latestBatch) ~
          ("compactInterval" -> compactInterval) ~ ("liveFiles" -> liveFiles) ~
          ("liveBytes" -> liveBytes) ~ ("untaggedEntries" -> untaggedEntries) ~
          ("logErrors" -> logErrors.toList) ~
          ("indexProblems" -> indexProblems.toList.map { p =>
            ("file" -> p.file.toString) ~ ("problem" -> p.problem)
          }) ~
          ("indexAdvice" -> (if (indexProblems.isEmpty) None else Some(IndexAdvice))) ~
          ("indexesRebuiltInMemory" -> indexesRebuiltInMemory) ~
          ("missingCount" -> missing.length) ~
          ("missing" -> missing.take(ListLimit).map(entry).toList) ~
          ("sizeMismatchCount" -> sizeMismatch.length) ~
          ("sizeMismatch" -> sizeMismatch.take(ListLimit).toList.map { case (e, actual) =>
            entry(e) ~ ("actualSize" -> actual)
          }) ~
          ("wrongBatchCount" -> wrongBatch.length) ~
          ("wrongBatch" -> wrongBatch.take(ListLimit).toList.map { case (e, named) =>
            entry(e) ~ ("nameBatchId" -> named)
          }) ~
          ("orphanCount" -> orphans.length) ~ ("orphanBytes" -> orphans.map(_.size).sum) ~
          ("orphans" -> orphans.take(ListLimit).toList.map { o =>
            ("path" -> o.path.toString) ~ ("size" -> o.size) ~ ("batchId" -> o.batchId) ~
              ("modificationTime" -> o.modificationTime)
          })
      ))
    }
  }

  /** What to do about an index problem, and what it means until then. */
  val IndexAdvice: String =
    "`python -m batchlog repair <sink>` rewrites the damaged index from its compact file; until " +
      "then readers rebuild it in memory (a scan of the compact file) and compaction " +
      "never copies through it."

  /**
   * Checks the index of every live compact file: (problems, number of live compact files without a
   * usable index, whose index readers rebuild in memory: missing or legacy ones).
   */
  def indexes(log: BatchTaggedFileStreamSinkLog): (Seq[IndexProblem], Int) = {
    val problems = mutable.ArrayBuffer.empty[IndexProblem]
    var inMemory = 0
    log.liveLogBatchIds().filter(log.isCompactFile).foreach { id =>
      val indexFile = CompactIndex.pathOf(log.logFilePath(id))
      log.indexProblem(id) match {
        case None =>
        case Some(CompactIndex.AbsentReason | CompactIndex.LegacyReason) => inMemory += 1
        case Some(p) => problems += IndexProblem(indexFile, id, p)
      }
    }
    (problems.toSeq, inMemory)
  }

  /** The key under which a logged path and a listed data file compare equal. */
  def key(p: Path): String = p.toUri.getPath

  def entryPath(e: SinkLogEntry): Path = SparkPath.fromUrlString(e.path).toPath

  /** Every data file under `sink` not in `logged` (keys from [[key]]). */
  def orphans(fs: FileSystem, sink: Path, logged: collection.Set[String]): Seq[OrphanFile] = {
    val out = mutable.ArrayBuffer.empty[OrphanFile]
    OutputFiles.foreachDataFile(fs, sink) { f =>
      if (!logged.contains(key(f.getPath))) {
        out += OrphanFile(
          f.getPath,
          f.getLen,
          f.getModificationTime,
          DataFileNaming.batchIdOf(f.getPath.getName)
        )
      }
    }
    out.toSeq
  }

  def run(spark: SparkSession, sinkPath: String): Report = {
    val meta = BatchTaggedFileStreamSinkLog.metadataPathOf(spark, sinkPath)
    val sink = meta.getParent
    val fs = sink.getFileSystem(spark.sessionState.newHadoopConf())
    val log = new BatchTaggedFileStreamSinkLog(spark, meta.toString)
    val latest = log.getLatestBatchId().getOrElse(-1L)
    val logged = mutable.HashSet.empty[String]
    val missing = mutable.ArrayBuffer.empty[SinkLogEntry]
    val sizeMismatch = mutable.ArrayBuffer.empty[(SinkLogEntry, Long)]
    val wrongBatch = mutable.ArrayBuffer.empty[(SinkLogEntry, Long)]
    val logErrors = mutable.ArrayBuffer.empty[String]
    var liveFiles, liveBytes, untagged = 0L
    try {
      log.foreachLiveEntry { e =>
        val p = entryPath(e)
        logged += key(p)
        liveFiles += 1
        liveBytes += e.size
        if (e.batchId.isEmpty) untagged += 1
        val named = DataFileNaming.batchIdOf(p.getName)
        for (b <- e.batchId; n <- named if b != n) wrongBatch += ((e, n))
        if (e.batchId.exists(_ > latest)) {
          logErrors += s"${e.path} is logged with batch ${e.batchId.get}, after the latest " +
            s"batch $latest"
        }
        if (!fs.exists(p)) missing += e
        else {
          val actual = fs.getFileStatus(p).getLen
          if (actual != e.size) sizeMismatch += ((e, actual))
        }
      }
    } catch {
      case e: BatchLogException => logErrors += e.getMessage
    }
    // The layout must fit the interval of the query that writes the sink (its record), or that
    // query fails at its next compaction for want of a compact file. (A log that could not be
    // read has said why already.)
    val fm = log.checkpointFileManager
    if (logErrors.isEmpty) {
      try SinkRecord.read(fm, meta).foreach { r =>
          logErrors ++= LogLayout.misfit(fm, meta, r.compactInterval, "the sink record's")
        }
      catch { case e: BatchLogException => logErrors += e.getMessage }
    }
    // With an unreadable log, every data file would look orphaned: list none rather than mislead.
    val orphanFiles = if (logErrors.isEmpty) orphans(fs, sink, logged) else Nil
    val (indexProblems, inMemory) =
      try indexes(log)
      catch { case e: BatchLogException => logErrors += e.getMessage; (Nil, 0) }
    Report(
      sink,
      meta,
      latest,
      log.interval,
      liveFiles,
      liveBytes,
      untagged,
      missing.toSeq,
      sizeMismatch.toSeq,
      wrongBatch.toSeq,
      orphanFiles,
      logErrors.toSeq,
      indexProblems,
      inMemory
    )
  }
}
