package io.batchlog.log

import java.io.{InputStream, OutputStream}
import java.nio.charset.StandardCharsets.UTF_8
import java.util.zip.Checksum

import scala.util.control.NonFatal

import org.apache.hadoop.fs.{FileStatus, Path}

import io.batchlog.shim.CheckpointFileManager
import io.batchlog.Compat

/**
 * A run of consecutive lines of one batch (`None`: untagged) in a compact file: the bytes `[offset,
 * offset + length)`, each line preceded by its `\n`, whose CRC32C is `crc`.
 */
final case class IndexRun(batchId: Option[Long], offset: Long, length: Long, count: Long, crc: Long)

/**
 * The per-batch index beside a compact file, `N.compact.index`: where each batch's lines are, so
 * that the files of one batch are read with one seek instead of a scan of the whole log. Compaction
 * writes entries in batch order, so a compact file has about one run per batch: a sink that never
 * drops entries has 100,000 runs at 100,000 batches. So compaction writes `v3`, an index a lookup
 * searches without reading it whole: a head (one ranged read) that says which offsets and batches
 * each block of up to [[IndexBlocks.RunsPerBlock]] runs covers, and the blocks (one ranged read
 * each), every part proved by its own checksum.
 *
 * {{{
 *   batchlog-index v3 <headLength, 10 digits>      (the head's bytes, this line to its checksum line)
 *   compact <compactFileName> <length> <modificationTime> dropped <entries> <maxBatch>[ etag <e>]
 *   block <runs> <untaggedRuns> <firstOffset> <endOffset> <minBatch|-> <maxBatch|-> <bytes> <crc32c>
 *                                                   (one line per block, in offset order; batches
 *                                                    of its tagged runs, '-' if none; crc32c in hex)
 *   checksum <crc32c, 8 hex digits, of every byte of the head before this line>
 *   <batchId|-> <offset> <length> <count> <crc32c>  (the runs, in offset order, as in v2: block 1's
 *                                                    lines, then block 2's, ...: no separators)
 * }}}
 *
 * Block `i` starts in the index file at `headLength` plus the bytes of the blocks before it. The
 * head is proved on its own (checksum; the compact file's name, length and modification time; its
 * blocks, each of at least one run, tile the compact file from the end of its `v1` header to its
 * end); a block when it is read (its bytes' CRC32C as the head records it; its runs, each of at
 * least one line, tile the block's `[firstOffset, endOffset)` in order; as many runs and untagged
 * runs as the head says; each tagged batch inside the block's range). A lookup of batch `b` reads
 * the head and the blocks whose range holds `b` (or that hold untagged runs), so every run it uses
 * is proved as a `v2` index's are, and the runs it does not read cannot hide `b`'s lines: the
 * blocks tile the compact file and a block holds only batches in its range. A full load proves
 * every block and that the file ends after the last.
 *
 * `v2` (written before; still read, proved and verified as it always was, and rewritten as `v3` by
 * `repair` only when it is damaged):
 *
 * {{{
 *   batchlog-index v2
 *   compact <compactFileName> <length> <modificationTime> dropped <entries> <maxBatch>[ etag <e>]
 *   <batchId|-> <offset> <length> <count> <crc32c>     (one line per run, crc32c in hex)
 *   checksum <crc32c, hex, of every byte of the index before this line>
 * }}}
 *
 * Why so much: an index is a shortcut past the compact file, and a wrong shortcut is worse than
 * none. An index truncated at a line boundary still parses; trusted, it hides the later batches
 * from readers and makes the next compaction copy only the runs it lists, silently losing entries.
 * So an index is used only once [[CompactIndex.prove proved]]:
 *
 *   - the last line is the checksum of all the bytes before it (catches truncation, random bytes,
 *     bit rot and partial writes);
 *   - it names its compact file, with that file's length and modification time (catches an index
 *     renamed from another compact file or left from an earlier version of it);
 *   - its runs, sorted by offset, tile the compact file exactly, from the end of the `v1` header to
 *     the end of the file, each of at least one line (so no entry can be outside every run);
 *   - each run's CRC32C is checked whenever its bytes are read or copied (catches bit rot in the
 *     compact file, or a compact file rewritten with the same length and modification time).
 *
 * A compact file is written once. So a run whose bytes do not match its CRC32C while the compact
 * file keeps the name, length and modification time the index records is damage, never a stale
 * index: readers, lookups and compaction fail with `CORRUPT_LOG` naming the file, the batch and its
 * bytes (a rescan would take the damaged lines for the truth and, in compaction, copy them into the
 * next compact file under a fresh, matching CRC); `verify` reports it and `repair` restores that
 * batch's entries. Only a compact file whose identity changed is rescanned.
 *
 * An unproved index (or a legacy `v1` one, without checksums) is never used: readers rebuild the
 * index in memory by one scan of the compact file (reads never write), compaction copies only from
 * a proved or freshly scanned index, `verify` reports a damaged one and `repair` rewrites it. The
 * name is not a number, so Spark's log ignores the file. `dropped` records what retention removed:
 * the number of entries at this compaction, and the newest batch it dropped entries of at this or
 * any earlier compaction (-1: none; carried from the previous compact file's proved index, so the
 * latest index is the sink's retention watermark: batches above it lost nothing). `etag` (optional)
 * is the object store's ETag of the compact file when the index was written: a server-side
 * compaction copies the file's ranges only on that condition ([[ObjectStoreCopy]]).
 */
