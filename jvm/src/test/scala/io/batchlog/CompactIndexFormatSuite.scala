package io.batchlog

import java.io.ByteArrayInputStream
import java.nio.charset.StandardCharsets.UTF_8

import org.apache.hadoop.fs.{FileStatus, Path}
import org.scalatest.funsuite.AnyFunSuite

import io.batchlog.log.{CompactIndex, IndexRun}

/**
 * The compact index as bytes, without a log: format and parse ([[CompactIndex.toBytes]],
 * [[CompactIndex.prove]]), the runs a scan builds ([[CompactIndex.scanLines]] and the
 * [[CompactIndex.Builder]]) and how they tile a compact file.
 */
class CompactIndexFormatSuite extends AnyFunSuite {

  private val Name = "8.compact"

  private def status(length: Long, mtime: Long = 1700000000000L, name: String = Name) =
    new FileStatus(length, false, 1, 1L, mtime, new Path(s"/out/_spark_metadata/$name"))

  /** The runs a scan finds in a compact file's bytes, as compaction would index them. */
  private def scan(bytes: Array[Byte]): CompactIndex = {
    val crc = Compat.crc32c()
    val b = new CompactIndex.Builder(crc)
    val end = CompactIndex.scanLines(new ByteArrayInputStream(bytes), crc, h => new Exception(h)) {
      (line, offset) => b.line(Some(line.takeWhile(_ != ' ').toLong), offset)
    }
    assert(end === bytes.length)
    b.result(end, status(bytes.length))
  }

  /** A compact file whose lines are "<batch> <text>", batches in the given order. */
  private def compactFile(
      batches: Seq[Long],
      text: Long => String = b => s"line of $b"
  ): Array[Byte] =
    ("v1" +: batches.map(b => s"$b ${text(b)}")).mkString("\n").getBytes(UTF_8)

  /** Index bytes with `body` (the lines before the checksum) and a correct checksum line. */
  private def sealedIndex(body: String): Array[Byte] = {
    val bytes = body.getBytes(UTF_8)
    bytes ++ s"checksum ${java.lang.Long.toHexString(CompactIndex.crcOf(bytes, bytes.length))}\n"
      .getBytes(UTF_8)
  }

  private def crcOf(bytes: Array[Byte], from: Long, len: Long): Long = {
    val c = Compat.crc32c()
    c.update(bytes, from.toInt, len.toInt)
    c.getValue
  }

  test("a scan gives one run per batch change, tiling the file after its header exactly") {
    val bytes = compactFile(Seq(0L, 0L, 1L, 3L, 3L, 3L, 1L))
    val index = scan(bytes)
    assert(index.runs.map(r => (r.batchId, r.count)) ===
      Seq((Some(0L), 2L), (Some(1L), 1L), (Some(3L), 3L), (Some(1L), 1L)))
    assert(index.runs.head.offset === CompactIndex.FirstOffset)
    index.runs.zip(index.runs.tail).foreach { case (a, b) =>
      assert(a.offset + a.length === b.offset)
    }
    assert(index.runs.last.offset + index.runs.last.length === bytes.length)
    index.runs.foreach(r => assert(r.crc === crcOf(bytes, r.offset, r.length)))
    assert(index.entries === 7 && index.droppedEntries === 0 && index.droppedMaxBatch === -1)
  }

  test("a scan: a trailing newline belongs to the last run; non-ASCII and long lines count bytes") {
    val plain = compactFile(Seq(0L, 1L))
    val trailing = plain :+ '\n'.toByte
    val t = scan(trailing)
    assert(t.runs.map(_.count) === Seq(1L, 1L))
    assert(t.runs.last.length === scan(plain).runs.last.length + 1)
    assert(t.runs.last.crc === crcOf(trailing, t.runs.last.offset, t.runs.last.length))

    // 'ü' is 2 bytes; a 70,000-byte line spans the scanner's 64 KiB buffer
    val odd = compactFile(Seq(0L, 1L, 2L), b => if (b == 1L) "x" * 70000 else "üü½")
    val lines = new String(odd, UTF_8).split('\n').toSeq
    val starts = lines.init.scanLeft(0)((off, l) => off + l.getBytes(UTF_8).length + 1).tail
    val seen = Seq.newBuilder[(String, Long)]
    val end =
      CompactIndex.scanLines(
        new ByteArrayInputStream(odd),
        Compat.crc32c(),
        h => new Exception(h)
      ) {
        (line, offset) => seen += line -> offset
      }
    assert(end === odd.length)
    assert(seen.result() === lines.tail.zip(starts.map(s => (s - 1).toLong)))
    assert(CompactIndex.prove(scan(odd).toBytes, Name, status(odd.length)).isRight)
  }

