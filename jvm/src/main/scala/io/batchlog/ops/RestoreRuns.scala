package io.batchlog.ops

import java.nio.charset.StandardCharsets.UTF_8

import scala.util.control.NonFatal

import org.apache.hadoop.fs.{FileStatus, FileUtil, Path}

import io.batchlog.BatchLogException
import io.batchlog.Compat
import io.batchlog.log.{
  BatchTaggedFileStreamSinkLog,
  CompactIndex,
  IndexCheck,
  LogFiles,
  LogFormat,
  SinkLogEntry
}
import io.batchlog.shim.SinkFileStatus

/**
 * The part of `repair` that restores the damaged runs of compact files ([[Verify]]'s
 * `damagedRuns`): the entries of each damaged batch are rebuilt, and the compact file is rewritten
 * with them in place of the damaged lines, every other run copied as bytes (its CRC32C checked),
 * and a new index beside it. The rest of the log is left as it is.
 *
 * Where a damaged batch `b`'s entries come from, first that fits:
 *   - batch file `b`, if it is still in the log and holds as many entries as the run (each of batch
 *     `b`): the entries as they were logged, exactly. It wins over the data files (a data file
 *     whose size differs from it since is what `verify` reports as a size mismatch, another
 *     problem);
 *   - the data files whose batch-tagged names name `b`, if they are as many as the run's lines
 *     (else those of them that a damaged line still names, if they are as many): each entry from
 *     the file's status, so the file system's size and modification time win over the damaged
 *     line's (the damaged line is the one thing not to trust). The batch's commit record (its first
 *     line's `commit`, [[io.batchlog.log.BatchCommit]]) is in no data file: it is lost, and
 *     `history` counts that batch's rows from its files when asked.
 * A run neither gives is not restorable: the plan says why and `repair` rebuilds the whole log
 * instead (from the data files' names, see [[Repair]]).
 *
 * Crash-safe: the damaged compact file and its index are first copied, as evidence, to
 * `_spark_metadata.damaged-<time>/` (never deleted; hidden from Spark, like every `_` name); the
 * new compact file replaces the old one atomically, then its index is written. A crash between the
 * two leaves an index that no longer names the compact file's identity: readers rebuild it in
 * memory and `verify` reports it, and a second `repair` rewrites it.
 */
object RestoreRuns {

  /** Damaged run `run`, and the entries and their source that restore it. */
  final case class Restore(run: DamagedRun, entries: Seq[SinkLogEntry], source: String) {
    def report: RestoredRun = RestoredRun(run.file, run.batchId.get, entries.length, source)
  }

  /** Where each damaged run's entries come from; Left(why) for a run that cannot be restored. */
  def plan(
      log: BatchTaggedFileStreamSinkLog,
      damaged: Seq[DamagedRun],
      dataFiles: Seq[(Long, FileStatus)]
  ): Seq[Either[String, Restore]] = {
    val byBatch = dataFiles.groupBy(_._1)
    damaged.map { run =>
      run.batchId match {
        case None => Left(s"${CompactIndex.describe(indexRun(run))} of ${run.file} is untagged")
        case Some(b) =>
          fromBatchFile(log, run, b)
            .orElse(fromDataFiles(log, run, b, byBatch.getOrElse(b, Nil).map(_._2)))
            .toRight(
              s"${run.file}: the ${run.entries} entries of damaged batch $b are neither in its " +
                s"batch file nor the data files named with batch $b (" +
                s"${byBatch.getOrElse(b, Nil).length} found)"
            )
      }
    }
  }

  private def indexRun(r: DamagedRun) =
    io.batchlog.log.IndexRun(r.batchId, r.offset, r.length, r.entries, 0L)

  private def fromBatchFile(
      log: BatchTaggedFileStreamSinkLog,
      run: DamagedRun,
      b: Long
  ): Option[Restore] =
    if (log.isCompactFile(b) || !log.isLogged(b)) None
    else
      try {
        val buf = Vector.newBuilder[SinkLogEntry]
        log.foreachEntryIn(b)(buf += _)
        val entries = buf.result()
        if (entries.length == run.entries && entries.forall(_.batchId.contains(b))) {
          Some(Restore(run, entries, s"batch file ${log.logFilePath(b)}"))
        } else None
      } catch { case _: BatchLogException => None }

