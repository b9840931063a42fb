package io.batchlog

import java.io.File
import java.nio.charset.StandardCharsets.UTF_8
import java.nio.file.Files

import scala.jdk.CollectionConverters._

import org.apache.hadoop.fs.{FileStatus, Path}

import io.batchlog.log.{
  BatchTaggedFileStreamSinkLog,
  CompactIndex,
  IndexRun,
  LogFormat,
  SinkLogEntry
}

/** The per-batch index beside compact files, byte-copy compaction, and retention. */
class CompactIndexSuite extends SparkSessionTestBase {

  private def entry(b: Long, i: Int, modTime: Long = 1700000000000L): SinkLogEntry = SinkLogEntry(
    f"file:///out/p=$i/part-00000-batch-$b-00000000-0000-0000-0000-${b * 100 + i}%012d.parquet",
    100L + i,
    isDir = false,
    modTime,
    1,
    1024L,
    "add",
    Some(b)
  )

  private def entries(b: Long, n: Int): Array[SinkLogEntry] = Array.tabulate(n)(entry(b, _))

  /** A sink dir with `batches` batches of `perBatch(b)` entries written through our log. */
  private def buildSink(
      root: File,
      batches: Int,
      perBatch: Long => Int
  ): BatchTaggedFileStreamSinkLog = {
    val log = new BatchTaggedFileStreamSinkLog(spark, new File(root, "_spark_metadata").toString)
    (0 until batches).foreach(b => assert(log.add(b, entries(b, perBatch(b)))))
    log
  }

  private def indexFile(root: File, compact: Long) =
    new File(root, s"_spark_metadata/$compact.compact${CompactIndex.Suffix}")

  private def statusOf(log: BatchTaggedFileStreamSinkLog, compact: Long): FileStatus = {
    val p = log.logFilePath(compact)
    p.getFileSystem(spark.sessionState.newHadoopConf()).getFileStatus(p)
  }

  /** `CompactIndex.prove` of the index file beside compact file `compact`, as it is on disk. */
  private def prove(log: BatchTaggedFileStreamSinkLog, compact: Long) = CompactIndex.prove(
    Files.readAllBytes(
      new File(CompactIndex.pathOf(log.logFilePath(compact)).toUri.getPath).toPath
    ),
    s"$compact.compact",
    statusOf(log, compact)
  )

  private def proved(log: BatchTaggedFileStreamSinkLog, compact: Long): CompactIndex =
    prove(log, compact).fold(why => fail(s"index of $compact.compact not proved: $why"), identity)

  private def compactLines(root: File, compact: Long): Seq[String] =
    Files.readAllLines(new File(root, s"_spark_metadata/$compact.compact").toPath, UTF_8).asScala.toSeq

  test("compaction writes one run per batch; files(batch) reads exactly that batch") {
    withSQLConf(BatchLogConf.CompactIntervalKey -> "4") {
      withTempDir { root =>
        val perBatch = (b: Long) => (b % 3 + 1).toInt // 1, 2, 3 entries
        val log = buildSink(root, 14, perBatch)
        val index = proved(log, 11)
        assert(index.runs.map(r => (r.batchId, r.count)) == (0L to 11L).map(b =>
          (Some(b), perBatch(b).toLong)
        ))
        val lines = compactLines(root, 11)
        // Every run points at exactly its batch's lines (offset of the preceding '\n').
        val bytes = Files.readAllBytes(new File(root, "_spark_metadata/11.compact").toPath)
        index.runs.foreach { case IndexRun(b, off, len, n, _) =>
          val text = new String(bytes, off.toInt, len.toInt, UTF_8)
          val runLines = text.split('\n').toSeq.drop(1)
          assert(runLines.length == n && runLines.forall(l => LogFormat.taggedBatch(l) == b))
        }
        assert(index.entries == lines.length - 1)
        val api = BatchLog.forPath(spark, root.toString)
        (0L to 13L).foreach(b =>
          assert(api.files(b).toSeq == entries(b, perBatch(b)).map(_.path).toSeq)
        )
        assert(api.batches().toSeq == (0L to 13L))
      }
    }
  }

  test(
    "a missing index is rebuilt in memory, identical to the one compaction wrote; reads write nothing"
  ) {
    withSQLConf(BatchLogConf.CompactIntervalKey -> "3") {
      withTempDir { root =>
        val log = buildSink(root, 9, _ => 2)
        val written = proved(log, 8)
        assert(indexFile(root, 8).delete())
        val api = BatchLog.forPath(spark, root.toString)
        assert(api.files(4).toSeq == entries(4, 2).map(_.path).toSeq)
        assert(api.log.indexOf(8) == written)
        assert(!indexFile(root, 8).exists(), "a read must not write the sink")
      }
    }
  }

