package io.batchlog.log

import java.io.{BufferedReader, InputStreamReader, OutputStream}
import java.nio.charset.StandardCharsets.UTF_8

import scala.util.Try

import org.apache.hadoop.fs.{FileStatus, Path}

import org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager

/**
 * A run of consecutive lines of one batch (`None`: untagged) in a compact file: the bytes `[offset,
 * offset + length)`, each line preceded by its `\n`.
 */
final case class IndexRun(batchId: Option[Long], offset: Long, length: Long, count: Long)

/**
 * The per-batch index beside a compact file, `N.compact.index`: where each batch's lines are, so
 * that the files of one batch are read with one seek instead of a scan of the whole log. Compaction
 * writes entries in batch order, so a compact file has about one run per batch.
 *
 * {{{
 *   batchlog-index v1
 *   compact <length> <modificationTime> dropped <entries> <maxBatch>
 *   <batchId|-> <offset> <length> <count>        (one line per run)
 * }}}
 *
 * The name is not a number, so Spark's log ignores it. It is never trusted blindly: it is used only
 * if it names the compact file's current length and modification time, and each run read must hold
 * `count` lines of its batch; otherwise it is rebuilt by one scan of the compact file. `dropped`
 * records what retention removed at this compaction (-1: nothing).
 */
final case class CompactIndex(
    compactLength: Long,
    compactModTime: Long,
    runs: Vector[IndexRun],
    droppedEntries: Long,
    droppedMaxBatch: Long
) {

  def matches(status: FileStatus): Boolean =
    status.getLen == compactLength && status.getModificationTime == compactModTime

  def entries: Long = runs.map(_.count).sum
}

object CompactIndex {
  val Suffix = ".index"
  val Header = "batchlog-index v1"

  def pathOf(compactFile: Path): Path =
    new Path(compactFile.getParent, compactFile.getName + Suffix)

  def isIndexFile(name: String): Boolean = name.endsWith(".compact" + Suffix)

  def write(fm: CheckpointFileManager, file: Path, index: CompactIndex): Unit = {
    val out = fm.createAtomic(file, overwriteIfPossible = true)
    try {
      val sb = new StringBuilder(Header).append('\n')
      sb.append(s"compact ${index.compactLength} ${index.compactModTime} dropped ")
        .append(s"${index.droppedEntries} ${index.droppedMaxBatch}\n")
      index.runs.foreach { r =>
        sb.append(r.batchId.map(_.toString).getOrElse("-")).append(' ').append(r.offset).append(' ')
          .append(r.length).append(' ').append(r.count).append('\n')
      }
      out.write(sb.toString.getBytes(UTF_8))
      out.close()
    } catch { case e: Throwable => out.cancel(); throw e }
  }

  /** The index at `file`, or None if it is missing or unreadable. */
  def read(fm: CheckpointFileManager, file: Path): Option[CompactIndex] =
    if (!fm.exists(file)) None
    else Try {
      val in = fm.open(file)
      try {
        val r = new BufferedReader(new InputStreamReader(in, UTF_8))
        require(r.readLine() == Header)
        val Array("compact", len, mod, "dropped", dropped, maxDropped) = r.readLine().split(' ')
        val runs = Iterator.continually(r.readLine()).takeWhile(_ != null).map { l =>
          val Array(b, off, length, n) = l.split(' ')
          IndexRun(if (b == "-") None else Some(b.toLong), off.toLong, length.toLong, n.toLong)
        }.toVector
        CompactIndex(len.toLong, mod.toLong, runs, dropped.toLong, maxDropped.toLong)
      } finally in.close()
    }.toOption

  /** Collects runs while a compact file is written line by line. */
  final class Builder {
    private val runs = Vector.newBuilder[IndexRun]
    private var cur: Option[Long] = None
    private var start = 0L
    private var count = 0L
    var dropped = 0L
    var droppedMaxBatch = -1L

    /** A line of `batch` starts at byte `offset` (at its `\n`). */
    def line(batch: Option[Long], offset: Long): Unit = {
      if (count > 0 && batch != cur) {
        runs += IndexRun(cur, start, offset - start, count); count = 0
      }
      if (count == 0) { cur = batch; start = offset }
      count += 1
    }

    /** A whole run copied from another compact file, now starting at byte `offset`. */
    def run(r: IndexRun, offset: Long): Unit = {
      if (count > 0) { runs += IndexRun(cur, start, offset - start, count); count = 0 }
      runs += r.copy(offset = offset)
    }

    /** A whole run dropped by retention. */
    def dropRun(r: IndexRun): Unit = {
      dropped += r.count
      r.batchId.foreach(b => droppedMaxBatch = math.max(droppedMaxBatch, b))
    }

    def drop(batch: Option[Long]): Unit = {
      dropped += 1
      batch.foreach(b => droppedMaxBatch = math.max(droppedMaxBatch, b))
    }

    def result(endOffset: Long, status: FileStatus): CompactIndex = {
      if (count > 0) runs += IndexRun(cur, start, endOffset - start, count)
      CompactIndex(
        status.getLen,
        status.getModificationTime,
        runs.result(),
        dropped,
        droppedMaxBatch
      )
    }
  }

  /** At most `limit` bytes of `in` (one run of a compact file). */
  final class BoundedStream(in: java.io.InputStream, limit: Long) extends java.io.InputStream {
    private var left = limit
    override def read(): Int =
      if (left <= 0) -1 else { val b = in.read(); if (b >= 0) left -= 1; b }
    override def read(buf: Array[Byte], off: Int, len: Int): Int =
      if (left <= 0) -1
      else {
        val n = in.read(buf, off, math.min(len.toLong, left).toInt)
        if (n > 0) left -= n
        n
      }
  }

  /** Counts the bytes written through it (to know where each line starts). */
  final class CountingStream(out: OutputStream) extends OutputStream {
    var count = 0L
    override def write(b: Int): Unit = { out.write(b); count += 1 }
    override def write(b: Array[Byte], off: Int, len: Int): Unit = {
      out.write(b, off, len); count += len
    }
    override def flush(): Unit = out.flush()
    override def close(): Unit = out.close()
  }
}
