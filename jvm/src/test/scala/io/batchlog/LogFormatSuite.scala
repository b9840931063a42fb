package io.batchlog

import java.io.File

import scala.jdk.CollectionConverters._

import com.fasterxml.jackson.databind.ObjectMapper

import io.batchlog.log.{BatchCommit, LogFiles, LogFormat, SinkLogEntry}

/** The line format of a batch-tagged log: encoding, decoding, tags, and resolving a batch. */
class LogFormatSuite extends SparkSessionTestBase {
  import TestLogs._

  private val mapper = new ObjectMapper()

  private val awkwardPaths = Seq(
    "file:/data/out/a%20b/part-00000-batch-3-" + uuid(3, 0) + ".json",
    "file:/data/out/dir with spaces/part-00001.parquet",
    "file:/data/out/\u00fcn\u00efc\u00f8d\u00e9/\u65e5\u672c/\ud83d\ude00/part-00002.parquet",
    "file:/data/out/100%/p=%25x/part-00003.parquet",
    "file:/data/out/\"quoted\"/it's/part-00004.parquet",
    "file:/data/out/back\\slash/tab\tnew\nline/part-00005.parquet",
    "file:/data/out/x,\"batchId\":5}/part-00006.parquet",
    "file:/data/out/{}[]:,/part-00007.parquet"
  )

  test("encode/decode round-trip awkward paths, tagged and untagged") {
    for (p <- awkwardPaths; batch <- Seq(Some(0L), Some(7L), Some(Long.MaxValue), None)) {
      val e = SinkLogEntry(p, 12345L, isDir = false, 1700000000123L, 3, 134217728L, "add", batch)
      val line = LogFormat.encode(e)
      assert(!line.contains('\n') && !line.contains('\r'), line)
      assert(LogFormat.decode(line) === e)
      assert(LogFormat.isTagged(line) === batch.isDefined, line)
      // a plain JSON parser agrees
      val node = mapper.readTree(line)
      assert(node.get("path").asText === p)
      assert(node.fieldNames().asScala.toSeq === VanillaFields ++ batch.map(_ => "batchId"))
      if (batch.isEmpty) {
        val tagged = LogFormat.tagLine(line, 42L)
        assert(LogFormat.isTagged(tagged))
        assert(tagged === LogFormat.encode(e.copy(batchId = Some(42L))))
        assert(LogFormat.decode(tagged) === e.copy(batchId = Some(42L)))
      }
    }
  }

  test("isCanonical accepts exactly the tagged lines encode writes, each of which decodes") {
    for (p <- awkwardPaths; b <- Seq(0L, 7L, Long.MaxValue / 10)) {
      val e =
        SinkLogEntry(p, 12345L, isDir = b % 2 == 0, 1700000000123L, 3, 134217728L, "add", Some(b))
      val line = LogFormat.encode(e)
      assert(LogFormat.isCanonical(line), line)
      assert(LogFormat.decode(line) === e)
      // every damage that decode refuses (or that changes the line's shape) is declined
      Seq(
        line.dropRight(1),
        line.replace("\"size\":12345", "\"size\":\"12345\""),
        line.replace("\"size\":12345", "\"size\":012345"),
        line.replace("\"isDir\":", "\"isDir\":x"),
        line.replace(",\"action\":\"add\"", ""),
        line + " ",
        line.replace("\"path\":\"", "\"path\":\"\\q"),
        line.replace("\"path\":\"", "\"path\":\"\\u12G4"),
        line.replace("\"path\":\"", "\"path\":\"\t")
      ).foreach(bad => assert(!LogFormat.isCanonical(bad), bad))
    }
    // Spark's untagged lines, and numbers that could overflow, are left to decode
    assert(!LogFormat.isCanonical(LogFormat.encode(
      SinkLogEntry("file:/a", 1, isDir = false, 2, 1, 3, "add", None)
    )))
    assert(!LogFormat.isCanonical(LogFormat.encode(
      SinkLogEntry("file:/a", Long.MaxValue, isDir = false, 2, 1, 3, "add", Some(1L))
    )))
  }

