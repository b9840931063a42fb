package io.batchlog

import java.io.File
import java.nio.charset.StandardCharsets.UTF_8
import java.nio.file.Files
import java.util.UUID

import scala.jdk.CollectionConverters._

import com.fasterxml.jackson.databind.ObjectMapper

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.execution.streaming.sinks.{FileStreamSinkLog, SinkFileStatus}

import io.batchlog.log.{BatchTaggedFileStreamSinkLog, JsonRecordFile, LogFormat, SinkLogEntry}
import io.batchlog.ops.Horizon

/** Spark's own sink log, with its (protected) compact interval exposed. */
class VanillaSinkLog(spark: SparkSession, path: String)
    extends FileStreamSinkLog(FileStreamSinkLog.VERSION, spark, path) {
  def interval: Int = compactInterval
}

class BatchTaggedFileStreamSinkLogSuite extends SparkSessionTestBase {
  import BatchLogConf._

  private val mapper = new ObjectMapper()
  private val VanillaFields =
    Seq("path", "size", "isDir", "modificationTime", "blockReplication", "blockSize", "action")

  // ---- helpers -----------------------------------------------------------------------------

  private def uuid(batch: Long, i: Int): String = new UUID(batch, i.toLong).toString

  /** A vanilla-named data file (no batch in its name). */
  private def plainEntry(batch: Long, i: Int): SinkLogEntry = SinkLogEntry(
    path = s"file:/data/out/part-0000$i-${uuid(batch, i)}.c000.snappy.parquet",
    size = 1000L * batch + i,
    isDir = false,
    modificationTime = 1700000000000L + batch,
    blockReplication = 1,
    blockSize = 33554432L,
    action = "add",
    batchId = Some(batch)
  )

  /** A data file named by the batch-tagged commit protocol. */
  private def namedEntry(batch: Long, i: Int): SinkLogEntry = plainEntry(batch, i).copy(
    path = s"file:/data/out/part-0000$i-batch-$batch-${uuid(batch, i)}.c000.snappy.parquet"
  )

  private def entriesOf(batch: Long, n: Int = 3): Array[SinkLogEntry] =
    (0 until n).map(plainEntry(batch, _)).toArray

  private def metaDir(root: File): File = new File(root, "_spark_metadata")

  private def ours(dir: File): BatchTaggedFileStreamSinkLog =
    new BatchTaggedFileStreamSinkLog(spark, dir.toString)

  private def vanilla(dir: File): VanillaSinkLog = new VanillaSinkLog(spark, dir.toString)

  /**
   * Log file names (`N`, `N.compact`) in `dir`, ignoring checksum and temp files and batchlog's
   * `N.compact.index` files, of which there must be none without its compact file.
   */
  private def logFileNames(dir: File): Set[String] = {
    val all = Option(dir.listFiles()).getOrElse(Array.empty[File]).map(_.getName)
      .filterNot(n => n.startsWith(".") || n.endsWith(".crc") || JsonRecordFile.isRecordName(n))
      .toSet
    val (indexes, logs) = all.partition(_.endsWith(".compact.index"))
    assert(
      indexes.map(_.stripSuffix(".index")).subsetOf(logs),
      s"an index outlived its compact: $all"
    )
    logs
  }

  /** Compact files written by batchlog each have their index beside them. */
  private def assertIndexed(dir: File): Unit = {
    val names = dir.listFiles().map(_.getName).toSet
    val compacts = names.filter(_.endsWith(".compact"))
    assert(names.filter(_.endsWith(".compact.index")) === compacts.map(_ + ".index"))
  }

  private def expectedNames(ids: Range, interval: Int): Set[String] =
    ids.map(id => if ((id + 1) % interval == 0) s"$id.compact" else id.toString).toSet

  private def readLines(f: File): Seq[String] = Files.readAllLines(f.toPath, UTF_8).asScala.toSeq

  /** Overwrites a log file by hand (and drops its checksum so Hadoop does not reject it). */
  private def overwrite(f: File, lines: Seq[String]): Unit = {
    Files.write(f.toPath, lines.mkString("\n").getBytes(UTF_8))
    new File(f.getParentFile, s".${f.getName}.crc").delete()
  }

