package io.batchlog.log

import java.nio.charset.StandardCharsets.UTF_8

import scala.util.control.NonFatal

import org.apache.hadoop.fs.{FileStatus, PositionedReadable}

/**
 * The `v3` form of a [[CompactIndex]] (its format is documented there): a small head, read with one
 * ranged read, that says which runs (by offset and batch range) each block of runs holds, and the
 * blocks, each read with one ranged read and proved on its own. A lookup of one batch reads the
 * head and the block(s) whose batch range holds it, whatever the number of runs: a sink that never
 * drops entries has one run per batch, 100,000 at 100,000 batches.
 */
private[batchlog] object IndexBlocks {
  val Header = "batchlog-index v3"

  /** Runs per block: at 100,000 runs a head of ~12 KB and blocks of ~18 KB. */
  val RunsPerBlock = 512

  /** The first line: the header and the head's length in bytes, fixed-width (10 digits). */
  private val FirstLineLength = Header.length + 12

  /** `checksum <8 hex digits>\n` */
  private val ChecksumLineLength = 18

  /** What a lookup reads first: the head of any index up to ~1,000 blocks, or a whole small one. */
  val FirstRead: Int = 64 * 1024

  /** One block of runs as the head describes it; `at` is its offset in the index file. */
  final case class Block(
      runs: Int,
      untagged: Int,
      firstOffset: Long,
      endOffset: Long,
      minBatch: Long, // Long.MaxValue: no tagged run
      maxBatch: Long, // -1: no tagged run
      at: Long,
      length: Int,
      crc: Long
  ) {
    def mayHold(from: Long, to: Long): Boolean =
      untagged > 0 || (minBatch <= to && maxBatch >= from)
  }

  /** A proved head: the compact file it names and its blocks, in offset order. */
  final case class Head(
      compactName: String,
      compactLength: Long,
      compactModTime: Long,
      droppedEntries: Long,
      droppedMaxBatch: Long,
      length: Int,
      blocks: Vector[Block],
      etag: Option[String] = None
  ) {
    def matches(status: FileStatus): Boolean =
      status.getPath.getName == compactName && status.getLen == compactLength &&
        status.getModificationTime == compactModTime
    def untagged: Boolean = blocks.exists(_.untagged > 0)
    def end: Long = blocks.lastOption.map(b => b.at + b.length).getOrElse(length.toLong)
  }

  /** An index file that ends before its head or its last block. */
  val Truncated = "it is truncated"

  private def hex(x: Long) = java.lang.Long.toHexString(x)

  /** The `v3` bytes of `index`, its runs in offset order. */
  def toBytes(index: CompactIndex): Array[Byte] = new Blocks(index.runs).toBytes(index)

  /**
   * The blocks of a `v3` index of `runs`, formatted: the whole index but its head's `compact` line,
   * which holds the compact file's modification time. Compaction formats them before it publishes
   * the compact file and writes the index right after, with the time the store gave the file:
   * readers that meet the compact file before its index wait for it ([[CompactIndexReads]]), so the
   * gap is kept to a stat and a write.
   */
  final class Blocks(runs: Vector[IndexRun]) {
    private val sorted = runs.sortBy(_.offset)

    /** The run that ends the compact file: the new batch's lines, if it logged any. */
    def lastRun: Option[IndexRun] = sorted.lastOption
    private val blockBytes = sorted.grouped(RunsPerBlock).map { rs =>
      val sb = new java.lang.StringBuilder(rs.length * 40)
      rs.foreach(CompactIndex.appendRun(sb, _))
      (rs, sb.toString.getBytes(UTF_8))
    }.toVector
    private val blockLines = {
      val body = new java.lang.StringBuilder()
      blockBytes.foreach { case (rs, bytes) =>
        val tagged = rs.flatMap(_.batchId)
        body.append(s"block ${rs.length} ${rs.count(_.batchId.isEmpty)} ${rs.head.offset} ")
          .append(s"${rs.last.offset + rs.last.length} ")
          .append(s"${tagged.reduceOption(_ min _).getOrElse("-")} ")
          .append(s"${tagged.reduceOption(_ max _).getOrElse("-")} ")
          .append(s"${bytes.length} ${hex(CompactIndex.crcOf(bytes, bytes.length))}\n")
      }
      body.toString
    }

    /** The `v3` bytes of `index`, whose runs are these blocks' runs. */
    def toBytes(index: CompactIndex): Array[Byte] = {
      require(index.runs eq runs, "an index of other runs than its blocks'")
      val rest = (CompactIndex.compactLine(index) + "\n" + blockLines).getBytes(UTF_8)
      // the checksum in 8 hex digits: the head's length is known before its checksum
      val len = FirstLineLength + rest.length + ChecksumLineLength
      val covered = f"$Header $len%010d\n".getBytes(UTF_8) ++ rest
      val crc = CompactIndex.crcOf(covered, covered.length)
      val fixed = covered ++ f"checksum $crc%08x\n".getBytes(UTF_8)
      val out = new java.io.ByteArrayOutputStream(fixed.length + blockBytes.map(_._2.length).sum)
      out.write(fixed)
      blockBytes.foreach(b => out.write(b._2))
      out.toByteArray
    }
  }

  def isV3(bytes: Array[Byte]): Boolean =
    bytes.length >= Header.length + 1 && new String(
      bytes,
      0,
      Header.length + 1,
      UTF_8
    ) == Header + " "

  import CompactIndex.{ChecksumLine, Hex}
  private val FirstLine = s"${Header.replace(" ", "\\s")} (\\d{10})".r
  private val BlockLine = s"block (\\d+) (\\d+) (\\d+) (\\d+) (-|\\d+) (-|\\d+) (\\d+) ($Hex)".r

  /** The head's length from the first bytes of a `v3` index, or Left(why). */
  def headLength(first: Array[Byte], n: Int): Either[String, Int] =
    if (n < FirstLineLength) Left(Truncated)
    else new String(first, 0, FirstLineLength - 1, UTF_8) match {
      case FirstLine(len) if first(FirstLineLength - 1) == '\n' && len.toInt >= FirstLineLength =>
        Right(len.toInt)
      case _ => Left(s"its first line is not '$Header <length>'")
    }

  /**
   * Proves the head (its bytes `[0, len)`) of a `v3` index for compact file `compactName` of
   * `status`: its checksum, the compact file's name, length and modification time, and blocks that
   * each hold at least one run and tile the compact file from the end of its `v1` header to its
   * end.
   */
  def proveHead(
      bytes: Array[Byte],
      len: Int,
      compactName: String,
      status: FileStatus
  ): Either[String, Head] =
    try {
      if (bytes.length < len) return Left(Truncated)
      if (bytes(len - 1) != '\n') return Left("its head does not end with a checksum line")
      val lastStart = bytes.lastIndexOf('\n'.toByte, len - 2) + 1
      val sum = new String(bytes, lastStart, len - 1 - lastStart, UTF_8) match {
        case ChecksumLine(h) => java.lang.Long.parseLong(h, 16)
        case _ => return Left("its head does not end with a checksum line")
      }
      if (CompactIndex.crcOf(bytes, lastStart) != sum) return Left("its checksum does not match")
      val lines = new String(bytes, 0, lastStart, UTF_8).split('\n')
      if (lines.length < 2) return Left("it has no compact line")
      val c = CompactIndex.parseCompactLine(lines(1))
        .getOrElse(return Left("its line 2 is not a compact line"))
      val clen = c.compactLength
      CompactIndex.requireIdentity(c.compactName, clen, c.compactModTime, compactName, status)
        .foreach(w => return Left(w))
      var at = len.toLong
      var end = CompactIndex.FirstOffset
      val blocks = lines.iterator.drop(2).zipWithIndex.map {
        case (BlockLine(n, u, first, last, lo, hi, l, crc), _) =>
          val b = Block(
            n.toInt,
            u.toInt,
            first.toLong,
            last.toLong,
            if (lo == "-") Long.MaxValue else lo.toLong,
            if (hi == "-") -1L else hi.toLong,
            at,
            l.toInt,
            java.lang.Long.parseLong(crc, 16)
          )
          if (b.runs <= 0 || b.untagged > b.runs || b.length <= 0 || b.endOffset <= b.firstOffset) {
            return Left(s"its block at byte ${b.firstOffset} is empty")
          }
          if (b.firstOffset > end)
            return Left(s"its runs leave bytes $end..${b.firstOffset} uncovered")
          if (b.firstOffset < end) return Left(s"its runs overlap at bytes ${b.firstOffset}..$end")
          end = b.endOffset
          at += b.length
          b
        case (_, i) => return Left(s"its line ${i + 3} is not a block")
      }.toVector
      if (end < clen) return Left(s"its runs leave bytes $end..$clen uncovered")
      if (end > clen) return Left(s"its runs end at byte $end, past the end of the compact file")
      Right(
        Head(
          c.compactName,
          clen,
          c.compactModTime,
          c.droppedEntries,
          c.droppedMaxBatch,
          len,
          blocks,
          c.etag
        )
      )
    } catch { case NonFatal(e) => Left(s"it cannot be parsed (${e.getMessage})") }

  /**
   * Proves block `b` of a proved head from its bytes: their CRC32C, then runs (each of at least one
   * line) that tile the block's bytes of the compact file in order, as many as the head says, with
   * the head's untagged count and each tagged batch within the head's range.
   */
  def proveBlock(b: Block, bytes: Array[Byte]): Either[String, Vector[IndexRun]] =
    try {
      val where = s"its block at byte ${b.at}"
      if (bytes.length != b.length || CompactIndex.crcOf(bytes, bytes.length) != b.crc) {
        return Left(s"$where does not match its checksum")
      }
      var end = b.firstOffset
      val runs = new String(bytes, UTF_8).split('\n').iterator.map { line =>
        val r = CompactIndex.parseRun(line)
          .getOrElse(return Left(s"$where has a line that is not a run"))
        if (r.count <= 0 || r.length <= 0) return Left(s"its run at byte ${r.offset} is empty")
        if (r.offset > end) return Left(s"its runs leave bytes $end..${r.offset} uncovered")
        if (r.offset < end) return Left(s"its runs overlap at bytes ${r.offset}..$end")
        if (r.batchId.exists(x => x < b.minBatch || x > b.maxBatch)) {
          return Left(s"$where holds batch ${r.batchId.get} outside its range")
        }
        end = r.offset + r.length
        r
      }.toVector
      if (
        runs.length != b.runs || runs.count(_.batchId.isEmpty) != b.untagged ||
        end != b.endOffset
      ) {
        return Left(s"$where does not hold the runs its head says")
      }
      Right(runs)
    } catch { case NonFatal(e) => Left(s"it cannot be parsed (${e.getMessage})") }

  /** Every block of a `v3` index's bytes, proved: the index's runs, or Left(why). */
  def prove(
      bytes: Array[Byte],
      compactName: String,
      status: FileStatus
  ): Either[String, CompactIndex] =
    for {
      len <- headLength(bytes, bytes.length)
      head <- proveHead(bytes, len, compactName, status)
      _ <- if (bytes.length < head.end) Left(Truncated)
      else if (bytes.length > head.end)
        Left(s"it is ${bytes.length} bytes, its head says ${head.end}")
      else Right(())
      runs <- head.blocks.foldLeft[Either[String, Vector[IndexRun]]](Right(Vector.empty)) {
        (acc, b) =>
          acc.flatMap(rs =>
            proveBlock(b, java.util.Arrays.copyOfRange(bytes, b.at.toInt, (b.at + b.length).toInt))
              .map(rs ++ _)
          )
      }
    } yield CompactIndex(
      head.compactName,
      head.compactLength,
      head.compactModTime,
      runs,
      head.droppedEntries,
      head.droppedMaxBatch,
      head.etag
    )

  /** Up to `len` bytes at `pos` of `in` (fewer at its end). */
  def readAt(in: PositionedReadable, pos: Long, len: Int): (Array[Byte], Int) = {
    val buf = new Array[Byte](len)
    var n = 0
    var r = 0
    while (n < len && r >= 0) {
      r = in.read(pos + n, buf, n, len - n)
      if (r > 0) n += r
    }
    (buf, n)
  }

  /**
   * The head of the index `in` read by ranged reads (one, for a head up to [[FirstRead]] bytes),
   * proved for compact file `status`: Right(None) if the index is not `v3` (read it whole),
   * Left(why) if it is not proved.
   */
  def readHead(
      in: PositionedReadable,
      compactName: String,
      status: FileStatus
  ): Either[String, Option[Head]] = readHeadAndFirst(in, compactName, status).map(_.map(_._1))

  /**
   * [[readHead]], with the bytes its first read got (the whole index, if it is short): blocks
   * inside them are read from them ([[readBlock]]), with no other request.
   */
  def readHeadAndFirst(
      in: PositionedReadable,
      compactName: String,
      status: FileStatus
  ): Either[String, Option[(Head, Array[Byte])]] = {
    val (first, n) = readAt(in, 0L, FirstRead)
    val got = java.util.Arrays.copyOf(first, n)
    if (!isV3(got)) Right(None)
    else headLength(got, n).flatMap { len =>
      val bytes = if (len <= n) got else readAt(in, 0L, len)._1
      proveHead(bytes, len, compactName, status).map(h => Some((h, got)))
    }
  }

  /**
   * Block `b` from `read` (the index's first bytes) if it is there, else one ranged read; proved.
   */
  def readBlock(
      in: PositionedReadable,
      b: Block,
      read: Array[Byte] = Array.emptyByteArray
  ): Either[String, Vector[IndexRun]] =
    if (b.at + b.length <= read.length) {
      proveBlock(b, java.util.Arrays.copyOfRange(read, b.at.toInt, b.at.toInt + b.length))
    } else {
      val (bytes, n) = readAt(in, b.at, b.length)
      if (n < b.length) Left(s"its block at byte ${b.at} is truncated")
      else proveBlock(b, bytes)
    }
}
