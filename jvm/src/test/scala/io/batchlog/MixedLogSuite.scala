package io.batchlog

import java.io.File
import java.nio.file.Files

import io.batchlog.log.LogFormat
import io.batchlog.ops.Horizon

/** Logs written partly by plain Spark and partly by batchlog, in either order. */
class MixedLogSuite extends SparkSessionTestBase {
  import BatchLogConf._
  import TestLogs._

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

}