final case class CompactIndex(
    compactName: String,
    compactLength: Long,
    compactModTime: Long,
    runs: Vector[IndexRun],
    droppedEntries: Long,
    droppedMaxBatch: Long,
    etag: Option[String] = None
) {

  def matches(status: FileStatus): Boolean =
    status.getPath.getName == compactName && status.getLen == compactLength &&
      status.getModificationTime == compactModTime

  def entries: Long = runs.map(_.count).sum

  /** The index file's bytes as compaction writes them: `v3` ([[IndexBlocks]]). */
  def toBytes: Array[Byte] = IndexBlocks.toBytes(this)

  /** The `v2` bytes of this index, checksum line included (as batchlog wrote them before `v3`). */
  def toBytesV2: Array[Byte] = {
    val sb = new java.lang.StringBuilder(CompactIndex.HeaderV2).append('\n')
    sb.append(CompactIndex.compactLine(this)).append('\n')
    runs.foreach(CompactIndex.appendRun(sb, _))
    val body = sb.toString.getBytes(UTF_8)
    val line = s"checksum ${java.lang.Long.toHexString(CompactIndex.crcOf(body, body.length))}\n"
    body ++ line.getBytes(UTF_8)
  }
}

object CompactIndex {
  val Suffix = ".index"

  /** The version of the index this batchlog writes (`v3`); it reads `v2` too. */
  val Version = 3

  /** The header of the index compaction writes. */
  val Header: String = IndexBlocks.Header
  val HeaderV2 = "batchlog-index v2"
  val LegacyHeader = "batchlog-index v1"

  /** The reason an index of an older sink is not used; not a damage (`verify` counts it). */
  val LegacyReason = "it is a legacy v1 index (without checksums)"

  private val NewerPrefix = "it is an index of a newer batchlog"

  /**
   * The reason an index of a version above [[Version]] (a newer batchlog wrote it) is not used:
   * this batchlog cannot prove it, so it reads the compact file instead, as for a legacy one. Not a
   * damage either: `verify` counts it and `repair` leaves it for the version that wrote it.
   */
  def newerReason(version: Long): String =
    s"$NewerPrefix (batchlog-index v$version; this batchlog reads v2 and v$Version)"

  /** True for the reason of an index that is missing, legacy or newer: expected, not damage. */
  def isExpectedReason(why: String): Boolean =
    why == AbsentReason || why == LegacyReason || why.startsWith(NewerPrefix)

