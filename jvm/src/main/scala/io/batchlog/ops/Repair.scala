package io.batchlog.ops

import scala.collection.mutable

import org.apache.hadoop.fs.{FileStatus, FileSystem, Path}

import org.apache.spark.sql.SparkSession
import io.batchlog.shim.CheckpointFileManager

import io.batchlog.{BatchLogConf, BatchLogException}
import io.batchlog.Compat._
import io.batchlog.log.{
  BatchTaggedFileStreamSinkLog,
  DataFileNaming,
  JsonRecordFile,
  ListedOnce,
  LogLayout,
  RepairIntent,
  RewindIntent,
  SinkRecord
}
import io.batchlog.shim.CompactibleFileStreamLog.deriveCompactInterval

/**
 * Rebuilds a lost or damaged `_spark_metadata` from the data files' batch-tagged names
 * (`part-<split>-batch-<N>-<uuid>...`) and their sizes.
 *
 * The new log must be one the restarting query reads and continues. With M the newest batch (of the
 * data files, or of the log files still in `_spark_metadata`, whichever is newer):
 *
 *   - when the query's compact interval is known, the log is laid out for it. It is known from
 *     (first that exists): the `compact_interval` argument; the sink's record
 *     (`_batchlog/_batchlog-sink.json`, where the writing query keeps its interval; for sinks of
 *     earlier versions in the damaged log or in the newest `_spark_metadata.broken-*` a previous
 *     repair left); two compact files there (their gap, Spark's own rule). With C the highest
 *     compaction batch <= M, the new log holds `(C - interval).compact` and `C.compact` (each with
 *     the files of the batches up to it), then `C+1` ... `M` (each batch's files, empty when a
 *     batch wrote none): two compact files, so that Spark and batchlog derive the interval from the
 *     log itself whatever their session's default, as Spark's own cleanup leaves it;
 *   - when it is not, the new log is one file, `M.compact`, holding every file. A log whose only
 *     compact file is `M.compact` reads and continues at every configured interval: Spark
 *     (`CompactibleFileStreamLog.compactInterval`, and batchlog's log, which is one) then takes the
 *     interval from that file, `deriveCompactInterval(configured, M)`, which always divides M+1
 *     (M+1 itself if it is at most the configured one, else the smallest divisor of M+1 from the
 *     configured one up to (M+1)/2, else M+1), so M is a compaction batch, a read of M reads
 *     `M.compact` alone, and the next compaction (M + interval) reads `M.compact` and the batch
 *     files after it. Nothing is recorded as the query's interval: the restarted query records the
 *     one it derives. (The interval may come out larger than the configured one, M+1 at worst.)
 *
 * The record keeps the interval and the owner, with the epoch moved on so that a writer still
 * running against the old log fails before it commits.
 *
 * Files whose names carry no batch are reported and left out (never guessed). Only files inside the
 * output named as data files count ([[OutputFiles]]: no link followed, no user file or checkpoint
 * taken for data); a log naming files outside the output ([[SinkBoundary]]) is unhealthy and its
 * rebuild leaves them out, touching nothing outside. The new log replaces the old one file by file
 * inside `_spark_metadata`, which never disappears ([[RepairSwap]]); the old log files are copied
 * to `_spark_metadata.broken-<ts>` (hidden from Spark, like every `_` name) first, never deleted.
 * Stop the query first.
 *
 * A log whose only problems are damaged index files (`N.compact.index`, see [[Verify]]) is not
 * rebuilt: exactly those indexes are rewritten from a scan of their compact files (atomically), and
 * reported as `indexesRewritten`. Likewise a log whose only problems are damaged runs of compact
 * files (bytes that no longer match the CRC32C their proved index records, see [[Verify]]) is not
 * rebuilt: [[RestoreRuns]] restores exactly those batches' entries, from their batch files or the
 * data files named with their batch, reported as `runsRestored` (with the source of each); a run it
 * cannot restore makes the repair a rebuild of the whole log, the plan saying why.
 *
 * Caveat: a batch attempt that failed before committing leaves files with the same batch id as its
 * successful retry; without a surviving log they cannot be told apart. Such batches (two files of
 * one task split in one directory) are reported as `suspectBatches`.
 */
