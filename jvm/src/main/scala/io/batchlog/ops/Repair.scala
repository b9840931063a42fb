package io.batchlog.ops

import scala.collection.mutable

import org.apache.hadoop.fs.{FileStatus, Path}
import org.json4s.JsonDSL._
import org.json4s.jackson.JsonMethods.{compact, render}

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager
import org.apache.spark.sql.execution.streaming.runtime.CompactibleFileStreamLog
import org.apache.spark.sql.execution.streaming.sinks.SinkFileStatus

import io.batchlog.{BatchLogConf, BatchLogException}
import io.batchlog.commit.DataFileNaming
import io.batchlog.log.{BatchTaggedFileStreamSinkLog, LogFiles, LogFormat, SinkLogEntry}

/**
 * Rebuilds a lost or damaged `_spark_metadata` from the data files' batch-tagged names
 * (`part-<split>-batch-<N>-<uuid>...`) and their sizes.
 *
 * The new log has the layout Spark itself leaves after cleanup, for the compact interval in force
 * (the damaged log's, derived from its compact files as Spark does, else the session's
 * `compactInterval`): with M the highest batch found and C the highest compaction batch <= M,
 * `C.compact` holds the files of batches <= C, and `C+1` ... `M` hold each batch's files (empty
 * when a batch wrote none). So the latest batch is M, plain Spark and batchlog read it, and the
 * query continues from its checkpoint (batches <= M are skipped by the sink, as logged).
 *
 * Files whose names carry no batch are reported and left out (never guessed). The new log is
 * written beside the old one and then swapped in: the damaged `_spark_metadata` is renamed to
 * `_spark_metadata.broken-<ts>` (hidden from Spark, like every `_` name), never deleted. Stop the
 * query first.
 *
 * A log whose only problems are damaged index files (`N.compact.index`, see [[Verify]]) is not
 * rebuilt: exactly those indexes are rewritten from a scan of their compact files (atomically), and
 * reported as `indexesRewritten`.
 *
 * Caveat: a batch attempt that failed before committing leaves files with the same batch id as its
 * successful retry; without a surviving log they cannot be told apart. Such batches (two files of
 * one task split in one directory) are reported as `suspectBatches`.
 */
object Repair {

  final case class Plan(
      sink: Path,
      metadataPath: Path,
      logExists: Boolean,
      logHealthy: Boolean,
      logProblems: Seq[String],
      compactInterval: Int,
      files: Seq[(Long, FileStatus)],
      untagged: Seq[FileStatus],
      suspectBatches: Seq[Long],
      indexProblems: Seq[IndexProblem] = Nil
  ) {
    val latestBatch: Long = if (files.isEmpty) -1L else files.map(_._1).max

    /** Log files to write, oldest first: (log batch id, is compact, entries). */
    def logFiles: Seq[(Long, Boolean, Seq[(Long, FileStatus)])] = {
      if (latestBatch < 0) return Nil
      val c = (latestBatch + 1) / compactInterval * compactInterval - 1
      val byBatch = files.groupBy(_._1)
      val compactFile =
        if (c >= 0) Seq((c, true, files.filter(_._1 <= c).sortBy(_._1))) else Nil
      compactFile ++ ((c + 1) to latestBatch).map(b => (b, false, byBatch.getOrElse(b, Nil)))
    }

    def needed: Boolean = !logExists || !logHealthy

    /** The log is sound but for damaged indexes: rewriting them is the whole repair. */
    def indexesOnly: Boolean =
      logExists && indexProblems.nonEmpty && logProblems.length == indexProblems.length

    def toJson(
        result: Option[(Boolean, Option[Path])],
        indexesRewritten: Seq[Path] = Nil
    ): String = compact(render(
      ("sink" -> sink.toString) ~ ("metadataPath" -> metadataPath.toString) ~
        ("logExists" -> logExists) ~ ("logHealthy" -> logHealthy) ~
        ("logProblems" -> logProblems.toList) ~ ("needed" -> needed) ~
        ("compactInterval" -> compactInterval) ~ ("latestBatch" -> latestBatch) ~
        ("dataFiles" -> files.length) ~ ("dataBytes" -> files.map(_._2.getLen).sum) ~
        ("logFiles" -> logFiles.toList.map { case (id, isCompact, entries) =>
          ("name" -> (if (isCompact) s"$id.compact" else id.toString)) ~
            ("entries" -> entries.length) ~
            ("batches" -> entries.map(_._1).distinct.length)
        }) ~
        ("batches" -> files.groupBy(_._1).toList.sortBy(_._1).map { case (b, fs) =>
          ("batchId" -> b) ~ ("files" -> fs.length) ~ ("bytes" -> fs.map(_._2.getLen).sum)
        }) ~
        ("untaggedCount" -> untagged.length) ~
        ("untagged" -> untagged.take(Verify.ListLimit).map(_.getPath.toString).toList) ~
        ("suspectBatches" -> suspectBatches.toList) ~
        ("written" -> result.map(_._1)) ~
        ("movedAside" -> result.flatMap(_._2).map(_.toString)) ~
        ("indexProblems" -> indexProblems.toList.map { p =>
          ("file" -> p.file.toString) ~ ("problem" -> p.problem)
        }) ~
        ("indexesOnly" -> indexesOnly) ~
        ("indexesRewritten" -> indexesRewritten.map(_.toString).toList)
    ))
  }