  /**
   * Parses a raw log line with a plain JSON parser and checks its shape: exactly the 7 vanilla
   * fields in Spark's order, then `batchId`. Returns (path, batchId, size).
   */
  private def parseTaggedLine(file: File, line: String): (String, Long, Long) = {
    val node = mapper.readTree(line)
    assert(node.isObject, s"$file: $line")
    assert(node.fieldNames().asScala.toSeq === VanillaFields :+ "batchId", s"$file: $line")
    assert(node.get("batchId").isIntegralNumber, s"$file: $line")
    assert(node.get("action").asText === "add")
    assert(node.get("isDir").isBoolean)
    (node.get("path").asText, node.get("batchId").asLong, node.get("size").asLong)
  }

  private def statusKey(e: SinkLogEntry): (String, Long) = (e.path, e.size)
  private def statusKey(s: SinkFileStatus): (String, Long) = (s.path, s.size)

  // ---- tagging across compactions ----------------------------------------------------------

  for (interval <- Seq(1, 3, 10)) {
    test(s"every line of every batch and compact file is tagged (compactInterval $interval)") {
      withTempDir { root =>
        val dir = metaDir(root)
        val batches = 0 until 31
        withSQLConf(CompactIntervalKey -> interval.toString) {
          val log = ours(dir)
          assert(log.interval === interval)
          batches.foreach(b => assert(log.add(b.toLong, entriesOf(b.toLong, 2 + b % 3))))
          assert(!log.add(5L, entriesOf(5L)), "re-adding a logged batch must return false")

          assert(logFileNames(dir) === expectedNames(batches, interval))
          assertIndexed(dir)
          batches.foreach { b =>
            val compact = (b + 1) % interval == 0
            val f = new File(dir, if (compact) s"$b.compact" else b.toString)
            val lines = readLines(f)
            assert(lines.head === "v1", f.toString)
            val parsed = lines.tail.map(parseTaggedLine(f, _))
            if (compact) {
              // exactly every entry of batches 0..b, each with the batch that added it
              val expected = (0 to b).flatMap { x =>
                entriesOf(x.toLong, 2 + x % 3).map(e => (e.path, x.toLong, e.size))
              }
              assert(parsed.size === expected.size, f.toString)
              assert(parsed.toSet === expected.toSet, f.toString)
            } else {
              assert(
                parsed === entriesOf(b.toLong, 2 + b % 3).map(e => (e.path, b.toLong, e.size)).toSeq
              )
            }
          }
          // and the log reads back exactly what was added
          val all = batches.flatMap(b => entriesOf(b.toLong, 2 + b % 3))
          assert(log.allFiles().toSeq.sortBy(_.path) === all.sortBy(_.path))
          assert(ours(dir).allFiles().toSet === all.toSet)
        }
      }
    }
  }

  // ---- the line format ---------------------------------------------------------------------

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

  // ---- deletion and compact interval: identical to Spark's --------------------------------

  for (deletion <- Seq(true, false); interval <- Seq(2, 3, 7)) {
    test(s"expired-log deletion matches Spark's (deletion=$deletion, compactInterval=$interval)") {
      withTempDir { root =>
        val vDir = new File(root, "vanilla")
        val oDir = new File(root, "ours")
        withSQLConf(
          CompactIntervalKey -> interval.toString,
          MinBatchesToRetainKey -> "5",
          CleanupDelayKey -> "0",
          DeletionKey -> deletion.toString
        ) {
          val v = vanilla(vDir)
          val o = ours(oDir)
          for (b <- 0L until 30L) {
            val es = entriesOf(b, 2)
            assert(v.add(b, es.map(_.toSinkFileStatus)))
            assert(o.add(b, es))
            assert(logFileNames(oDir) === logFileNames(vDir), s"after batch $b")
            assertIndexed(oDir)
          }
          val names = logFileNames(oDir)
          if (deletion) assert(names.size < 30, names)
          else assert(names === expectedNames(0 until 30, interval))
          assert(o.allFiles().map(statusKey).toSet === v.allFiles().map(statusKey).toSet)
          assert(o.allFiles().length === 60)
        }
      }
    }
  }

