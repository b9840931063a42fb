package io.batchlog.log

import java.io.{BufferedReader, InputStreamReader}
import java.nio.charset.StandardCharsets.UTF_8

import scala.collection.mutable

import org.apache.hadoop.fs.FileStatus

import org.apache.spark.internal.Logging
import io.batchlog.shim.CompactibleFileStreamLog._

import io.batchlog.BatchLogException
import io.batchlog.Compat
import io.batchlog.Compat._

/**
 * Reads of a [[BatchTaggedFileStreamSinkLog]] (mixed into it) through the per-batch
 * [[CompactIndex]] of its compact files: the index on disk when it is proved, else one rebuilt in
 * memory by a scan; one seek per run of a wanted batch, each run checked as it is read.
 */
trait CompactIndexReads extends Logging { self: BatchTaggedFileStreamSinkLog =>

  /** Indexes rebuilt in memory by this instance, by compact id (readers never write files). */
  private val rebuiltIndexes = new java.util.concurrent.ConcurrentHashMap[Long, CompactIndex]()

  /**
   * The index of compact file `compactId`: the one on disk if it is proved
   * ([[CompactIndex.prove]]), else rebuilt by one scan of the file and kept in memory. Reading
   * never writes: only compaction, `adopt` (which rewrites compact files) and `repair` write index
   * files, so read-only commands, dry runs and refused operations leave the sink exactly as it was.
   */
  def indexOf(compactId: Long, rebuild: Boolean = false): CompactIndex = {
    val file = batchIdToPath(compactId)
    val status = statusOf(file).getOrElse(
      throw BatchLogException.missingLogFile(
        file.toString,
        s"the log needs it to read batch $compactId"
      )
    )
    val onDisk =
      if (rebuild) None
      else CompactIndex.load(checkpointFileManager, CompactIndex.pathOf(file), status)
    onDisk.flatMap(_.toOption).getOrElse {
      val cached = Option(rebuiltIndexes.get(compactId)).filter(i => !rebuild && i.matches(status))
      cached.getOrElse {
        onDisk.flatMap(_.left.toOption).filter(_ != CompactIndex.LegacyReason).foreach { why =>
          logWarning(s"Not using ${CompactIndex.pathOf(file)}: $why. Rebuilding it in memory " +
            "from its compact file (`python -m batchlog repair` rewrites it)")
        }
        val index = scanIndex(compactId, status)
        rebuiltIndexes.put(compactId, index)
        index
      }
    }
  }

  /**
   * Builds the index of compact file `compactId` (of `status`) by reading it once, every run's
   * CRC32C computed from the raw bytes: proved by construction.
   */
  def scanIndex(compactId: Long, status: FileStatus): CompactIndex = {
    val file = batchIdToPath(compactId)
    val crc = Compat.crc32c()
    val b = new CompactIndex.Builder(crc)
    val in =
      LogFiles.open(checkpointFileManager, file, s"the log needs it to read batch $compactId")
    var untagged = false
    val end =
      try {
        CompactIndex.scanLines(in, crc, h => BatchLogException.badHeader(file.toString, h)) {
          var lineNo = 1L
          (line, offset) =>
            lineNo += 1
            untagged ||= !LogFormat.isTagged(line)
            b.line(batchOfLine(line, compactId, file.toString, lineNo), offset)
        }
      } finally in.close()
    if (untagged) hasUntaggedLines.add(compactId) else hasUntaggedLines.remove(compactId)
    b.result(end, status)
  }

  /** Compact files found by a scan to hold lines without `batchId` (written by plain Spark). */
  private[log] val hasUntaggedLines = java.util.concurrent.ConcurrentHashMap.newKeySet[Long]()

  /** Writes the index of compact file `compactId` from a scan (after `adopt` rewrote the file). */
  def writeIndex(compactId: Long): Unit = {
    val file = batchIdToPath(compactId)
    statusOf(file).foreach(st =>
      CompactIndex.write(checkpointFileManager, CompactIndex.pathOf(file), scanIndex(compactId, st))
    )
  }