  private val VersionHeader = "batchlog-index v([0-9]{1,18})(?: .*)?".r

  /** The reason a compact file without an index has none in use; not a damage either. */
  val AbsentReason = "there is no index"

  /** Where the first run of a compact file starts: after its `v1` header. */
  val FirstOffset: Long = LogFormat.Header.length.toLong

  def pathOf(compactFile: Path): Path =
    new Path(compactFile.getParent, compactFile.getName + Suffix)

  def isIndexFile(name: String): Boolean =
    name.endsWith(Suffix) && LogLayout.isCompactName(name.stripSuffix(Suffix))

  def crcOf(bytes: Array[Byte], len: Int): Long = {
    val c = Compat.crc32c()
    c.update(bytes, 0, len)
    c.getValue
  }

  def write(fm: CheckpointFileManager, file: Path, index: CompactIndex): Unit =
    write(fm, file, index.toBytes)

  /** Writes index bytes (`v3`, from [[IndexBlocks.Blocks]]) to `file`, replacing any there. */
  def write(fm: CheckpointFileManager, file: Path, bytes: Array[Byte]): Unit =
    LogFiles.publish(fm, file, overwrite = true)(_.write(bytes))

  /** The bytes of the index at `file`: None if it is missing, Left(reason) if unreadable. */
  def readBytes(fm: CheckpointFileManager, file: Path): Option[Either[String, Array[Byte]]] =
    try {
      val in = LogFiles.open(fm, file)
      try Some(Right(Compat.readAllBytes(in)))
      finally in.close()
    } catch {
      case _: java.io.FileNotFoundException => None
      case NonFatal(e) =>
        Some(Left(s"it cannot be read (${e.getClass.getSimpleName}: ${e.getMessage})"))
    }

  /**
   * The index at `file` beside the compact file of `status`: None if there is none, else the proved
   * index or the reason it is not proved (see [[prove]]).
   */
  def load(
      fm: CheckpointFileManager,
      file: Path,
      status: FileStatus
  ): Option[Either[String, CompactIndex]] =
    readBytes(fm, file).map(_.flatMap(prove(_, status.getPath.getName, status)))

  /**
   * Proves an index (its bytes) for compact file `compactName` of `status`: Right(index) if its
   * checksum matches, it names that compact file with its current length and modification time, and
   * its runs (each of at least one line) tile `[2, length)` with no gap or overlap; else Left(the
   * reason, a short text). The runs' own CRCs can only be checked against the compact file's bytes:
   * readers and compaction check each run they use, [[damagedRuns]] checks them all.
   */
  def prove(
      bytes: Array[Byte],
      compactName: String,
      status: FileStatus
  ): Either[String, CompactIndex] =
    try proveUnsafe(bytes, compactName, status)
    catch { case NonFatal(e) => Left(s"it cannot be parsed (${e.getMessage})") }

  /** Why an index naming compact file `name` of `len` bytes at time `mod` is not `status`'s. */
  private[log] def requireIdentity(
      name: String,
      len: Long,
      mod: Long,
      compactName: String,
      status: FileStatus
  ): Option[String] =
    if (name != compactName) Some(s"it describes $name, not $compactName")
    else if (len != status.getLen) {
      Some(s"the compact file is ${status.getLen} bytes, the index says $len")
    } else if (mod != status.getModificationTime) {
      Some(s"the compact file's modification time is ${status.getModificationTime}, " +
        s"the index says $mod")
    } else None

  // The lines both versions share (`v3` in [[IndexBlocks]]): written and parsed here only. `Hex`
  // is a constant (inlined): IndexBlocks builds a pattern with it while this object initializes.
  final private[log] val Hex = "[0-9a-f]{1,8}"
  private[log] val ChecksumLine = s"checksum ($Hex)".r
  private val CompactLine =
    "compact (\\S+) (\\d+) (-?\\d+) dropped (\\d+) (-?\\d+)(?: etag (\\S+))?".r
  private val RunLine = s"(-|\\d+) (\\d+) (\\d+) (\\d+) ($Hex)".r