  test("a scan computes the same runs and CRCs as compaction, for non-ASCII lines too") {
    withSQLConf(BatchLogConf.CompactIntervalKey -> "3") {
      withTempDir { root =>
        val log =
          new BatchTaggedFileStreamSinkLog(spark, new File(root, "_spark_metadata").toString)
        def odd(b: Long) = Array.tabulate(2)(i =>
          entry(b, i).copy(path = s"file:///out/p=%C3%BC%C2%BD ü½ é/part-$b-$i.parquet")
        )
        (0 until 9).foreach(b => assert(log.add(b, odd(b))))
        val written = proved(log, 8)
        assert(written.runs.length == 9 && log.indexProblem(8).isEmpty)
        assert(log.scanIndex(8, statusOf(log, 8)) == written)
        assert(BatchLog.forPath(spark, root.toString).files(4).toSeq == odd(4).map(_.path).toSeq)
      }
    }
  }

  test("a stale index (right file length and mtime, wrong runs) is detected, not trusted") {
    withSQLConf(BatchLogConf.CompactIntervalKey -> "3") {
      withTempDir { root =>
        val log = buildSink(root, 9, _ => 2)
        val fm = log.checkpointFileManager
        val path = new Path(s"${log.metadataPath}/8.compact.index")
        val good = proved(log, 8)
        // Swap the runs of batches 3 and 4: the header still matches the compact file.
        val swapped = good.runs.map {
          case r if r.batchId.contains(3L) => r.copy(batchId = Some(4L))
          case r if r.batchId.contains(4L) => r.copy(batchId = Some(3L))
          case r => r
        }
        CompactIndex.write(fm, path, good.copy(runs = swapped))
        val api = BatchLog.forPath(spark, root.toString)
        assert(api.files(3).toSeq == entries(3, 2).map(_.path).toSeq)
        assert(api.files(4).toSeq == entries(4, 2).map(_.path).toSeq)
        assert(api.log.indexOf(8, rebuild = true) == good)
      }
    }
  }

  test("an index of another version of the compact file (length differs) is not used") {
    withSQLConf(BatchLogConf.CompactIntervalKey -> "3") {
      withTempDir { root =>
        val log = buildSink(root, 6, _ => 2)
        val fm = log.checkpointFileManager
        val path = new Path(s"${log.metadataPath}/5.compact.index")
        val good = proved(log, 5)
        CompactIndex.write(
          fm,
          path,
          good.copy(compactLength = good.compactLength + 1, runs = Vector.empty)
        )
        val len = good.compactLength
        assert(prove(log, 5) == Left(s"the compact file is $len bytes, the index says ${len + 1}"))
        val api = BatchLog.forPath(spark, root.toString)
        assert(api.files(2).toSeq == entries(2, 2).map(_.path).toSeq)
        assert(api.log.indexOf(5) == good)
      }
    }
  }

  test("an index of the compact file with another modification time is not used") {
    withSQLConf(BatchLogConf.CompactIntervalKey -> "3") {
      withTempDir { root =>
        val log = buildSink(root, 6, _ => 2)
        val good = proved(log, 5)
        val path = new Path(s"${log.metadataPath}/5.compact.index")
        CompactIndex.write(log.checkpointFileManager, path, good.copy(compactModTime = 1L))
        assert(prove(log, 5) == Left(s"the compact file's modification time is " +
          s"${good.compactModTime}, the index says 1"))
        assert(
          BatchLog.forPath(spark, root.toString).files(2).toSeq == entries(2, 2).map(_.path).toSeq
        )
        assert(log.indexOf(5) == good)
      }
    }
  }

  // ---- damaged indexes: proved before use ----------------------------------------------------

  private def metaFile(root: File, name: String) = new File(root, s"_spark_metadata/$name")

  /** Replaces a file's bytes as a hand edit or bit rot would: its Hadoop checksum sidecar goes. */
  private def overwrite(root: File, name: String, bytes: Array[Byte]): Unit = {
    Files.write(metaFile(root, name).toPath, bytes)
    Files.deleteIfExists(metaFile(root, s".$name.crc").toPath)
  }

  private def lineEnds(bytes: Array[Byte]): Seq[Int] = bytes.indices.filter(bytes(_) == '\n')