  test("pathOf cuts the path from a canonical line exactly as decode reads it, or declines") {
    for (p <- awkwardPaths; batch <- Seq(Some(7L), None)) {
      val line = LogFormat.encode(
        SinkLogEntry(p, 1L, isDir = false, 2L, 1, 3L, "add", batch)
      )
      // a path with a JSON escape in it (quote, backslash, control character) is left to decode,
      // and so is any line that is not exactly as batchlog writes it (an untagged one)
      LogFormat.pathOf(line) match {
        case Some(cut) => assert(cut === p && cut === LogFormat.decode(line).path, line)
        case None =>
          assert(batch.isEmpty || p.exists(c => c == '"' || c == '\\' || c < ' '), line)
      }
    }
    val good = LogFormat.encode(SinkLogEntry("/o/a", 1L, isDir = false, 2L, 1, 3L, "add", Some(4L)))
    assert(LogFormat.pathOf(good) === Some("/o/a"))
    // a damaged line is never passed over: a field dropped, a number cut, the line cut
    val damaged = Seq(
      good.replace(",\"size\":1", ""),
      good.replace(",\"modificationTime\":2", ""),
      good.replace("\"blockSize\":3", "\"blockSize\":x"),
      good.take(good.length - 1),
      good.take(20)
    )
    (damaged ++ Seq("", "{}", "{\"size\":1,\"path\":\"x\"}", "{\"path\":\"", "{\"path\":1}"))
      .foreach(l => assert(LogFormat.pathOf(l) === None, l))
  }

  test("readLineBytes ends lines exactly where readLines does, whatever the read sizes") {
    val rnd = new scala.util.Random(7)
    val tagged = LogFormat.encode(plainEntry(3L, 1))
    val pieces = Seq("\n", "\r", "\r\n", "", "{\"a\":1}", "\u00fc\u65e5", "x" * 70000, "\n\n") ++
      Seq(tagged, tagged, tagged.dropRight(1), tagged.take(30), tagged + "\u00fc", "\n" + tagged)
    val texts = Seq("", "v1", "v1\n", "v1\r\n", "v2\nx", "\r\nv1", "v1\n" + tagged) ++
      (1 to 300).map { _ =>
        "v1" + Seq.fill(rnd.nextInt(12))(pieces(rnd.nextInt(pieces.length))).mkString
      }

    /** A stream that returns at most a few bytes a read, as a network stream may. */
    def trickle(bytes: Array[Byte], most: Int) = new java.io.ByteArrayInputStream(bytes) {
      override def read(b: Array[Byte], off: Int, len: Int): Int =
        super.read(b, off, math.min(len, 1 + rnd.nextInt(most)))
    }
    def fail(t: scala.util.Try[_]) = t.failed.map(_.getMessage).toOption
    // A few bytes a read only for texts of up to 4 KiB: a 70,000-byte line read that way took most
    // of this suite's CPU; read 300 bytes at most at a time it still crosses the buffer's end.
    for {
      text <- texts
      bytes = text.getBytes(java.nio.charset.StandardCharsets.UTF_8)
      most <- Seq(1, 5, 300, 1 << 20) if most > 5 || bytes.length <= 4096
      canonical <- Seq(false, true)
    } {
      val byText = scala.util.Try {
        val out = Seq.newBuilder[(String, Long, Long)]
        LogFiles.readLines(trickle(bytes, most), "f") { (l, n) =>
          val ascii = l.forall(_ < 128)
          val batch = if (canonical && ascii && LogFormat.isCanonical(l)) LogFormat.taggedBatch(l)
          else None
          out += ((l, n, batch.getOrElse(-1L)))
        }
        out.result()
      }
      val byBytes = scala.util.Try {
        val out = Seq.newBuilder[(String, Long, Long)]
        LogFiles.readLineBytes(trickle(bytes, most), "f", canonical)(new LogFiles.LineHandler {
          def line(b: Array[Byte], from: Int, to: Int, n: Long, batch: Long): Unit =
            out += ((
              new String(b, from, to - from, java.nio.charset.StandardCharsets.UTF_8),
              n,
              batch
            ))
        })
        out.result()
      }
      assert(
        byBytes.map(_.toList) == byText.map(_.toList) ||
          (byBytes.isFailure && byText.isFailure && fail(byBytes) == fail(byText)),
        s"$canonical $most ${text.take(80)}"
      )
    }
  }