  private def fromDataFiles(
      log: BatchTaggedFileStreamSinkLog,
      run: DamagedRun,
      b: Long,
      files: Seq[FileStatus]
  ): Option[Restore] = {
    def restore(fs: Seq[FileStatus]) = Restore(
      run,
      fs.map(f => SinkLogEntry(SinkFileStatus(f), b)),
      s"the data files named with batch $b (size and modification time from the file system)"
    )
    if (files.length == run.entries) Some(restore(files))
    else {
      val named = damagedPaths(log, run)
      val chosen = files.filter(f => named(Verify.key(f.getPath)))
      if (chosen.length == run.entries) Some(restore(chosen)) else None
    }
  }

  /** The paths the damaged lines still name (those that decode), as [[Verify.key]]s. */
  private def damagedPaths(log: BatchTaggedFileStreamSinkLog, run: DamagedRun): Set[String] = {
    val file = new Path(run.file)
    val in = LogFiles.open(log.checkpointFileManager, file, "repair reads its damaged lines")
    val bytes = new Array[Byte](run.length.toInt)
    try in.readFully(run.offset, bytes)
    finally in.close()
    new String(bytes, UTF_8).split('\n').iterator.filter(_.nonEmpty).flatMap { line =>
      try Some(Verify.key(Verify.entryPath(LogFormat.decode(line))))
      catch { case NonFatal(_) => None }
    }.toSet
  }

  /**
   * Restores `restores` (all of one plan), compact file by compact file; returns what was done.
   * Refuses a compact file whose damage is no longer what was planned (re-run the repair).
   */
  def apply(
      log: BatchTaggedFileStreamSinkLog,
      sink: Path,
      restores: Seq[Restore],
      ts: Long
  ): Seq[RestoredRun] = {
    val fs = log.fileSystem
    val evidence = new Path(sink, s"${BatchTaggedFileStreamSinkLog.MetadataDir}.damaged-$ts")
    restores.groupBy(_.run.compactId).toSeq.sortBy(_._1).flatMap { case (id, rs) =>
      val file = log.logFilePath(id)
      val index = log.checkIndex(id) match {
        case Some(IndexCheck.Damaged(index, runs))
            if runs.map(_.offset).toSet == rs.map(_.run.offset).toSet =>
          index
        case _ =>
          throw new java.io.IOException(
            s"$file changed since the repair was planned. Nothing in it was changed: run the " +
              "repair again."
          )
      }
      fs.mkdirs(evidence)
      Seq(file, CompactIndex.pathOf(file)).foreach { f =>
        if (!FileUtil.copy(fs, f, fs, new Path(evidence, f.getName), false, fs.getConf)) {
          throw new java.io.IOException(s"Could not copy $f to $evidence. Nothing was changed.")
        }
      }
      rewrite(log, id, index, rs.map(r => r.run.offset -> r).toMap)
      rs.map(_.report)
    }
  }

  /** Writes compact file `id` anew: `index`'s runs, those at the offsets of `restored` rebuilt. */
  private def rewrite(
      log: BatchTaggedFileStreamSinkLog,
      id: Long,
      index: CompactIndex,
      restored: Map[Long, Restore]
  ): Unit = {
    val file = log.logFilePath(id)
    val fm = log.checkpointFileManager
    val crc = Compat.crc32c()
    val b = new CompactIndex.Builder(crc)
    b.dropped = index.droppedEntries
    b.droppedMaxBatch = index.droppedMaxBatch
    var end = 0L
    val buf = new Array[Byte](1 << 20)
    val in = LogFiles.open(fm, file, "repair copies its undamaged runs")
    try LogFiles.publish(fm, file, overwrite = true) { raw =>
        val out = new CompactIndex.CountingStream(raw, crc)
        out.write(LogFiles.HeaderBytes)
        index.runs.sortBy(_.offset).foreach { run =>
          restored.get(run.offset) match {
            case Some(r) =>
              r.entries.foreach { e =>
                b.line(e.batchId, out.count)
                out.write(("\n" + LogFormat.encode(e)).getBytes(UTF_8))
              }
            case None =>
              b.run(run, out.count)
              val c = Compat.crc32c()
              var pos = run.offset
              while (pos < run.offset + run.length) {
                val n = math.min(buf.length.toLong, run.offset + run.length - pos).toInt
                in.readFully(pos, buf, 0, n)
                c.update(buf, 0, n)
                out.copied(buf, 0, n)
                pos += n
              }
              if (c.getValue != run.crc) {
                throw new java.io.IOException(
                  s"$file: ${CompactIndex.describe(run)} does not match its index either. " +
                    "Nothing in it was changed: run the repair again."
                )
              }
          }
        }
        out.flush()
        end = out.count
      }
    finally in.close()
    val status = log.fileSystem.getFileStatus(file)
    CompactIndex.write(fm, CompactIndex.pathOf(file), b.result(end, status))
  }
}