  /**
   * Each damage to `8.compact.index` of an interval-3 log of batches 0..10 (compacts 2, 5, 8):
   * applies it and returns the reason `prove` must give (None: `prove` cannot see it, only the
   * runs' CRCs can, and this is the reason `checkRuns` gives).
   */
  private val damages: Seq[(String, (BatchTaggedFileStreamSinkLog, File) => String)] = Seq(
    "random bytes" -> { (_, root) =>
      val r = new scala.util.Random(42)
      overwrite(root, "8.compact.index", Array.fill(300)(r.nextInt(256).toByte))
      "its first line is not 'batchlog-index v2'"
    },
    "truncated mid-line" -> { (_, root) =>
      val bytes = Files.readAllBytes(indexFile(root, 8).toPath)
      overwrite(root, "8.compact.index", bytes.take(lineEnds(bytes)(4) + 4))
      "it does not end with a checksum line: it is truncated"
    },
    "truncated at a line boundary" -> { (_, root) =>
      val bytes = Files.readAllBytes(indexFile(root, 8).toPath)
      overwrite(root, "8.compact.index", bytes.take(lineEnds(bytes)(6) + 1))
      "it does not end with a checksum line: it is truncated"
    },
    "empty" -> { (_, root) =>
      overwrite(root, "8.compact.index", Array.emptyByteArray)
      "it is empty"
    },
    "the index of another compact file, renamed" -> { (_, root) =>
      overwrite(root, "8.compact.index", Files.readAllBytes(indexFile(root, 5).toPath))
      "it describes 5.compact, not 8.compact"
    },
    "one run's offset changed, checksum recomputed" -> { (log, root) =>
      val good = proved(log, 8)
      val moved = good.runs.updated(3, good.runs(3).copy(offset = good.runs(3).offset + 1))
      overwrite(root, "8.compact.index", good.copy(runs = moved).toBytes)
      val gapAt = good.runs(3).offset
      s"its runs leave bytes $gapAt..${gapAt + 1} uncovered"
    }
  )

  /** The compact file rewritten with the same length (lines reversed) and its old mtime. */
  private def rewriteCompactSameLength(root: File): Unit = {
    val f = metaFile(root, "8.compact")
    val mtime = f.lastModified()
    val lines = compactLines(root, 8)
    val rewritten = (lines.head +: lines.tail.reverse).mkString("\n").getBytes(UTF_8)
    assert(rewritten.length == f.length())
    overwrite(root, "8.compact", rewritten)
    assert(f.setLastModified(mtime))
  }

  /** Reads and a following compaction give exactly the right entries despite the damage. */
  private def assertReadsAndCompactionExact(root: File, perBatch: Long => Int): Unit = {
    val api = BatchLog.forPath(spark, root.toString)
    (0L to 10L).foreach { b =>
      assert(api.files(b).toSeq.sorted == entries(b, perBatch(b)).map(_.path).toSeq.sorted, b)
    }
    assert(api.batches().toSeq == (0L to 10L))
    val log = new BatchTaggedFileStreamSinkLog(spark, new File(root, "_spark_metadata").toString)
    assert(log.add(11, entries(11, perBatch(11))))
    val expected = (0L to 11L).flatMap(b => entries(b, perBatch(b))).toSet
    // What plain Spark reads: the new compact file alone holds every entry.
    assert(compactLines(root, 11).drop(1).map(LogFormat.decode).toSet == expected)
    assert(compactLines(root, 11).length - 1 == expected.size)
    val index = proved(log, 11)
    assert(log.indexProblem(11).isEmpty)
    assert(index == log.scanIndex(11, statusOf(log, 11)))
    val after = BatchLog.forPath(spark, root.toString)
    (0L to 11L).foreach { b =>
      assert(after.files(b).toSeq.sorted == entries(b, perBatch(b)).map(_.path).toSeq.sorted, b)
    }
  }

  damages.foreach { case (name, damage) =>
    test(s"a damaged index ($name) is not proved, names why, and is never used") {
      withSQLConf(BatchLogConf.CompactIntervalKey -> "3") {
        withTempDir { root =>
          val perBatch = (b: Long) => (b % 3 + 1).toInt
          val log = buildSink(root, 11, perBatch)
          val reason = damage(log, root)
          assert(prove(log, 8) == Left(reason))
          assert(log.indexProblem(8).contains(reason))
          assert(log.indexOf(8) == log.scanIndex(8, statusOf(log, 8)))
          assertReadsAndCompactionExact(root, perBatch)
        }
      }
    }
  }

  test("a stale index (compact file rewritten, same length and mtime) is caught by the run CRCs") {
    withSQLConf(BatchLogConf.CompactIntervalKey -> "3") {
      withTempDir { root =>
        val perBatch = (b: Long) => (b % 3 + 1).toInt
        val log = buildSink(root, 11, perBatch)
        val good = proved(log, 8)
        rewriteCompactSameLength(root)
        // Name, length, mtime and tiling all still hold: only the bytes of the runs differ.
        assert(prove(log, 8) == Right(good))
        val last = good.runs.maxBy(_.offset)
        val why = log.indexProblem(8).getOrElse(fail("the stale index passed verification"))
        assert(why.endsWith("does not match the compact file's bytes"), why)
        val in = new java.io.FileInputStream(metaFile(root, "8.compact"))
        try assert(CompactIndex.checkRuns(good, in).contains(why))
        finally in.close()
        assert(log.scanIndex(8, statusOf(log, 8)).runs.map(_.batchId) ==
          good.runs.map(_.batchId).reverse)
        assert(last.batchId.contains(8L))
        // Compaction 11 copies by the stale index, fails on the first CRC, retries from a scan.
        assertReadsAndCompactionExact(root, perBatch)
      }
    }
  }