  test("a line read as bytes is canonical and tagged exactly when its text is, if ASCII") {
    for (p <- awkwardPaths; batch <- Seq(Some(7L), Some(Long.MaxValue), None)) {
      val line = LogFormat.encode(SinkLogEntry(p, 1L, isDir = false, 2L, 1, 3L, "add", batch))
      val bad = Seq(line.dropRight(1), line + " ", line.replace(",\"size\":1", ""))
      for (l <- line +: bad) {
        val bytes = ("#" + l + "#").getBytes(java.nio.charset.StandardCharsets.UTF_8)
        val ascii = l.forall(_ < 128)
        val expected =
          if (ascii && LogFormat.isCanonical(l)) LogFormat.taggedBatch(l).get else -1L
        assert(LogFormat.canonicalBatch(bytes, 1, bytes.length - 1) === expected, l)
        // every part of the line: more bytes are needed, or it is already refused
        val scan = new LogFormat.CanonicalScan()
        if (l eq line) (1 until bytes.length - 1).foreach { to =>
          val r = scan.scan(bytes, 1, to)
          assert(r == LogFormat.CanonicalScan.NeedMore || r == LogFormat.CanonicalScan.NotCanonical)
          if (expected >= 0) assert(r === LogFormat.CanonicalScan.NeedMore, l.take(to))
        }
      }
    }
    // a negative batch id is left to decode; so are the characters outside ASCII in a byte line
    val neg = LogFormat.encode(plainEntry(1L, 0).copy(batchId = Some(-1L)))
    assert(!LogFormat.isCanonical(neg))
    val uni = LogFormat.encode(plainEntry(1L, 0).copy(path = "file:/\u00fc"))
    assert(LogFormat.isCanonical(uni))
    val uniBytes = uni.getBytes(java.nio.charset.StandardCharsets.UTF_8)
    assert(LogFormat.canonicalBatch(uniBytes, 0, uniBytes.length) === -1L)
  }

  test("compaction copies canonical batch-file lines as bytes and decodes every other line") {
    withTempDir { root =>
      val dir = metaDir(root)
      withSQLConf(BatchLogConf.CompactIntervalKey -> "3", BatchLogConf.DeletionKey -> "false") {
        val log = ours(dir)
        val awkward = awkwardPaths.zipWithIndex.map { case (p, i) =>
          SinkLogEntry(p, i.toLong, isDir = false, 5L, 1, 6L, "add", Some(1L))
        }
        assert(log.add(0L, entriesOf(0L)))
        assert(log.add(1L, awkward.toArray))
        // batch file 1 as a hand or another tool may leave it: an untagged line, CRLF endings
        val lines = readLines(new File(dir, "1"))
        val spark1 = LogFormat.encode(plainEntry(1L, 9).copy(batchId = None))
        overwrite(new File(dir, "1"), (lines :+ spark1).mkString("\r\n").getBytes("UTF-8"))
        assert(log.add(2L, entriesOf(2L)))
        val compact = readLines(new File(dir, "2.compact"))
        assert(compact.head === "v1")
        assert(compact.tail.forall(l => LogFormat.isCanonical(l)), compact.mkString("\n"))
        val expected: Seq[SinkLogEntry] =
          entriesOf(0L).toSeq ++ awkward ++ Seq(plainEntry(1L, 9)) ++ entriesOf(2L).toSeq
        assert(compact.tail.map(LogFormat.decode) === expected)
        assert(ours(dir).allFiles().map(_.path).toSeq === expected.map(_.path))
      }
    }
  }

  test("untagged lines are exactly what Spark writes, and Spark's lines decode untagged") {
    withTempDir { root =>
      val dir = metaDir(root)
      val entries = awkwardPaths.zipWithIndex.map { case (p, i) =>
        SinkLogEntry(p, i.toLong, i % 2 == 0, 1700000000000L + i, 1, 64L, "add", None)
      }
      val v = vanilla(dir)
      assert(v.add(0L, entries.map(_.toSinkFileStatus).toArray))
      val lines = readLines(new File(dir, "0"))
      assert(lines === "v1" +: entries.map(e => LogFormat.encode(e)))
      assert(lines.tail.map(LogFormat.decode) === entries)
      assert(lines.tail.forall(l => !LogFormat.isTagged(l)))
    }
  }