  test("compact interval is derived from existing compact files as Spark does") {
    withTempDir { root =>
      // zero, one and two-or-more compact files
      def layouts(dir: File, interval: Int, lastBatch: Int): Unit =
        withSQLConf(CompactIntervalKey -> interval.toString, DeletionKey -> "false") {
          val v = vanilla(dir)
          (0 to lastBatch).foreach(b =>
            v.add(b.toLong, entriesOf(b.toLong, 1).map(_.toSinkFileStatus))
          )
        }
      val none = new File(root, "none"); layouts(none, 100, 4)
      val two = new File(root, "two"); layouts(two, 3, 7)
      val one = new File(root, "one"); layouts(one, 3, 7)
      Seq("0", "1", "2.compact", "3", "4").foreach { n =>
        new File(one, n).delete(); new File(one, s".$n.crc").delete()
      }
      assert(logFileNames(one) === Set("5.compact", "6", "7"))
      for (dir <- Seq(none, two, one); default <- Seq(1, 4, 5, 10)) {
        withSQLConf(CompactIntervalKey -> default.toString) {
          assert(ours(dir).interval === vanilla(dir).interval, s"$dir, default $default")
        }
      }
      withSQLConf(CompactIntervalKey -> "4") {
        assert(ours(two).interval === 3)
        assert(ours(one).interval === 6)
        assert(ours(none).interval === 4)
      }
      // ours continues the one-compact log with the derived interval, compacting at 11
      withSQLConf(CompactIntervalKey -> "4", DeletionKey -> "false") {
        val o = ours(one)
        (8 to 12).foreach(b => assert(o.add(b.toLong, entriesOf(b.toLong, 1))))
        assert(logFileNames(one) === Set("5.compact", "6", "7", "8", "9", "10", "11.compact", "12"))
        assert(vanilla(one).allFiles().map(statusKey).toSet ===
          (0 to 12).map(b => statusKey(plainEntry(b.toLong, 0))).toSet)
      }
    }
  }

  // ---- Spark reads our log ------------------------------------------------------------------

  for (interval <- Seq(3, 7)) {
    test(
      s"Spark's FileStreamSinkLog reads the same live files as ours (compactInterval $interval)"
    ) {
      withTempDir { root =>
        val dir = metaDir(root)
        withSQLConf(
          CompactIntervalKey -> interval.toString,
          MinBatchesToRetainKey -> "4",
          CleanupDelayKey -> "0"
        ) {
          val o = ours(dir)
          val expected = (0L until 25L).flatMap { b =>
            val es = entriesOf(b) :+ namedEntry(b, 5)
            assert(o.add(b, es))
            es
          }
          assert(logFileNames(dir).exists(_.endsWith(".compact")))
          assert(!logFileNames(dir).contains("0"), "old batch files should have been deleted")
          val v = vanilla(dir)
          assert(v.interval === interval)
          assert(v.getLatestBatchId() === Some(24L))
          assert(v.allFiles().map(statusKey).sorted.toSeq === expected.map(statusKey).sorted)
          assert(o.allFiles().map(statusKey).sorted.toSeq === expected.map(statusKey).sorted)
          assert(o.allFiles().toSet === expected.toSet)
          // full statuses agree too
          assert(v.allFiles().toSet === expected.map(_.toSinkFileStatus).toSet)
        }
      }
    }
  }

  // ---- a reader racing a compaction ----------------------------------------------------------