  test("a scan of a header alone has no runs; a wrong or empty header is refused") {
    val header = "v1".getBytes(UTF_8)
    val index = scan(header)
    assert(index.runs.isEmpty && index.compactLength === 2)
    assert(CompactIndex.prove(index.toBytes, Name, status(2)) === Right(index))
    def headerError(bytes: Array[Byte]): String =
      intercept[Exception](
        CompactIndex.scanLines(
          new ByteArrayInputStream(bytes),
          Compat.crc32c(),
          h => new Exception(s"[$h]")
        )((_, _) => fail("no line expected"))
      ).getMessage
    assert(headerError("v2\n0 x".getBytes(UTF_8)) === "[v2]")
    assert(headerError(Array.emptyByteArray) === "[null]")
  }

  test("the builder: copied runs move to their new offset, drops are counted, empty is nothing") {
    val b = new CompactIndex.Builder()
    b.line(Some(4L), 2L)
    b.line(Some(4L), 10L)
    b.run(IndexRun(Some(5L), 900L, 30L, 3L, 0xabcL), 20L)
    b.line(None, 50L)
    b.dropRun(IndexRun(Some(2L), 0L, 9L, 4L, 0L))
    b.drop(Some(3L))
    b.drop(None)
    val r = b.result(60L, status(60L))
    assert(r.runs.map(x => (x.batchId, x.offset, x.length, x.count)) ===
      Seq((Some(4L), 2L, 18L, 2L), (Some(5L), 20L, 30L, 3L), (None, 50L, 10L, 1L)))
    assert(r.runs(1).crc === 0xabcL)
    assert(r.droppedEntries === 6L && r.droppedMaxBatch === 3L)
    val empty = new CompactIndex.Builder().result(2L, status(2L))
    assert(empty.runs.isEmpty && empty.droppedEntries === 0L && empty.droppedMaxBatch === -1L)
  }

  test(
    "v2: toBytesV2 and prove round-trip: untagged runs, extreme values, runs out of offset order"
  ) {
    val runs = Vector(
      IndexRun(Some(7L), 40L, 60L, 3L, 0xffffffffL),
      IndexRun(None, 2L, 30L, 1L, 0L),
      IndexRun(Some(Long.MaxValue), 32L, 8L, 1L, 0x1L)
    )
    Seq(
      CompactIndex(Name, 100L, 1700000000123L, runs, 0L, -1L),
      CompactIndex(Name, 100L, -5L, runs, 12L, Long.MaxValue),
      CompactIndex(Name, 2L, 0L, Vector.empty, 3L, 9L)
    ).foreach { index =>
      val bytes = index.toBytesV2
      assert(CompactIndex.prove(bytes, Name, status(index.compactLength, index.compactModTime)) ===
        Right(index))
      assert(new String(bytes, UTF_8).linesIterator.toSeq.head === CompactIndex.HeaderV2)
    }
    val text = new String(CompactIndex(Name, 100L, 5L, runs, 0L, -1L).toBytesV2, UTF_8)
    assert(text.linesIterator.toSeq.slice(1, 5) === Seq(
      s"compact $Name 100 5 dropped 0 -1",
      "7 40 60 3 ffffffff",
      "- 2 30 1 0",
      s"${Long.MaxValue} 32 8 1 1"
    ))
  }

  test("the store's ETag of the compact file: optional, last on the compact line, round-trips") {
    val runs = Vector(IndexRun(Some(1L), 2L, 48L, 1L, 0x7L))
    val etag = "\"9b2cf535f27731c9-2\"" // as S3 gives it, quotes included
    val withEtag = CompactIndex(Name, 50L, 7L, runs, 0L, -1L, Some(etag))
    val bytes = withEtag.toBytes
    assert(new String(bytes, UTF_8).linesIterator.toSeq(1) ===
      s"compact $Name 50 7 dropped 0 -1 etag $etag")
    assert(CompactIndex.prove(bytes, Name, status(50L, 7L)) === Right(withEtag))
    // an index without one (every index before it) proves as before, without an ETag
    val without = CompactIndex(Name, 50L, 7L, runs, 0L, -1L)
    assert(CompactIndex.prove(without.toBytes, Name, status(50L, 7L)).map(_.etag) === Right(None))
    // a status without an ETag (the local disk, HDFS) records none
    assert(new CompactIndex.Builder().result(2L, status(2L)).etag === None)
  }

