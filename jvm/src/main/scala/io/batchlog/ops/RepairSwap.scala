package io.batchlog.ops

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path
import org.apache.hadoop.io.IOUtils

import io.batchlog.shim.CheckpointFileManager
import io.batchlog.shim.SinkFileStatus

import io.batchlog.BatchLogException
import io.batchlog.log.{
  CompactIndex,
  LogFiles,
  LogFormat,
  LogLayout,
  RepairIntent,
  SinkLogEntry,
  SinkRecord
}

/**
 * Puts the log a [[Repair.Plan]] describes in place of the sink's `_spark_metadata`, file by file,
 * without ever removing the directory: while it is missing, plain Spark readers would list the
 * output directory and read orphaned files (of failed attempts, of rewound batches), and a starting
 * query would create a log of its own.
 *
 * Readers of a log read its newest file and the files the compact interval ties to it: `L.compact`
 * alone when the newest batch `L` is a compaction batch, else the newest compact file and the batch
 * files after it; the interval comes from the two newest compact files. So the steps are, in order:
 *
 *   1. the intent ([[RepairIntent]], in `_batchlog/`): a repair cut short at any later step is
 *      found and finished by the next `repair`; then the sink record, its epoch moved on, so that a
 *      writer still running against the old log fails before its next commit; 2. every old log file
 *      is copied (not moved) to `_spark_metadata.broken-<ts>/`: the old log is kept, and stays
 *      readable as it was; 3. the old files a reader of the new log could be misled by are removed,
 *      newest first: files of batches after the new log's newest, compact files the new log does
 *      not have (they would make readers derive another interval), and every index (it describes an
 *      old compact file); 4. the new log's files are published oldest first, each atomically,
 *      replacing an old file of the same name: from the last one on, readers read exactly the new
 *      log. Without a known interval the new log is one file, `L.compact`, so this step is one
 *      atomic publish; with one, every state is an old batch prefix of the new log or the new log
 *      itself; 5. the old files the new log does not use are removed (their copies are in the
 *      broken-dir); 6. the new compact files' indexes are written (a crash before leaves them
 *      rebuilt in memory by readers, and the intent makes the next repair finish the job); 7. the
 *      intent is removed.
 */
private[ops] object RepairSwap {

  /** Carries out `p`; the directory the old log files were copied to, if there were any. */
  def run(
      hadoopConf: Configuration,
      p: Repair.Plan,
      record: Option[SinkRecord],
      progress: Progress,
      writeIndexes: Seq[Long] => Unit
  ): Option[Path] = {
    val meta = p.metadataPath
    val fm = CheckpointFileManager.create(meta, hadoopConf)
    val ts = System.currentTimeMillis()
    val aside = new Path(p.sink, s"${Repair.BrokenPrefix}$ts")
    val metaIsDir =
      fm.exists(meta) && meta.getFileSystem(hadoopConf).getFileStatus(meta).isDirectory
    val old: Seq[String] =
      if (metaIsDir) fm.list(meta).toSeq.map(_.getPath.getName).filter(isLogName).sortBy(order)
      else Nil
    val copied = if (old.nonEmpty || (fm.exists(meta) && !metaIsDir)) Some(aside) else None
    BatchLogException.unchanged {
      RepairIntent.write(fm, meta, RepairIntent(ts, aside.toString))
    }
    try {
      record.foreach(SinkRecord.write(fm, meta, _))
      if (!metaIsDir && fm.exists(meta)) { // a file where the log directory belongs
        copy(fm, meta, new Path(aside, meta.getName))
        fm.delete(meta)
      }
      old.zipWithIndex.foreach { case (name, i) =>
        copy(fm, new Path(meta, name), new Path(aside, name))
        progress.step(i + 1, old.length)
      }
      fm.mkdirs(meta)
      val files = p.logFiles
      val names = files.map { case (id, isCompact, _) => LogLayout.fileName(id, isCompact) }.toSet
      def misleading(name: String): Boolean =
        LogLayout.idOfName(name).exists(_ > p.latestBatch) || CompactIndex.isIndexFile(name) ||
          (LogLayout.isCompactName(name) && !names(name))
      val (before, after) = old.partition(misleading)
      before.reverse.foreach(n => fm.delete(new Path(meta, n)))
      files.zipWithIndex.foreach { case ((id, isCompact, entries), i) =>
        LogFiles.writeAtomic(
          fm,
          new Path(meta, LogLayout.fileName(id, isCompact)),
          overwrite = true
        ) {
          w =>
            entries.foreach { case (b, f) =>
              LogFiles.writeLine(w, LogFormat.encode(SinkLogEntry(SinkFileStatus(f), b)))
            }
        }
        progress.step(i + 1, files.length)
      }
      after.filterNot(names).foreach(n => fm.delete(new Path(meta, n)))
      writeIndexes(files.collect { case (id, true, _) => id })
      RepairIntent.delete(fm, meta)
    } catch {
      case e: Throwable =>
        val kept = copied.map(a => s" The old log files are copied in $a.").getOrElse("")
        throw wrap(
          e,
          s"The repair of ${p.metadataPath} stopped part way.$kept Run repair again to finish " +
            "it before the query is restarted."
        )
    }
    copied
  }

  /** Log files and their indexes: what a repair replaces (batchlog's records stay). */
  private def isLogName(name: String): Boolean = LogLayout.idOfName(name).isDefined

  /** Oldest batch first; a compact file after the batch file of its id, its index after it. */
  private def order(name: String): (Long, Int) = (
    LogLayout.idOfName(name).get,
    if (CompactIndex.isIndexFile(name)) 2 else if (LogLayout.isCompactName(name)) 1 else 0
  )

  private def copy(fm: CheckpointFileManager, from: Path, to: Path): Unit = {
    fm.mkdirs(to.getParent)
    LogFiles.publish(fm, to, overwrite = false) { out =>
      val in = fm.open(from)
      try IOUtils.copyBytes(in, out, 1 << 16, false)
      finally in.close()
    }
  }

  private def wrap(e: Throwable, outcome: String): Throwable = e match {
    case b: BatchLogException => b.withOutcome(outcome)
    case other => new java.io.IOException(s"${other.getMessage} $outcome", other)
  }
}