  test("reading starts over when a concurrent compaction deletes the files it listed") {
    withTempDir { root =>
      val dir = metaDir(root)
      withSQLConf(
        CompactIntervalKey -> "3",
        MinBatchesToRetainKey -> "2",
        CleanupDelayKey -> "0"
      ) {
        val writer = ours(dir)
        def advance(to: Long): Unit =
          (writer.getLatestBatchId().getOrElse(-1L) + 1 to to).foreach(b =>
            assert(writer.add(b, entriesOf(b)))
          )
        def upTo(b: Long) = (0L to b).flatMap(entriesOf(_)).toSet
        advance(3L)

        /** A reader whose `call`-th log-file read first lets the writer reach batch `to`. */
        def racingReader(call: Int, to: Long) =
          new BatchTaggedFileStreamSinkLog(spark, dir.toString) {
            private var calls = 0
            override def foreachEntryIn(id: Long)(fn: SinkLogEntry => Unit): Unit = {
              calls += 1
              if (calls == call) advance(to)
              super.foreachEntryIn(id)(fn)
            }
          }
        // listed 2.compact + 3; the writer compacts at 5 and 8 and deletes everything below 5
        assert(racingReader(1, 8L).allFiles().toSet === upTo(8L))
        assert(!new File(dir, "2.compact").exists() && !new File(dir, "3").exists())
        // nothing passed on yet: foreachLiveEntry starts over too
        val seen = scala.collection.mutable.ArrayBuffer.empty[SinkLogEntry]
        racingReader(1, 13L).foreachLiveEntry(seen += _)
        assert(seen.size === upTo(13L).size && seen.toSet === upTo(13L))
        // 11.compact already passed on when 12 disappears: allFiles starts over ...
        assert(racingReader(2, 16L).allFiles().toSet === upTo(16L))
        assert(!new File(dir, "12").exists())
        // ... foreachLiveEntry cannot without repeating entries, so it fails, naming the file
        val e = intercept[BatchLogException](racingReader(2, 19L).foreachLiveEntry(_ => ()))
        assert(e.code === BatchLogException.MissingLogFile)
        assert(e.getMessage.contains("_spark_metadata/15 "), e.getMessage)
        // a file missing without a newer compaction is an error, not a retry
        assert(logFileNames(dir) === Set("17.compact", "18", "19"))
        assert(new File(dir, "18").delete())
        new File(dir, ".18.crc").delete()
        val e2 = intercept[BatchLogException](ours(dir).allFiles())
        assert(e2.code === BatchLogException.MissingLogFile)
        assert(e2.getMessage.contains("_spark_metadata/18 "), e2.getMessage)
      }
    }
  }

  // ---- mixed logs -----------------------------------------------------------------------------

  test("a log started by Spark and continued by ours: batches resolved, never made up") {
    withTempDir { root =>
      val dir = metaDir(root)
      // each batch: two vanilla-named files and one batch-named file
      def batch(b: Long) = Array(plainEntry(b, 0), plainEntry(b, 1), namedEntry(b, 2))
      withSQLConf(CompactIntervalKey -> "3", DeletionKey -> "false") {
        val v = vanilla(dir)
        (0L to 6L).foreach(b => assert(v.add(b, batch(b).map(_.toSinkFileStatus))))
        // Spark's compact files carry no batchId
        assert(readLines(new File(dir, "5.compact")).tail.forall(l => !LogFormat.isTagged(l)))

        // resolution when Spark's files are read (5.compact + 6): every batch file survives
        // (deletion off), so each vanilla-named entry's batch is proven by its batch file or, for
        // compaction batches 2 and 5, by difference with the files their compaction merged
        val fromSpark = (0L to 6L).flatMap(batch(_).toSeq)
        assert(ours(dir).allFiles().toSet === fromSpark.toSet)

        // never made up: without batch files 3 and 4, batches 3, 4 and 5 (whose compaction
        // merged 3 and 4) cannot be proven and stay untagged; the rest is still proven
        val aside = new File(root, "aside")
        aside.mkdirs()
        def move(n: String) = Files.move(new File(dir, n).toPath, new File(aside, n).toPath)
        Seq("3", "4").foreach(move)
        val unproven = Set(3L, 4L, 5L)
        assert(ours(dir).allFiles().toSet === (0L to 6L).flatMap { b =>
          batch(b).toSeq.map(e =>
            if (unproven(b) && !e.path.contains("-batch-")) e.copy(batchId = None) else e
          )
        }.toSet)
        assert(Horizon.ofSink(ours(dir)) === 6L)
        Seq("3", "4").foreach(n =>
          Files.move(new File(aside, n).toPath, new File(dir, n).toPath)
        )
        assert(Horizon.ofSink(ours(dir)) === 0L)

        val o = ours(dir)
        assert(o.interval === 3)
        (7L to 12L).foreach(b => assert(o.add(b, batch(b))))
        assert(logFileNames(dir) === expectedNames(0 until 13, 3))
        val expected = fromSpark ++ (7L to 12L).flatMap(b => batch(b).toSeq)
        assert(o.allFiles().toSet === expected.toSet)
        assert(o.allFiles().length === expected.size)

        // our compact file: the proven batches are written into the lines, so they outlive the
        // batch files that proved them
        val lines = readLines(new File(dir, "11.compact")).tail
        assert(lines.size === 36)
        assert(lines.forall(LogFormat.isTagged))
        lines.foreach(l => parseTaggedLine(new File(dir, "11.compact"), l))
        assert(lines.map(LogFormat.decode).toSet === expected.filter(_.batchId.get <= 11L).toSet)

        // and Spark still reads the whole log
        assert(vanilla(dir).allFiles().map(statusKey).toSet === expected.map(statusKey).toSet)
      }
    }
  }