  /** The `compact` line of `index` (no `\n`). */
  private[log] def compactLine(index: CompactIndex): String = {
    import index._
    val line = s"compact $compactName $compactLength $compactModTime dropped " +
      s"$droppedEntries $droppedMaxBatch"
    etag.fold(line)(e => s"$line etag $e")
  }

  /** The index a `compact` line describes, without its runs; None if it is not one. */
  private[log] def parseCompactLine(line: String): Option[CompactIndex] = line match {
    case CompactLine(n, l, m, d, x, e) =>
      Some(CompactIndex(n, l.toLong, m.toLong, Vector.empty, d.toLong, x.toLong, Option(e)))
    case _ => None
  }

  /** Appends run `r`'s line, `\n` included. */
  private[log] def appendRun(sb: java.lang.StringBuilder, r: IndexRun): Unit = {
    sb.append(r.batchId.map(_.toString).getOrElse("-")).append(' ').append(r.offset).append(' ')
      .append(r.length).append(' ').append(r.count).append(' ')
      .append(java.lang.Long.toHexString(r.crc)).append('\n')
  }

  /** The run a run line describes; None if it is not one. */
  private[log] def parseRun(line: String): Option[IndexRun] = line match {
    case RunLine(b, off, length, n, crc) =>
      Some(
        IndexRun(
          if (b == "-") None else Some(b.toLong),
          off.toLong,
          length.toLong,
          n.toLong,
          java.lang.Long.parseLong(crc, 16)
        )
      )
    case _ => None
  }

  private def proveUnsafe(
      bytes: Array[Byte],
      compactName: String,
      status: FileStatus
  ): Either[String, CompactIndex] = {
    if (bytes.isEmpty) return Left("it is empty")
    val firstNl = bytes.indexOf('\n'.toByte)
    val first = new String(bytes, 0, if (firstNl < 0) bytes.length else firstNl, UTF_8)
    if (first == LegacyHeader) return Left(LegacyReason)
    if (IndexBlocks.isV3(bytes)) return IndexBlocks.prove(bytes, compactName, status)
    first match {
      case VersionHeader(v) if v.toLong > Version => return Left(newerReason(v.toLong))
      case _ =>
    }
    if (first != HeaderV2) return Left(s"its first line is not '$Header <length>' or '$HeaderV2'")
    // The last line, `checksum <hex>\n`, covers every byte before it.
    if (bytes.last != '\n') return Left("it does not end with a checksum line: it is truncated")
    val lastStart = bytes.lastIndexOf('\n'.toByte, bytes.length - 2) + 1
    val last = new String(bytes, lastStart, bytes.length - 1 - lastStart, UTF_8)
    val sum = last match {
      case ChecksumLine(hex) => java.lang.Long.parseLong(hex, 16)
      case _ => return Left("it does not end with a checksum line: it is truncated")
    }
    if (crcOf(bytes, lastStart) != sum) return Left("its checksum does not match")
    // Checksummed: what follows only fails for an index written wrong, or for another file.
    val lines = new String(bytes, 0, lastStart, UTF_8).split('\n')
    if (lines.length < 2) return Left("it has no compact line")
    val head = parseCompactLine(lines(1)).getOrElse(return Left("its line 2 is not a compact line"))
    val len = head.compactLength
    requireIdentity(head.compactName, len, head.compactModTime, compactName, status)
      .foreach(why => return Left(why))
    val runs = lines.iterator.drop(2).zipWithIndex.map { case (line, i) =>
      parseRun(line).getOrElse(return Left(s"its line ${i + 3} is not a run"))
    }.toVector
    runs.find(r => r.count <= 0 || r.length <= 0).foreach { r =>
      return Left(s"its run at byte ${r.offset} is empty")
    }
    var end = FirstOffset
    runs.sortBy(_.offset).foreach { r =>
      if (r.offset > end) return Left(s"its runs leave bytes $end..${r.offset} uncovered")
      if (r.offset < end) return Left(s"its runs overlap at bytes ${r.offset}..$end")
      end = r.offset + r.length
    }
    if (end < len) return Left(s"its runs leave bytes $end..$len uncovered")
    if (end > len) return Left(s"its runs end at byte $end, past the end of the compact file")
    Right(head.copy(runs = runs))
  }