  /**
   * The on-disk index of compact file `compactId` checked in full: None if it is proved and every
   * run's CRC32C matches the compact file (one streaming read); else Some(the reason it is not
   * used: [[CompactIndex.AbsentReason]] if there is none, [[CompactIndex.LegacyReason]] for a
   * legacy one, which readers rebuild in memory as a matter of course, or the damage).
   */
  def indexProblem(compactId: Long): Option[String] = {
    val file = batchIdToPath(compactId)
    statusOf(file).flatMap { status =>
      CompactIndex.load(checkpointFileManager, CompactIndex.pathOf(file), status) match {
        case None => Some(CompactIndex.AbsentReason)
        case Some(Left(why)) => Some(why)
        case Some(Right(index)) =>
          val in =
            LogFiles.open(checkpointFileManager, file, s"the log needs it to read batch $compactId")
          try CompactIndex.checkRuns(index, in)
          finally in.close()
      }
    }
  }

  private def batchOfLine(
      line: String,
      logBatchId: Long,
      file: String,
      lineNo: Long
  ): Option[Long] =
    LogFormat.taggedBatch(line).orElse(batchOf(decodeLine(line, file, lineNo), logBatchId))

  /**
   * Calls `fn` for every live entry whose batch (`None`: untagged) satisfies `wanted`, reading only
   * those entries: per-batch files are skipped by name and compact files are read through their
   * [[CompactIndex]], one seek per run.
   */
  def foreachLiveEntryWhere(wanted: Option[Long] => Boolean)(fn: SinkLogEntry => Unit): Unit = {
    val now = System.currentTimeMillis()
    val live = (e: SinkLogEntry) => if (shouldRetain(e, now)) fn(e)
    liveLogBatchIds().foreach { id =>
      if (!isCompactionBatch(id, interval)) {
        if (wanted(Some(id))) foreachEntryIn(id)(live)
      } else {
        // Each run is checked as it is read (batch and count); a mismatch means the index is
        // stale: it is rebuilt, and only the runs not yet passed on are read from the new one.
        val done = mutable.HashSet.empty[(Option[Long], Long)]
        def readAll(index: CompactIndex): Boolean =
          index.runs.filter(r => wanted(r.batchId) && !done((r.batchId, r.offset))).forall { run =>
            readRun(id, run) match {
              case Some(entries) => entries.foreach(live); done += ((run.batchId, run.offset)); true
              case None => false
            }
          }
        if (!readAll(indexOf(id)) && !readAll(indexOf(id, rebuild = true))) {
          throw BatchLogException.corruptLine(
            batchIdToPath(id).toString,
            -1,
            "it changed while it was read"
          )
        }
      }
    }
  }

  /** One live entry (the oldest), read without scanning the log; None if the log is empty. */
  def firstLiveEntry(): Option[SinkLogEntry] =
    liveLogBatchIds().iterator.flatMap { id =>
      if (isCompactionBatch(id, interval)) {
        def first(index: CompactIndex) = index.runs.headOption.map(r => readRun(id, r))
        (first(indexOf(id)) match {
          case Some(None) => first(indexOf(id, rebuild = true)).flatten
          case other => other.flatten
        }).flatMap(_.headOption)
      } else {
        val buf = mutable.ArrayBuffer.empty[SinkLogEntry]
        foreachEntryIn(id)(buf += _)
        buf.headOption
      }
    }.firstOption

  /**
   * The entries of one run, or None if they do not match it (stale index): each line of the run's
   * batch, `count` lines, and the CRC32C of the run's bytes.
   */
  private def readRun(compactId: Long, run: IndexRun): Option[Seq[SinkLogEntry]] = {
    val file = batchIdToPath(compactId)
    val in =
      LogFiles.open(checkpointFileManager, file, s"the log needs it to read batch $compactId")
    try {
      in.seek(run.offset)
      val checked = new java.util.zip.CheckedInputStream(
        new CompactIndex.BoundedStream(in, run.length),
        Compat.crc32c()
      )
      val r = new BufferedReader(new InputStreamReader(checked, UTF_8), 1 << 16)
      if (r.read() != '\n') return None
      val out = Seq.newBuilder[SinkLogEntry]
      var n = 0L
      var line = r.readLine()
      while (line != null) {
        val e = decodeLine(line, file.toString, -1)
        val b = batchOf(e, compactId)
        if (b != run.batchId) return None
        out += e.copy(batchId = b)
        n += 1
        line = r.readLine()
      }
      val bytesMatch = checked.getChecksum.getValue == run.crc
      if (n == run.count && bytesMatch) Some(out.result()) else None
    } catch {
      case _: java.io.EOFException => None
    } finally in.close()
  }

}