  def plan(spark: SparkSession, sinkPath: String): Plan = {
    if (sinkPath == null || sinkPath.isEmpty) {
      throw BatchLogException.invalidArgument("path", "''", "give the sink's output directory")
    }
    val hadoopConf = spark.sessionState.newHadoopConf()
    val out = new Path(sinkPath)
    val fs = out.getFileSystem(hadoopConf)
    if (!fs.exists(out) || !fs.getFileStatus(out).isDirectory) {
      throw BatchLogException.invalidArgument("path", sinkPath, "it is not a directory")
    }
    val sink = fs.makeQualified(out)
    val meta = new Path(sink, BatchTaggedFileStreamSinkLog.MetadataDir)
    val logExists = fs.exists(meta)

    var interval = BatchLogConf.sinkLogSettings(spark).compactInterval
    val problems = mutable.ArrayBuffer.empty[String]
    var loggedLatest = -1L
    var indexProblems: Seq[IndexProblem] = Nil
    if (logExists) {
      if (!fs.getFileStatus(meta).isDirectory) problems += s"$meta is not a directory"
      else {
        val log = new BatchTaggedFileStreamSinkLog(spark, meta.toString)
        interval = log.interval
        val report = Verify.run(spark, sinkPath)
        loggedLatest = report.latestBatch
        problems ++= report.logErrors
        if (report.missing.nonEmpty) problems += s"${report.missing.length} logged files missing"
        if (report.sizeMismatch.nonEmpty) {
          problems += s"${report.sizeMismatch.length} logged files have another size"
        }
        if (report.wrongBatch.nonEmpty) {
          problems += s"${report.wrongBatch.length} entries logged under another batch"
        }
        indexProblems = report.indexProblems
      }
    }

    val files = mutable.ArrayBuffer.empty[(Long, FileStatus)]
    val untagged = mutable.ArrayBuffer.empty[FileStatus]
    OutputFiles.foreachDataFile(fs, sink) { f =>
      DataFileNaming.batchIdOf(f.getPath.getName) match {
        case Some(b) => files += ((b, f))
        case None => untagged += f
      }
    }
    val sorted = files.sortBy(f => (f._1, f._2.getPath.toString)).toSeq
    if (logExists && problems.isEmpty && loggedLatest < 0 && sorted.nonEmpty) {
      problems += s"$meta holds no log files but the output holds ${sorted.length} data files"
    }
    val suspect = sorted.groupBy(_._1).filter(b => twoAttempts(b._2.map(_._2))).keys.toSeq.sorted
    problems ++= indexProblems.map(p => s"${p.file} is not used: ${p.problem}")
    Plan(
      sink,
      meta,
      logExists,
      logExists && problems.isEmpty,
      problems.toSeq,
      interval,
      sorted,
      untagged.toSeq,
      suspect,
      indexProblems
    )
  }