  /**
   * Every run of `index` whose CRC32C does not match the compact file's bytes `in` (the whole file,
   * read once), in offset order; a run the file ends inside, and every run after it, counts as not
   * matching. `index` must be proved (its runs tile the file). Whether a mismatch is damage or a
   * stale index is the caller's to tell ([[CompactIndex.matches]]: a compact file is written once,
   * so while it keeps the name, length and modification time its index records, it is damage).
   */
  def damagedRuns(index: CompactIndex, in: InputStream): Seq[IndexRun] = {
    val damaged = Seq.newBuilder[IndexRun]
    foreachRun(index, in, keepUpTo = 0)((r, _, matches) => if (!matches) damaged += r)
    damaged.result()
  }

  /**
   * Reads compact file bytes `in` once, front to back, and calls `fn(run, bytes, matches)` for each
   * run of `index` in offset order, once its last byte is read: `matches` as [[damagedRuns]] judges
   * it, `bytes` the run's bytes if it is at most `keepUpTo` bytes long and the file did not end
   * inside it, else null. So a caller that needs both the damage and the lines (`verify`) reads the
   * file once, holding one run at a time. `at`: the file offset `in` is at (after a header read).
   */
  def foreachRun(index: CompactIndex, in: InputStream, keepUpTo: Long, at: Long = 0L)(
      fn: (IndexRun, Array[Byte], Boolean) => Unit
  ): Unit = {
    val buf = new Array[Byte](1 << 16)
    var pos = at
    var ended = false
    def read(upTo: Long, c: Option[Checksum], keep: Array[Byte], keptFrom: Long): Unit =
      while (!ended && pos < upTo) {
        val n = in.read(buf, 0, math.min(buf.length.toLong, upTo - pos).toInt)
        if (n < 0) ended = true
        else {
          c.foreach(_.update(buf, 0, n))
          if (keep != null) System.arraycopy(buf, 0, keep, (pos - keptFrom).toInt, n)
          pos += n
        }
      }
    index.runs.sortBy(_.offset).foreach { r =>
      read(r.offset, None, null, 0L)
      val c = Compat.crc32c()
      val keep = if (r.length <= keepUpTo) new Array[Byte](r.length.toInt) else null
      read(r.offset + r.length, Some(c), keep, r.offset)
      fn(r, if (ended) null else keep, !ended && c.getValue == r.crc)
    }
  }

  /** A run as error messages name it: `batch 7 (bytes 120..480)`. */
  def describe(r: IndexRun): String =
    s"batch ${r.batchId.map(_.toString).getOrElse("-")} (bytes ${r.offset}..${r.offset + r.length})"