object Repair {

  /**
   * The compact interval the new log is laid out for, and where it comes from. `assumed`: nothing
   * tells the query's interval; the new log is then laid out for every interval (one compact file)
   * and `interval` is the one this session derives from it.
   */
  final case class IntervalChoice(interval: Int, source: String, assumed: Boolean)

  final case class Plan(
      sink: Path,
      metadataPath: Path,
      logExists: Boolean,
      logHealthy: Boolean,
      logProblems: Seq[String],
      interval: IntervalChoice,
      record: Option[SinkRecord],
      intent: Option[RewindIntent],
      files: Seq[(Long, FileStatus)],
      untagged: Seq[FileStatus],
      suspectBatches: Seq[Long],
      indexProblems: Seq[IndexProblem] = Nil,
      damagedRuns: Seq[DamagedRun] = Nil,
      restores: Seq[Either[String, RestoreRuns.Restore]] = Nil,
      loggedLatest: Long = -1L
  ) {

    /**
     * The newest batch: of the data files, or of the log files left in `_spark_metadata` (a batch
     * that wrote no file was committed all the same; the query goes on after it).
     */
    val latestBatch: Long = math.max(loggedLatest, if (files.isEmpty) -1L else files.map(_._1).max)

    def compactInterval: Int = interval.interval

    /** Log files to write, oldest first: (log batch id, is compact, entries). */
    def logFiles: Seq[(Long, Boolean, Seq[(Long, FileStatus)])] = {
      if (latestBatch < 0) return Nil
      if (interval.assumed) return Seq((latestBatch, true, files.sortBy(_._1)))
      val compacts = LogLayout.lastCompactions(latestBatch, compactInterval, 2)
      val afterCompact = compacts.lastOption.getOrElse(-1L) + 1
      val byBatch = files.groupBy(_._1)
      compacts.map(c => (c, true, files.filter(_._1 <= c).sortBy(_._1))) ++
        (afterCompact to latestBatch).map(b => (b, false, byBatch.getOrElse(b, Nil)))
    }

    def needed: Boolean = !logExists || !logHealthy

    /**
     * The sink record after the repair: the epoch moved on, and the interval the log is laid out
     * for, if it is known; none if there was none and the interval is not known (nothing to fence,
     * and no guess to record).
     */
    def newRecord: Option[SinkRecord] =
      if (interval.assumed) record.map(r => r.copy(epoch = r.epoch + 1))
      else {
        val r = record.getOrElse(SinkRecord(SinkRecord.Version, compactInterval, 0L, Nil))
        Some(r.copy(compactInterval = compactInterval, epoch = r.epoch + 1))
      }

    /** The log is sound but for damaged indexes: rewriting them is the whole repair. */
    def indexesOnly: Boolean =
      logExists && indexProblems.nonEmpty && logProblems.length == indexProblems.length

    /**
     * The log is sound but for damaged runs of compact files (one log problem a damaged file) and
     * damaged indexes, and every damaged run can be restored: restoring them is the whole repair.
     */
    def runsOnly: Boolean =
      logExists && damagedRuns.nonEmpty && restores.forall(_.isRight) &&
        logProblems.length == indexProblems.length + damagedRuns.map(_.file).distinct.length

    /** The plan as a report: what a dry run prints, and, with the outcome, what a run did. */
    def report(
        dryRun: Boolean,
        written: Boolean = false,
        movedAside: Option[Path] = None,
        indexesRewritten: Seq[String] = Nil,
        runsRestored: Seq[RestoredRun] = Nil
    ): RepairReport = RepairReport(
      sink.toString,
      metadataPath.toString,
      logExists,
      logHealthy,
      logProblems,
      needed,
      compactInterval,
      interval.source,
      interval.assumed,
      record.flatMap(_.owner).map(_.queryId),
      intent.map(_.toBatch),
      latestBatch,
      files.length,
      files.map(_._2.getLen).sum,
      logFiles.map { case (id, isCompact, entries) =>
        RepairLogFile(
          LogLayout.fileName(id, isCompact),
          entries.length,
          entries.map(_._1).distinct.length
        )
      },
      files.groupBy(_._1).toSeq.sortBy(_._1).map { case (b, fs) =>
        BatchFiles(b, fs.length, fs.map(_._2.getLen).sum)
      },
      untagged.length,
      untagged.take(Reports.ListLimit).map(_.getPath.toString),
      suspectBatches,
      indexProblems,
      indexesOnly,
      dryRun,
      written,
      movedAside.map(_.toString),
      indexesRewritten,
      damagedRuns,
      runsOnly,
      if (dryRun) restores.collect { case Right(r) => r.report }
      else runsRestored
    )
  }

