package io.batchlog.log

import java.io.{BufferedReader, FileNotFoundException, InputStreamReader}
import java.nio.charset.StandardCharsets.UTF_8

import scala.collection.mutable

import org.apache.hadoop.fs.{FileSystem, FSDataInputStream, Path}
import org.apache.hadoop.util.functional.FutureIO

import io.batchlog.shim.CompactibleFileStreamLog._

import io.batchlog.{BatchLogException, Compat}

/**
 * The logged paths of one batch, read from the one log file that holds them without listing the
 * log: `files(b)` and `batchOf(path)` in four requests on an object store (a listing of the log and
 * probes of each file it names cost 15 before), and a handful of calls on HDFS.
 *
 * Where batch `b`'s entries are, for compact interval `interval` (the reading session's; the
 * writer's unless they differ):
 *   - in compact file `c`, the first compaction at or after `b`, once it is written: a compact file
 *     holds every live entry up to its batch, and its index ([[CompactIndex]]) says where `b`'s
 *     lines are. The index (on S3: HEAD, then a `v3` index's head with one ranged GET, which holds
 *     a whole index up to 64 KiB: 4 requests in all; in a longer one, the block that holds `b` with
 *     another: 5, whatever the number of batches; a `v2` index whole), proved against the compact
 *     file's status (HEAD), then `b`'s run read with one ranged GET and checked (its CRC32C, its
 *     line count, each line's batch);
 *   - else (neither `c`'s index nor `c` exists) in batch file `b` (HEAD, GET).
 *
 * Anything else is None, and the caller reads the log the long way, which also names what is wrong:
 * `c` without a proved index, lines without `batchId` (their batch needs the lineage of the log), a
 * missing batch file, a run whose lines do not match its index. One exception: a run whose bytes do
 * not match its CRC32C while `c` keeps the name, length and modification time its index records is
 * damage (a compact file is written once), and fails with `CORRUPT_LOG` here as on the long way,
 * never answered from a rescan of the damaged file. A compaction that drops entries for retention
 * removes the indexes of the older compact files (they still hold what it dropped), so this never
 * answers from a compact file older than such a drop; a reading session with an age retention
 * (`spark.batchlog.retention.age`, which hides entries by time) never uses it. The `v1` header of a
 * compact file is not read here (the index proves the file's name, length and time, and each run
 * its bytes); full reads and `verify` check it.
 */