  test("a legacy v1 index is ignored (rebuilt in memory), not a problem; compaction writes v2") {
    withSQLConf(BatchLogConf.CompactIntervalKey -> "3") {
      withTempDir { root =>
        val perBatch = (b: Long) => (b % 3 + 1).toInt
        val log = buildSink(root, 11, perBatch)
        val good = proved(log, 8)
        val v1 = (Seq(
          "batchlog-index v1",
          s"compact ${good.compactLength} ${good.compactModTime} dropped -1 -1"
        ) ++ good.runs.take(2).map(r => s"${r.batchId.get} ${r.offset} ${r.length} ${r.count}"))
          .mkString("", "\n", "\n")
        overwrite(root, "8.compact.index", v1.getBytes(UTF_8))
        assert(prove(log, 8) == Left(CompactIndex.LegacyReason))
        assert(log.indexProblem(8).contains(CompactIndex.LegacyReason))
        assert(log.indexOf(8) == good)
        assertReadsAndCompactionExact(root, perBatch)
        assert(new String(Files.readAllBytes(indexFile(root, 11).toPath), UTF_8)
          .startsWith(CompactIndex.Header + "\n"))
      }
    }
  }

  test("an index of a compact file without entries is a header and no runs; it proves") {
    withSQLConf(BatchLogConf.CompactIntervalKey -> "3") {
      withTempDir { root =>
        val log = buildSink(root, 6, _ => 0)
        val index = proved(log, 5)
        assert(index.runs.isEmpty && index.compactLength == 2)
        assert(log.indexProblem(5).isEmpty)
      }
    }
  }

  test("byte-copy compaction keeps every entry and tag across many compactions") {
    withSQLConf(BatchLogConf.CompactIntervalKey -> "2") {
      withTempDir { root =>
        val log = buildSink(root, 21, b => (b % 4).toInt) // includes batches with no entries
        val expected = (0L until 21L).flatMap(b => entries(b, (b % 4).toInt)).toSet
        assert(log.allFiles().toSet == expected)
        val lines = compactLines(root, 19).drop(1)
        assert(lines.map(LogFormat.decode).toSet == expected.filter(_.batchId.get <= 19))
      }
    }
  }

  test("retention by batch count drops old batches at compaction, keeps tags, reports the drop") {
    withSQLConf(BatchLogConf.CompactIntervalKey -> "3", BatchLogConf.RetentionBatchesKey -> "5") {
      withTempDir { root =>
        val log = buildSink(root, 20, _ => 2)
        // Compaction 17 keeps batches >= 17 + 1 - 5 = 13; batches 18 and 19 are batch files.
        assert(log.allFiles().map(_.batchId.get).toSet == (13L to 19L).toSet)
        val index = proved(log, 17)
        // Compaction 14 kept batches >= 10, so compact 14 held 10..14; compaction 17 dropped
        // 10..12 (3 batches x 2 entries).
        assert(index.droppedEntries == 6 && index.droppedMaxBatch == 12)
      }
    }
  }

  test("retention by age drops and hides entries older than the age") {
    withSQLConf(BatchLogConf.CompactIntervalKey -> "3", BatchLogConf.RetentionAgeKey -> "1h") {
      withTempDir { root =>
        val now = System.currentTimeMillis()
        val log =
          new BatchTaggedFileStreamSinkLog(spark, new File(root, "_spark_metadata").toString)
        (0 until 6).foreach { b =>
          val old = b < 2 // batches 0 and 1 are two hours old
          log.add(b, Array(entry(b, 0, if (old) now - 7200000L else now)))
        }
        assert(log.allFiles().map(_.batchId.get).toSeq == (2L to 5L))
        assert(compactLines(root, 5).drop(1).map(l => LogFormat.taggedBatch(l).get) == (2L to 5L))
      }
    }
  }

  test("invalid retention settings are refused, naming the key") {
    Seq(BatchLogConf.RetentionBatchesKey -> "0", BatchLogConf.RetentionAgeKey -> "soon").foreach {
      case (k, v) =>
        withSQLConf(k -> v) {
          withTempDir { root =>
            val e = intercept[BatchLogException](buildSink(root, 1, _ => 1))
            assert(e.code == BatchLogException.InvalidArgument && e.getMessage.contains(k))
          }
        }
    }
  }
}