  test("a log started by ours and continued by Spark: Spark's compaction drops tags") {
    withTempDir { root =>
      val dir = metaDir(root)
      def batch(b: Long) = Array(plainEntry(b, 0), namedEntry(b, 1))
      withSQLConf(CompactIntervalKey -> "3", DeletionKey -> "false") {
        val o = ours(dir)
        (0L to 7L).foreach(b => assert(o.add(b, batch(b))))
        val v = vanilla(dir)
        assert(v.interval === 3)
        assert(v.allFiles().map(statusKey).toSet ===
          (0L to 7L).flatMap(batch(_).map(statusKey)).toSet)
        (8L to 13L).foreach(b => assert(v.add(b, batch(b).map(_.toSinkFileStatus))))
        // live files now: Spark's 11.compact (untagged) + batch files 12, 13; every batch file
        // survives (deletion off): each entry's batch is proven
        val expected13 = (0L to 13L).flatMap(batch(_).toSeq)
        assert(ours(dir).allFiles().toSet === expected13.toSet)

        val o2 = ours(dir)
        (14L to 17L).foreach(b => assert(o2.add(b, batch(b))))
        val expected = expected13 ++ (14L to 17L).flatMap(b => batch(b).toSeq)
        assert(o2.allFiles().toSet === expected.toSet)
        assert(o2.allFiles().length === expected.size)
        assert(o2.allFiles().count(_.batchId.isEmpty) === 0)
        assert(vanilla(dir).allFiles().map(statusKey).toSet === expected.map(statusKey).toSet)
        val api = BatchLog.forPath(spark, root.toString)
        assert(api.latestBatch() === 17L)
        assert(api.batches().toSeq === (0L to 17L))
        assert(api.files(3L).toSet === batch(3).map(_.path).toSet)
        assert(api.files(13L).toSet === batch(13).map(_.path).toSet)
        assert(api.batchOf(plainEntry(3, 0).path) === 3L)
        assert(api.batchOf(namedEntry(3, 1).path) === 3L)
        assert(api.batchOf("file:/nowhere/x.parquet") === null)
      }
    }
  }

  // ---- only the next batch ---------------------------------------------------------------------

  test("the log accepts only the batch after its latest; an empty log accepts any") {
    withTempDir { root =>
      val dir = metaDir(root)
      withSQLConf(CompactIntervalKey -> "3") {
        val log = ours(dir)
        (0L to 2L).foreach(b => assert(log.add(b, entriesOf(b))))
        // a gap means the log was cut back under a running writer (a rewind): refused
        val e = intercept[BatchLogException](log.add(5L, entriesOf(5L)))
        assert(e.code === BatchLogException.BatchOutOfOrder)
        assert(e.getMessage.contains("its latest batch is 2, so the next batch must be 3"))
        assert(e.getMessage.contains(dir.getName))
        assert(logFileNames(dir) === Set("0", "1", "2.compact"))
        // the batch already logged: false, as Spark's log (the committer reports the race)
        assert(!log.add(2L, entriesOf(2L)))
        assert(log.add(3L, entriesOf(3L)))
        assert(ours(dir).allFiles().toSet === (0L to 3L).flatMap(entriesOf(_).toSeq).toSet)
      }
      val empty = ours(metaDir(new File(root, "other")))
      assert(empty.add(7L, entriesOf(7L)))
      assert(empty.getLatestBatchId().contains(7L))
    }
  }