  /**
   * Calls `fn(line, offset)` for each entry line of a compact file's bytes `in`, after checking its
   * `v1` header (`badHeader(header)` makes the error), with `crc` updated with every byte from the
   * line's `\n` on only after `fn` returned; returns the file's length. Works on the raw bytes, so
   * offsets and CRCs are exact whatever the lines hold.
   */
  def scanLines(in: InputStream, crc: Checksum, badHeader: String => Throwable)(
      fn: (String, Long) => Unit
  ): Long = {
    val buf = new Array[Byte](1 << 16)
    var line = new Array[Byte](1024) // the current line's bytes, without its '\n'
    var lineLen = 0
    var pos = 0L // offset of buf(0) while scanning a buffer
    var lineStart = -1L // offset of the current line's '\n'; -1 while in the header
    def append(from: Int, until: Int): Unit = {
      val n = until - from
      if (lineLen + n > line.length) {
        line = java.util.Arrays.copyOf(line, math.max(line.length * 2, lineLen + n))
      }
      System.arraycopy(buf, from, line, lineLen, n)
      lineLen += n
    }
    var empty = false
    def endLine(): Unit = {
      if (lineStart < 0) {
        val header = new String(line, 0, lineLen, UTF_8)
        if (header != LogFormat.Header) throw badHeader(if (empty) null else header)
      } else {
        fn(new String(line, 0, lineLen, UTF_8), lineStart)
        crc.update('\n')
        crc.update(line, 0, lineLen)
      }
      lineLen = 0
    }
    var n = in.read(buf)
    empty = n < 0
    while (n >= 0) {
      var i = 0
      while (i < n) {
        var j = i
        while (j < n && buf(j) != '\n') j += 1
        append(i, j)
        if (j < n) { endLine(); lineStart = pos + j }
        i = j + 1
      }
      pos += n
      n = in.read(buf)
    }
    // A trailing '\n' (no line after it) belongs to the last run, as LogFiles.readLines ignores it.
    if (lineStart < 0 || lineLen > 0) endLine()
    else crc.update('\n')
    pos
  }

  /**
   * Collects runs while a compact file is written (or scanned) line by line. `crc` must see every
   * byte written from the start of each run to its end; the builder resets it at each run start.
   */
  final class Builder(crc: Checksum = Compat.crc32c()) {
    private val runs = Vector.newBuilder[IndexRun]
    private var cur: Option[Long] = None
    private var start = 0L
    private var count = 0L
    var dropped = 0L
    var droppedMaxBatch = -1L

    private def close(end: Long): Unit = if (count > 0) {
      runs += IndexRun(cur, start, end - start, count, crc.getValue); count = 0
    }

    /** A line of `batch` starts at byte `offset` (at its `\n`), every byte before it counted. */
    def line(batch: Option[Long], offset: Long): Unit = {
      if (count > 0 && batch != cur) close(offset)
      if (count == 0) { cur = batch; start = offset; crc.reset() }
      count += 1
    }

    /** A whole run (its CRC checked by the caller) copied from another compact file to `offset`. */
    def run(r: IndexRun, offset: Long): Unit = {
      close(offset)
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

    private var closed: Vector[IndexRun] = null

    /** The runs, the last one ended at `endOffset`. */
    private def runsTo(endOffset: Long): Vector[IndexRun] = {
      if (closed == null) { close(endOffset); closed = runs.result() }
      closed
    }

    /** The `v3` blocks of the runs, the last one ended at `endOffset`, formatted. */
    def blocks(endOffset: Long): IndexBlocks.Blocks = new IndexBlocks.Blocks(runsTo(endOffset))

    def result(endOffset: Long, status: FileStatus): CompactIndex = {
      CompactIndex(
        status.getPath.getName,
        status.getLen,
        status.getModificationTime,
        runsTo(endOffset),
        dropped,
        droppedMaxBatch,
        ObjectStoreCopy.etagOf(status)
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

  /**
   * Counts the bytes written through it (to know where each line starts) and updates `crc` with
   * them (the CRC of each run, for its [[Builder]]).
   */
  final class CountingStream(out: OutputStream, crc: Checksum) extends OutputStream {
    var count = 0L
    override def write(b: Int): Unit = { out.write(b); crc.update(b); count += 1 }
    override def write(b: Array[Byte], off: Int, len: Int): Unit = {
      out.write(b, off, len); crc.update(b, off, len); count += len
    }
    override def flush(): Unit = out.flush()
    override def close(): Unit = out.close()

    /**
     * Bytes of a run copied whole from another compact file: counted, not checksummed (the run
     * keeps its CRC, checked as it was read; the next run started resets `crc`).
     */
    def copied(b: Array[Byte], off: Int, len: Int): Unit = { out.write(b, off, len); count += len }

    /** `len` bytes written past this stream, to its file's channel (a run copied there). */
    def wrotePast(len: Long): Unit = count += len
  }
}
