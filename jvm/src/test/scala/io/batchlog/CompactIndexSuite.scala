package io.batchlog

import java.io.File
import java.nio.charset.StandardCharsets.UTF_8
import java.nio.file.Files

import io.batchlog.log.{BatchTaggedFileStreamSinkLog, IndexRun, LogFormat}

/** The per-batch index beside compact files, byte-copy compaction, and retention. */
class CompactIndexSuite extends CompactIndexTestBase {

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
    withIndexedLog(batches = 9, per = _ => 2) { (root, log, good) =>
      // Swap the runs of batches 3 and 4: the header still matches the compact file.
      val swapped = good.runs.map {
        case r if r.batchId.contains(3L) => r.copy(batchId = Some(4L))
        case r if r.batchId.contains(4L) => r.copy(batchId = Some(3L))
        case r => r
      }
      rewriteIndex(log, 8, good.copy(runs = swapped))
      val api = BatchLog.forPath(spark, root.toString)
      assert(api.files(3).toSeq == entries(3, 2).map(_.path).toSeq)
      assert(api.files(4).toSeq == entries(4, 2).map(_.path).toSeq)
      assert(api.log.indexOf(8, rebuild = true) == good)
    }
  }

  test("an index of another version of the compact file (length differs) is not used") {
    withIndexedLog(batches = 6, compact = 5, per = _ => 2) { (root, log, good) =>
      rewriteIndex(log, 5, good.copy(compactLength = good.compactLength + 1, runs = Vector.empty))
      val len = good.compactLength
      assert(prove(log, 5) == Left(s"the compact file is $len bytes, the index says ${len + 1}"))
      val api = BatchLog.forPath(spark, root.toString)
      assert(api.files(2).toSeq == entries(2, 2).map(_.path).toSeq)
      assert(api.log.indexOf(5) == good)
    }
  }

  test("an index of the compact file with another modification time is not used") {
    withIndexedLog(batches = 6, compact = 5, per = _ => 2) { (root, log, good) =>
      rewriteIndex(log, 5, good.copy(compactModTime = 1L))
      assert(prove(log, 5) == Left(s"the compact file's modification time is " +
        s"${good.compactModTime}, the index says 1"))
      assert(
        BatchLog.forPath(spark, root.toString).files(2).toSeq == entries(2, 2).map(_.path).toSeq
      )
      assert(log.indexOf(5) == good)
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

  test("the newest batch retention dropped is carried into later indexes: the watermark") {
    withSQLConf(BatchLogConf.CompactIntervalKey -> "3") {
      withTempDir { root =>
        // Compaction 5 keeps batches >= 5 + 1 - 4 = 2 (drops 0 and 1); later compactions drop
        // nothing (retention off), yet their indexes still tell readers batch 1 was dropped.
        withSQLConf(BatchLogConf.RetentionBatchesKey -> "4")(buildSink(root, 6, _ => 1))
        val log =
          new BatchTaggedFileStreamSinkLog(spark, new File(root, "_spark_metadata").toString)
        assert(proved(log, 5).droppedMaxBatch == 1)
        (6 until 12).foreach(b => log.add(b, Array(entry(b, 0))))
        Seq(8L, 11L).foreach { c =>
          val index = proved(log, c)
          assert(index.droppedEntries == 0 && index.droppedMaxBatch == 1, s"compact $c")
        }
        assert(log.allFiles().map(_.batchId.get).toSet == (2L to 11L).toSet)
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