  private val splitOf = "^part-([0-9]+)-batch-".r.unanchored

  /**
   * True if one batch's files come from more than one attempt of a task: two files of the same task
   * split in the same directory with different uuids (one task writes one uuid).
   */
  private def twoAttempts(files: Seq[FileStatus]): Boolean = {
    val byTask = files.groupBy { f =>
      (f.getPath.getParent, splitOf.findFirstMatchIn(f.getPath.getName).map(_.group(1)))
    }
    byTask.values.exists(fs => fs.map(f => uuidOf(f.getPath.getName)).distinct.length > 1)
  }

  private val uuidRe = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}".r

  private def uuidOf(name: String): String = uuidRe.findFirstIn(name).getOrElse(name)

  /**
   * Plans and, unless `dryRun` or the log is healthy (and `force` is false), rebuilds the log.
   * JSON: the plan plus `written` and `movedAside`.
   */
  def run(
      spark: SparkSession,
      sinkPath: String,
      dryRun: Boolean,
      force: Boolean,
      quiet: Boolean
  ): String = {
    val p = plan(spark, sinkPath)
    if (p.indexesOnly && !force) return rewriteIndexes(spark, p, dryRun)
    if (dryRun || (!p.needed && !force)) return p.toJson(Some((false, None)))
    val progress = new Progress("repair: log files", quiet)
    val hadoopConf = spark.sessionState.newHadoopConf()
    val fs = p.sink.getFileSystem(hadoopConf)
    val ts = System.currentTimeMillis()
    val staging = new Path(p.sink, s"${BatchTaggedFileStreamSinkLog.MetadataDir}.repair-$ts")
    val fm = CheckpointFileManager.create(staging, hadoopConf)
    fm.mkdirs(staging)
    val toWrite = p.logFiles
    toWrite.zipWithIndex.foreach { case ((id, isCompact, entries), i) =>
      val name = if (isCompact) s"$id${CompactibleFileStreamLog.COMPACT_FILE_SUFFIX}" else s"$id"
      LogFiles.writeAtomic(fm, new Path(staging, name), overwrite = false) { w =>
        entries.foreach { case (b, f) =>
          LogFiles.writeLine(w, LogFormat.encode(SinkLogEntry(SinkFileStatus(f), b)))
        }
      }
      progress.step(i + 1, toWrite.length)
    }
    val aside =
      if (p.logExists) {
        val broken = new Path(p.sink, s"${BatchTaggedFileStreamSinkLog.MetadataDir}.broken-$ts")
        if (!fs.rename(p.metadataPath, broken)) {
          throw new java.io.IOException(s"Could not rename ${p.metadataPath} to $broken")
        }
        Some(broken)
      } else None
    if (!fs.rename(staging, p.metadataPath)) {
      throw new java.io.IOException(s"Could not rename $staging to ${p.metadataPath}")
    }
    aside.foreach(b => progress.note(s"the damaged log was moved to $b"))
    p.toJson(Some((true, aside)))
  }

  /** Rewrites (unless `dryRun`) exactly the damaged indexes of `p`, each from its compact file. */
  private def rewriteIndexes(spark: SparkSession, p: Plan, dryRun: Boolean): String = {
    if (dryRun) return p.toJson(Some((false, None)))
    val log = new BatchTaggedFileStreamSinkLog(spark, p.metadataPath.toString)
    p.indexProblems.foreach(ip => log.writeIndex(ip.compactId))
    p.toJson(Some((false, None)), p.indexProblems.map(_.file))
  }
}