  private[ops] val BrokenPrefix = s"${BatchTaggedFileStreamSinkLog.MetadataDir}.broken-"

  /** The damaged log (if `metaIsDir`) and the logs earlier repairs moved aside, newest first. */
  private def surviving(fs: FileSystem, sink: Path, meta: Path, metaIsDir: Boolean): Seq[Path] = {
    val broken = fs.listStatus(sink).toSeq.map(_.getPath).filter(_.getName.startsWith(BrokenPrefix))
      .sortBy(p => scala.util.Try(p.getName.stripPrefix(BrokenPrefix).toLong).getOrElse(0L))
      .reverse
    (if (metaIsDir) Seq(meta) else Nil) ++ broken
  }

  /**
   * The query's interval, if anything tells it (see [[Repair]]); else the one this session derives
   * from a log ending in `latest.compact`, marked `assumed`. One compact file alone does not tell
   * the interval (any divisor of its batch + 1 fits it).
   */
  private def chooseInterval(
      spark: SparkSession,
      dirs: Seq[Path],
      record: Option[(SinkRecord, Path)],
      requested: Option[Int],
      latest: => Long
  ): IntervalChoice = {
    val default = BatchLogConf.sinkLogSettings(spark).compactInterval
    val hadoopConf = spark.sessionState.newHadoopConf()
    requested.map(i => IntervalChoice(i, "the compact_interval argument", assumed = false))
      .orElse(record.map { case (r, file) =>
        IntervalChoice(r.compactInterval, s"the sink record in ${file.getParent}", assumed = false)
      })
      .orElse(dirs.iterator.flatMap { dir =>
        val ids = LogLayout.compactIds(CheckpointFileManager.create(dir, hadoopConf), dir)
        if (ids.length < 2) None
        else Some(IntervalChoice(
          LogLayout.derivedInterval(ids, default),
          s"the compact files in $dir",
          assumed = false
        ))
      }.firstOption)
      .getOrElse {
        val m = math.max(latest, 0L)
        IntervalChoice(
          deriveCompactInterval(default, m.toInt),
          s"nothing records the query's interval: the new log is one compact file, $m.compact, " +
            s"that a query of any interval reads and continues (this session's " +
            s"${BatchLogConf.CompactIntervalKey} of $default makes it this)",
          assumed = true
        )
      }
  }

  /** Plans a repair from the output directory and what is left of the log, changing nothing. */
  def plan(spark: SparkSession, sinkPath: String, compactInterval: Option[Int] = None): Plan =
    BatchLogException.unchanged(planOf(spark, sinkPath, compactInterval))