private[batchlog] object DirectLookup {

  /** The paths batch `batch` logged, or None: read the log the long way. */
  def paths(fs: FileSystem, metadataPath: Path, interval: Int, batch: Long): Option[Seq[String]] = {
    val c =
      if (isCompactionBatch(batch, interval)) batch else nextCompactionBatchId(batch, interval)
    val compact = new Path(metadataPath, LogLayout.fileName(c, isCompact = true))
    openIndex(fs, CompactIndex.pathOf(compact)) match {
      case Some(in) =>
        try fromCompact(fs, compact, in, batch)
        finally in.close()
      case None if c == batch || exists(fs, compact) => None
      case None => fromBatchFile(fs, new Path(metadataPath, batch.toString), batch)
    }
  }

  private def openIndex(fs: FileSystem, file: Path): Option[FSDataInputStream] =
    try Some(fs.open(file))
    catch { case _: FileNotFoundException => None }

  /** One probe (opening reads nothing yet): on S3 a HEAD, where a status probe adds a LIST. */
  private def exists(fs: FileSystem, file: Path): Boolean =
    try { fs.open(file).close(); true }
    catch { case _: FileNotFoundException => false }

  /**
   * `batch`'s paths from compact file `compact` through its index `in`: a `v3` index by its head
   * and the block(s) whose batch range holds `batch` (ranged reads, each part proved), a `v2` one
   * read whole and proved.
   */
  private def fromCompact(
      fs: FileSystem,
      compact: Path,
      in: FSDataInputStream,
      batch: Long
  ): Option[Seq[String]] = {
    val status =
      try fs.getFileStatus(compact)
      catch { case _: FileNotFoundException => return None }
    def whole(): Either[String, CompactIndex] = {
      in.seek(0L)
      CompactIndex.prove(Compat.readAllBytes(in), compact.getName, status)
    }
    val index = IndexBlocks.readHeadAndFirst(in, compact.getName, status).flatMap {
      case None => whole()
      // untagged lines: their batch needs a proof
      case Some((head, _)) if head.untagged => Left("untagged")
      case Some((head, first)) =>
        head.blocks.filter(_.mayHold(batch, batch))
          .foldLeft[Either[String, Vector[IndexRun]]](Right(Vector.empty)) { (acc, b) =>
            acc.flatMap(rs => IndexBlocks.readBlock(in, b, first).map(rs ++ _))
          }.map(rs =>
            CompactIndex(compact.getName, status.getLen, status.getModificationTime, rs, 0L, -1L)
          )
    }
    index.toOption.flatMap { index =>
      if (index.runs.exists(_.batchId.isEmpty)) None // untagged lines: their batch needs a proof
      else {
        val runs = index.runs.filter(_.batchId.contains(batch))
        if (runs.isEmpty) Some(Nil)
        else {
          val data = FutureIO.awaitFuture(fs.openFile(compact).withFileStatus(status).build())
          val out = mutable.ArrayBuffer.empty[String]
          val read =
            try runs.iterator.map { r => data.seek(r.offset); readRun(data, r, out) }
                .find(_ != RunMatches).getOrElse(RunMatches)
            catch { case _: java.io.EOFException => BytesDiffer }
            finally data.close()
          read match {
            case RunMatches => Some(out.toSeq)
            // every damaged run is named: the whole index's
            case BytesDiffer => requireReplaced(fs, compact, whole().getOrElse(index)); None
            case LinesDiffer => None
          }
        }
      }
    }
  }

  sealed private trait RunRead
  private case object RunMatches extends RunRead
  private case object BytesDiffer extends RunRead // its CRC32C, or the file ends inside it
  private case object LinesDiffer extends RunRead

  /**
   * Adds the paths of `run`'s lines to `out` and tells whether they match the run: its bytes are
   * read to the end whatever the lines hold, so that damaged bytes are told from a wrong index.
   */
  private def readRun(
      in: java.io.InputStream,
      run: IndexRun,
      out: mutable.ArrayBuffer[String]
  ): RunRead = {
    val checked = new java.util.zip.CheckedInputStream(
      new CompactIndex.BoundedStream(in, run.length),
      Compat.crc32c()
    )
    val r = new BufferedReader(new InputStreamReader(checked, UTF_8), 1 << 16)
    var linesMatch = r.read() == '\n'
    var n = 0L
    var line = r.readLine()
    while (line != null) {
      if (linesMatch) {
        linesMatch = LogFormat.taggedBatch(line) == run.batchId
        pathOf(line) match {
          case Some(p) if linesMatch => out += p
          case _ => linesMatch = false
        }
      }
      n += 1
      line = r.readLine()
    }
    if (checked.getChecksum.getValue != run.crc) BytesDiffer
    else if (!linesMatch || n != run.count) LinesDiffer
    else RunMatches
  }

  /**
   * Fails with `CORRUPT_LOG`, naming every run that does not match, if `compact` still has the
   * name, length and modification time `index` records; returns if it was replaced meanwhile.
   */
  private def requireReplaced(fs: FileSystem, compact: Path, index: CompactIndex): Unit = {
    val status =
      try fs.getFileStatus(compact)
      catch { case _: FileNotFoundException => return }
    if (index.matches(status)) {
      val in = fs.open(compact)
      val runs =
        try CompactIndex.damagedRuns(index, in)
        finally in.close()
      if (runs.nonEmpty) {
        throw BatchLogException.damagedCompactFile(
          compact.toString,
          CompactIndex.pathOf(compact).toString,
          compact.getParent.getParent.toString,
          runs.map(CompactIndex.describe)
        )
      }
    }
  }

  private def fromBatchFile(fs: FileSystem, file: Path, batch: Long): Option[Seq[String]] = {
    val in =
      try fs.open(file)
      catch { case _: FileNotFoundException => return None }
    val out = mutable.ArrayBuffer.empty[String]
    var tagged = true
    try LogFiles.readLines(in, file.toString) { (line, _) =>
        tagged &&= LogFormat.taggedBatch(line).contains(batch)
        if (tagged) pathOf(line) match {
          case Some(p) => out += p
          case None => tagged = false
        }
      }
    finally in.close()
    if (tagged) Some(out.toSeq) else None
  }

  /**
   * A tagged line's path: cut from its head when it has the canonical shape, else decoded; None for
   * a line that does not decode (the long way names it).
   */
  private def pathOf(line: String): Option[String] =
    LogFormat.pathOf(line).orElse(scala.util.Try(LogFormat.decode(line).path).toOption)
}