  test("a batch's commit travels before batchId, each member optional, read leniently") {
    val base = SinkLogEntry(awkwardPaths(6), 5L, isDir = false, 1L, 1, 2L, "add", Some(7L))
    val full = BatchCommit(Some("q-\"1\""), Some("r1"), Some(5L), Some(812L))
    for (
      c <- Seq(full, BatchCommit(None, None, None, None), full.copy(rows = None, queryId = None))
    ) {
      val e = base.copy(commit = Some(c))
      val line = LogFormat.encode(e)
      assert(LogFormat.decode(line) === e)
      assert(LogFormat.taggedBatch(line) === Some(7L), line) // batchId stays the last field
      val node = mapper.readTree(line)
      assert(node.fieldNames().asScala.toSeq === VanillaFields ++ Seq("commit", "batchId"))
      // not canonical: compaction decodes and re-encodes it, which keeps the commit
      assert(!LogFormat.isCanonical(line), line)
      assert(LogFormat.encode(LogFormat.decode(line)) === line)
    }
    val line = LogFormat.encode(base.copy(commit = Some(full)))
    // bit rot or another writer's idea of a member: the member is dropped, the entry is read
    assert(
      LogFormat.decode(line.replace("\"rows\":5", "\"rows\":\"five\"")).commit ===
        Some(full.copy(rows = None))
    )
    assert(
      LogFormat.decode(line.replace("\"durationMs\":812", "\"durationMs\":[1,{\"a\":2}]"))
        .commit === Some(full.copy(durationMs = None))
    )
    assert(
      LogFormat.decode(line.replace("\"rows\":5", "\"later\":{\"x\":[1]},\"rows\":5"))
        .commit === Some(full)
    )
    assert(LogFormat.decode(LogFormat.encode(base).replace(
      "\"batchId\"",
      "\"commit\":[1,2],\"batchId\""
    )) === base)
    // the rest of the line must still be sound
    intercept[IllegalArgumentException](LogFormat.decode(line.replace("\"size\":5,", "")))
  }

  test("isTagged only accepts a trailing integer batchId") {
    val base = LogFormat.encode(plainEntry(1, 0).copy(batchId = None))
    val body = base.dropRight(1)
    assert(!LogFormat.isTagged(base))
    assert(LogFormat.isTagged(body + ",\"batchId\":17}"))
    assert(!LogFormat.isTagged(body + ",\"batchId\":null}"))
    assert(!LogFormat.isTagged(body + ",\"batchId\":}"))
    assert(!LogFormat.isTagged(body + ",\"batchId\":-1}"))
    assert(!LogFormat.isTagged(body + ",\"batchId\":\"7\"}"))
    assert(!LogFormat.isTagged(body + ",\"batchId\":7"))
    assert(!LogFormat.isTagged(""))
    assert(LogFormat.decode(body + ",\"batchId\":null}").batchId === None)
    // unknown fields are ignored, wherever they are
    assert(
      LogFormat.decode("{\"x\":{\"y\":[1,2]}," + base.drop(1)) === plainEntry(1, 0).copy(batchId =
        None
      )
    )
  }

  test("decode names a missing or mistyped field") {
    val line = LogFormat.encode(plainEntry(4, 1))
    for (field <- VanillaFields) {
      val node = mapper.readTree(line).asInstanceOf[com.fasterxml.jackson.databind.node.ObjectNode]
      node.remove(field)
      val e = intercept[IllegalArgumentException](LogFormat.decode(mapper.writeValueAsString(node)))
      assert(e.getMessage.contains(s"'$field'"), e.getMessage)
      assert(e.getMessage.contains("missing"), e.getMessage)
    }
    val wrongType = line.replace("\"size\":4001", "\"size\":\"4001\"")
    assert(wrongType !== line)
    assert(intercept[IllegalArgumentException](LogFormat.decode(wrongType)).getMessage
      .contains("'size'"))
    for (bad <- Seq("", "[]", "not json", line.dropRight(1), line + "x", line + " {}")) {
      intercept[IllegalArgumentException](LogFormat.decode(bad))
    }
  }

  test("resolveBatch: field, then batch file, then data file name, else untagged") {
    val untaggedPlain = plainEntry(7, 0).copy(batchId = None)
    val untaggedNamed = namedEntry(7, 0).copy(batchId = None)
    assert(LogFormat.resolveBatch(plainEntry(7, 0), 9L, inCompact = true) === Some(7L))
    assert(LogFormat.resolveBatch(untaggedPlain, 9L, inCompact = false) === Some(9L))
    assert(LogFormat.resolveBatch(untaggedPlain, 9L, inCompact = true) === None)
    assert(LogFormat.resolveBatch(untaggedNamed, 9L, inCompact = true) === Some(7L))
  }

}