  private def planOf(spark: SparkSession, sinkPath: String, compactInterval: Option[Int]): Plan = {
    if (sinkPath == null || sinkPath.isEmpty) {
      throw BatchLogException.invalidArgument("path", "''", "give the sink's output directory")
    }
    compactInterval.filter(_ <= 0).foreach { i =>
      throw BatchLogException.invalidArgument("compact_interval", i, "it must be positive")
    }
    val hadoopConf = spark.sessionState.newHadoopConf()
    val out = new Path(sinkPath)
    val fs = out.getFileSystem(hadoopConf)
    val isDir =
      try fs.getFileStatus(out).isDirectory
      catch { case _: java.io.FileNotFoundException => false }
    if (!isDir) throw BatchLogException.invalidArgument("path", sinkPath, "it is not a directory")
    val sink = fs.makeQualified(out)
    val meta = new Path(sink, BatchTaggedFileStreamSinkLog.MetadataDir)
    def fmOf(dir: Path) = CheckpointFileManager.create(dir, hadoopConf)
    // the plan reads the log and batchlog's records as one listing of each directory saw them
    val reads = new ListedOnce(
      fmOf(meta),
      fs,
      Seq(meta, new Path(sink, JsonRecordFile.RecordDir))
    )
    val metaIsDir = reads.exists(meta)
    val logExists = metaIsDir || fs.exists(meta)
    val dirs = surviving(fs, sink, meta, metaIsDir)
    // `_batchlog/`, else the damaged log (a sink of an earlier version), else a moved-aside log
    val liveRecord = scala.util.Try(SinkRecord.readWithPath(reads, meta)).toOption.flatten
    val record = liveRecord.orElse(dirs.filterNot(_ == meta).iterator.flatMap { dir =>
      scala.util.Try(SinkRecord.readIn(fmOf(dir), dir)).toOption.flatten.iterator
    }.firstOption)

    val problems = mutable.ArrayBuffer.empty[String]
    val intent = scala.util.Try(RewindIntent.read(reads, meta)).toOption.flatten
    RepairIntent.read(reads, meta).foreach { r =>
      problems += s"a repair started at ${new java.sql.Timestamp(r.startedAtMs)} did not finish " +
        s"(it copied the old log files to ${r.movedAside}): repairing again finishes it"
    }
    val loggedLatest =
      if (metaIsDir) LogLayout.listIds(reads, meta).lastOption.getOrElse(-1L) else -1L
    val files = mutable.ArrayBuffer.empty[(Long, FileStatus)]
    val untagged = mutable.ArrayBuffer.empty[FileStatus]
    val walked = Verify.dataFiles(fs, sink)
    walked._1.values.foreach { f =>
      DataFileNaming.batchIdOf(f.getPath.getName) match {
        case Some(b) => files += ((b, f))
        case None => untagged += f
      }
    }
    lazy val log = new BatchTaggedFileStreamSinkLog(spark, meta.toString, listing = Some(reads))
    val sorted = files.sortBy(f => (f._1, f._2.getPath.toString)).toSeq
    val latest = math.max(loggedLatest, sorted.lastOption.map(_._1).getOrElse(-1L))
    val interval = chooseInterval(spark, dirs, record, compactInterval, latest)

    var indexProblems: Seq[IndexProblem] = Nil
    var damagedRuns: Seq[DamagedRun] = Nil
    if (logExists) {
      if (!metaIsDir) problems += s"$meta is not a directory"
      else {
        val report = Verify.run(log, Some(walked))
        problems ++= report.logErrors
        if (report.missingCount > 0) problems += s"${report.missingCount} logged files missing"
        if (report.sizeMismatchCount > 0) {
          problems += s"${report.sizeMismatchCount} logged files have another size"
        }
        if (report.wrongBatchCount > 0) {
          problems += s"${report.wrongBatchCount} entries logged under another batch"
        }
        report.foreign.headOption.foreach { f =>
          problems += s"${report.foreignCount} logged files are not inside the output directory " +
            s"(${f.path}: ${f.reason}); the rebuilt log leaves them out"
        }
        // (Verify has judged the layout by the record it reads, the one found here first.)
        // Without a known interval, it must read at every interval (the error of a reader of
        // another one sends its user here), unless untagged files, which a rebuilt log would
        // leave out, make a rebuild lose more than it mends: then at this session's.
        if (liveRecord.isEmpty || compactInterval.isDefined) {
          problems ++= (
            if (!interval.assumed) {
              LogLayout.misfit(reads, meta, interval.interval, interval.source)
            } else if (untagged.isEmpty) LogLayout.misfitAnyInterval(reads, meta)
            else {
              val default = BatchLogConf.sinkLogSettings(spark).compactInterval
              val i = LogLayout.intervalOf(reads, meta, default)._2.getOrElse(default)
              LogLayout.misfit(reads, meta, i, "this session's")
            }
          )
        }
        indexProblems = report.indexProblems
        damagedRuns = report.damagedRuns
      }
    }
    if (
      logExists && problems.isEmpty && sorted.nonEmpty &&
      LogLayout.listIds(reads, meta).isEmpty
    ) {
      problems += s"$meta holds no log files but the output holds ${sorted.length} data files"
    }
    val suspect = sorted.groupBy(_._1).filter(b => twoAttempts(b._2.map(_._2))).keys.toSeq.sorted
    problems ++= indexProblems.map(p => s"${p.file} is not used: ${p.problem}")
    val restores =
      if (damagedRuns.isEmpty) Nil
      else RestoreRuns.plan(
        log,
        damagedRuns,
        sorted
      )
    problems ++= restores.collect { case Left(why) => s"$why: the whole log is rebuilt" }
    Plan(
      sink,
      meta,
      logExists,
      logExists && problems.isEmpty,
      problems.toSeq,
      interval,
      record.map(_._1),
      intent,
      sorted,
      untagged.toSeq,
      suspect,
      indexProblems,
      damagedRuns,
      restores,
      loggedLatest
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
    byTask.values.exists(fs =>
      fs.map(f => DataFileNaming.uuidOf(f.getPath.getName)).distinct.length > 1
    )
  }

  /**
   * Carries out `p` unless `dryRun` or the log is healthy (and `force` is false): rebuilds the log,
   * or rewrites only the damaged indexes. Refuses while a rewind is unfinished, and while a live
   * writer holds the sink unless `force`. A failure says exactly what it left.
   */
  def apply(
      spark: SparkSession,
      p: Plan,
      dryRun: Boolean,
      force: Boolean,
      quiet: Boolean
  ): RepairReport = {
    val hadoopConf = spark.sessionState.newHadoopConf()
    BatchLogException.unchanged {
      if (!dryRun && (p.needed || force)) {
        p.intent.foreach(i =>
          throw BatchLogException.rewindInProgress(
            i.sink,
            i.toBatch,
            i.checkpoint,
            finishWith = i.finishWith
          )
        )
        // the lease lives in _batchlog/: it outlives a deleted log
        WriterFence.refuseLiveWriter(
          CheckpointFileManager.create(p.metadataPath, hadoopConf),
          p.metadataPath,
          force,
          BatchLogConf.fenceWaitMs(spark)
        )
      }
    }
    if (p.runsOnly && !force) return restoreRuns(spark, p, dryRun)
    if (p.indexesOnly && !force) return rewriteIndexes(spark, p, dryRun)
    if (dryRun || (!p.needed && !force)) return p.report(dryRun)
    val progress = new Progress("repair: log files", quiet)
    // the new log's compact files get their indexes, as a compaction writes them, so that reads
    // of a repaired log seek instead of scanning (a log instance made once every new file is in)
    def indexes(compactIds: Seq[Long]): Unit = if (compactIds.nonEmpty) {
      val log = new BatchTaggedFileStreamSinkLog(spark, p.metadataPath.toString)
      compactIds.foreach(log.writeIndex)
    }
    val aside = RepairSwap.run(hadoopConf, p, p.newRecord, progress, indexes)
    aside.foreach(b => progress.note(s"the old log files were copied to $b"))
    p.report(dryRun, written = true, movedAside = aside)
  }

  /**
   * Restores (unless `dryRun`) exactly the damaged runs of `p` ([[RestoreRuns]]), then rewrites its
   * damaged indexes; a dry run lists the runs it would restore and from where.
   */
  private def restoreRuns(spark: SparkSession, p: Plan, dryRun: Boolean): RepairReport = {
    val planned = p.restores.collect { case Right(r) => r }
    if (dryRun) return p.report(dryRun)
    val log = new BatchTaggedFileStreamSinkLog(spark, p.metadataPath.toString)
    val done = BatchLogException.unchanged(
      RestoreRuns.apply(log, p.sink, planned, System.currentTimeMillis())
    )
    p.indexProblems.foreach(ip => log.writeIndex(ip.compactId))
    p.report(
      dryRun,
      indexesRewritten = p.indexProblems.map(_.file),
      runsRestored = done
    )
  }

  /** Rewrites (unless `dryRun`) exactly the damaged indexes of `p`, each from its compact file. */
  private def rewriteIndexes(spark: SparkSession, p: Plan, dryRun: Boolean): RepairReport = {
    if (dryRun) return p.report(dryRun)
    val log = new BatchTaggedFileStreamSinkLog(spark, p.metadataPath.toString)
    p.indexProblems.foreach(ip => log.writeIndex(ip.compactId))
    p.report(dryRun, indexesRewritten = p.indexProblems.map(_.file))
  }
}