  // ---- bad input ------------------------------------------------------------------------------

  /** A log with batches 0..4 at compactInterval 3 (2.compact, 3, 4). */
  private def withSmallLog(f: (File, BatchTaggedFileStreamSinkLog) => Unit): Unit =
    withTempDir { root =>
      val dir = metaDir(root)
      withSQLConf(CompactIntervalKey -> "3", DeletionKey -> "false") {
        val log = ours(dir)
        (0L to 4L).foreach(b => assert(log.add(b, entriesOf(b))))
        f(dir, ours(dir))
      }
    }

  private def assertFails(code: String, file: File, more: String*)(body: => Any): Unit = {
    val e = intercept[BatchLogException](body)
    assert(e.code === code, e.getMessage)
    assert(
      e.getMessage.contains(s"_spark_metadata/${file.getName} ") ||
        e.getMessage.contains(s"_spark_metadata/${file.getName},"),
      e.getMessage
    )
    more.foreach(m => assert(e.getMessage.contains(m), e.getMessage))
  }

  test("a corrupt line fails reading and compaction, naming the file and line") {
    withSmallLog { (dir, log) =>
      val f = new File(dir, "4")
      val lines = readLines(f)
      overwrite(f, Seq(lines(0), lines(1), lines(2).take(30), lines(3)))
      assertFails(BatchLogException.CorruptLog, f, "line 3")(log.allFiles())
      assertFails(BatchLogException.CorruptLog, f, "line 3")(log.foreachEntryIn(4L)(_ => ()))
      assertFails(BatchLogException.CorruptLog, f, "line 3")(log.add(5L, entriesOf(5L)))
      assert(!new File(dir, "5.compact").exists())
      assert(logFileNames(dir) === Set("0", "1", "2.compact", "3", "4"))
    }
  }

  test("a line missing a required field fails compaction, naming the file and the field") {
    withSmallLog { (dir, log) =>
      val f = new File(dir, "3")
      val lines = readLines(f)
      overwrite(f, lines.updated(2, lines(2).replaceFirst(",\"modificationTime\":[0-9]+", "")))
      assertFails(BatchLogException.CorruptLog, f, "line 3", "'modificationTime'")(
        log.add(5L, entriesOf(5L))
      )
      assert(!new File(dir, "5.compact").exists())
    }
  }

  test("an unsupported version header fails, naming the file") {
    withSmallLog { (dir, log) =>
      val f = new File(dir, "2.compact")
      overwrite(f, "v2" +: readLines(f).tail)
      assertFails(BatchLogException.CorruptLog, f, "'v2'")(log.allFiles())
      assertFails(BatchLogException.CorruptLog, f, "'v2'")(log.checkHeader(2L))
      assertFails(BatchLogException.CorruptLog, f, "'v2'")(log.add(5L, entriesOf(5L)))
      assert(!new File(dir, "5.compact").exists())
      overwrite(f, Seq.empty)
      assertFails(BatchLogException.CorruptLog, f, "empty")(log.allFiles())
    }
  }

  test("a missing batch file fails compaction and reading, naming the file") {
    withSmallLog { (dir, log) =>
      val f = new File(dir, "3")
      assert(f.delete())
      new File(dir, ".3.crc").delete()
      assertFails(BatchLogException.MissingLogFile, f)(log.add(5L, entriesOf(5L)))
      assert(!new File(dir, "5.compact").exists())
      assertFails(BatchLogException.MissingLogFile, f)(log.allFiles())
    }
  }

  test("a corrupt line read through Spark's get() API names the file") {
    withSmallLog { (dir, log) =>
      val f = new File(dir, "4")
      val lines = readLines(f)
      overwrite(f, lines.updated(1, "{"))
      assertFails(BatchLogException.CorruptLog, f, "line 2")(log.get(4L))
      assert(log.get(3L).get.toSeq === entriesOf(3L).toSeq)
    }
  }
}