  test("v2: prove names what is wrong with a checksummed index written wrong") {
    val compactLine = s"compact $Name 50 7 dropped 0 -1"
    val st = status(50L, 7L)
    def why(body: String) = CompactIndex.prove(sealedIndex(body), Name, st)
    val h = CompactIndex.HeaderV2
    assert(why(s"$h\n") === Left("it has no compact line"))
    assert(why(s"$h\ncompact $Name 50\n") === Left("its line 2 is not a compact line"))
    assert(why(s"$h\n$compactLine\n1 2 48 1 0\nnot a run\n") === Left("its line 4 is not a run"))
    assert(why(s"$h\n$compactLine\n1 2 48 0 0\n") === Left("its run at byte 2 is empty"))
    assert(why(s"$h\n$compactLine\n1 2 0 1 0\n1 2 48 1 0\n") === Left("its run at byte 2 is empty"))
    assert(why(s"$h\n$compactLine\n1 2 20 1 0\n2 20 30 1 0\n") ===
      Left("its runs overlap at bytes 20..22"))
    assert(why(s"$h\n$compactLine\n1 2 40 1 0\n") === Left("its runs leave bytes 42..50 uncovered"))
    assert(why(s"$h\n$compactLine\n1 3 47 1 0\n") === Left("its runs leave bytes 2..3 uncovered"))
    assert(why(s"$h\n$compactLine\n1 2 60 1 0\n") ===
      Left("its runs end at byte 62, past the end of the compact file"))
    assert(why(s"$h\n$compactLine\n1 2 48 1 0\n") ===
      Right(CompactIndex(Name, 50L, 7L, Vector(IndexRun(Some(1L), 2L, 48L, 1L, 0L)), 0L, -1L)))
    // a negative entry count is not a count: the compact line does not parse
    assert(why(s"$h\ncompact $Name 50 7 dropped -1 -1\n1 2 48 1 0\n") ===
      Left("its line 2 is not a compact line"))
  }

  test("v2: prove: a flipped byte, a missing checksum or another compact file's name") {
    val good = CompactIndex(Name, 50L, 7L, Vector(IndexRun(Some(1L), 2L, 48L, 1L, 0L)), 0L, -1L)
    val bytes = good.toBytesV2
    val flipped = bytes.updated(bytes.indexOf('5'.toByte), '6'.toByte)
    assert(
      CompactIndex.prove(flipped, Name, status(50L, 7L)) === Left("its checksum does not match")
    )
    val noChecksum = bytes.take(bytes.lastIndexOf('\n'.toByte, bytes.length - 2) + 1)
    assert(CompactIndex.prove(noChecksum, Name, status(50L, 7L)) ===
      Left("it does not end with a checksum line: it is truncated"))
    assert(CompactIndex.prove(bytes, "11.compact", status(50L, 7L, "11.compact")) ===
      Left(s"it describes $Name, not 11.compact"))
  }

  test("damagedRuns: every run whose CRC does not match the compact file's bytes, in order") {
    val bytes = compactFile(Seq(0L, 1L, 1L, 2L))
    val index = scan(bytes)
    assert(CompactIndex.damagedRuns(index, new ByteArrayInputStream(bytes)) === Nil)
    val first = index.runs.head
    val last = index.runs.last
    val changed =
      bytes.updated(bytes.length - 1, 'X'.toByte).updated(first.offset.toInt + 3, 'Y'.toByte)
    assert(CompactIndex.damagedRuns(index, new ByteArrayInputStream(changed)) === Seq(first, last))
    assert(CompactIndex.describe(last) ===
      s"batch 2 (bytes ${last.offset}..${last.offset + last.length})")
    // A file that ends inside a run: that run (and any after it) does not match.
    assert(CompactIndex.damagedRuns(index, new ByteArrayInputStream(bytes.dropRight(3))) ===
      Seq(last))
  }

  test("BoundedStream reads at most its limit, by byte and by block") {
    val in =
      new CompactIndex.BoundedStream(new ByteArrayInputStream("abcdefgh".getBytes(UTF_8)), 5L)
    assert(in.read() === 'a'.toInt)
    val buf = new Array[Byte](10)
    assert(in.read(buf, 0, 10) === 4)
    assert(new String(buf, 0, 4, UTF_8) === "bcde")
    assert(in.read() === -1 && in.read(buf, 0, 10) === -1)
  }

  test("index file names: beside their compact file, and only those count as index files") {
    assert(CompactIndex.pathOf(new Path("/o/_spark_metadata/8.compact")) ===
      new Path("/o/_spark_metadata/8.compact.index"))
    assert(CompactIndex.isIndexFile("8.compact.index"))
    assert(!CompactIndex.isIndexFile("8.index") && !CompactIndex.isIndexFile("8.compact"))
  }
}
