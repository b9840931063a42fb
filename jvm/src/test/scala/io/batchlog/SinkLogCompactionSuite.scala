package io.batchlog

import java.io.File

/**
 * Writing through the batch-tagged log: every line tagged across compactions, expired-log deletion
 * and the compact interval exactly as Spark's, and Spark's own log reading ours.
 */
class SinkLogCompactionSuite extends SparkSessionTestBase {
  import BatchLogConf._
  import TestLogs._

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

  test(
    "with a cleanup delay, files below an unmoved cut are deleted once they expire, as Spark's"
  ) {
    // The sweep skips itself while its cut stays and nothing it kept has expired: it must still
    // delete what expires meanwhile. Batches 0..8 are written well within the delay; the cut of
    // batches 8 and 9 is the same (5): batch 9, after the delay, must delete what batch 8 kept.
    withTempDir { root =>
      val vDir = new File(root, "vanilla")
      val oDir = new File(root, "ours")
      withSQLConf(
        CompactIntervalKey -> "3",
        MinBatchesToRetainKey -> "2",
        CleanupDelayKey -> "3000ms"
      ) {
        val v = vanilla(vDir)
        val o = ours(oDir)
        def add(b: Long): Unit = {
          val es = entriesOf(b, 2)
          assert(v.add(b, es.map(_.toSinkFileStatus)))
          assert(o.add(b, es))
        }
        val start = System.nanoTime()
        (0L to 8L).foreach(add)
        val built = (System.nanoTime() - start) / 1000000
        assume(built < 2500, s"the batches took $built ms to write: the delay passed meanwhile")
        assert(logFileNames(oDir) === expectedNames(0 until 9, 3))
        assert(logFileNames(oDir) === logFileNames(vDir))
        Thread.sleep(3500)
        add(9L)
        assert(logFileNames(oDir) === logFileNames(vDir))
        assert(logFileNames(oDir) === expectedNames(5 until 10, 3))
        assertIndexed(oDir)
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

}
