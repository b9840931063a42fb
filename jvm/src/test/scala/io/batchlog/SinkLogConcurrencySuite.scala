package io.batchlog

import java.io.File

import io.batchlog.log.{BatchTaggedFileStreamSinkLog, SinkLogEntry}

/** A reader racing a compaction, and a writer that may only log the batch after the latest. */
class SinkLogConcurrencySuite extends SparkSessionTestBase {
  import BatchLogConf._
  import TestLogs._

  /**
   * A log of interval 3 whose compactions delete every file below the newest two batches at once,
   * and its writer: what a reader racing a compaction meets.
   */
  private def withEagerCleanup(f: (File, File, BatchTaggedFileStreamSinkLog) => Unit): Unit =
    withTempDir { root =>
      val dir = metaDir(root)
      withSQLConf(CompactIntervalKey -> "3", MinBatchesToRetainKey -> "2", CleanupDelayKey -> "0") {
        f(root, dir, ours(dir))
      }
    }

  test("reading starts over when a concurrent compaction deletes the files it listed") {
    withEagerCleanup { (_, dir, writer) =>
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

  test("a read of one listing (verify's) starts over when a compaction deleted what it listed") {
    withEagerCleanup { (root, dir, writer) =>
      def advance(from: Long, to: Long): Unit =
        (from to to).foreach(b => assert(writer.add(b, entriesOf(b))))
      def upTo(b: Long) = (0L to b).flatMap(entriesOf(_)).toSet
      advance(0L, 3L)
      // listed 2.compact + 3; then the writer compacts at 5 and 8 and deletes everything below 5
      val reader = BatchTaggedFileStreamSinkLog.listedOnce(spark, root.toString)
      assert(reader.getLatestBatchId().contains(3L))
      advance(4L, 8L)
      assert(!new File(dir, "2.compact").exists() && !new File(dir, "3").exists())
      val seen = scala.collection.mutable.ArrayBuffer.empty[SinkLogEntry]
      val checked = reader.foreachLiveEntryChecked(64L << 20)((e, sound) => if (sound) seen += e)
      assert(seen.size === upTo(8L).size && seen.toSet === upTo(8L))
      assert(checked.map(_._1).contains(8L))
      // a file missing without a newer compaction is an error, not a retry
      val stale = BatchTaggedFileStreamSinkLog.listedOnce(spark, root.toString)
      assert(stale.getLatestBatchId().contains(8L) && stale.interval == 3)
      assert(new File(dir, "8.compact").delete())
      new File(dir, ".8.compact.crc").delete()
      val e = intercept[BatchLogException](stale.foreachLiveEntryChecked(64L << 20)((_, _) => ()))
      assert(e.code === BatchLogException.MissingLogFile)
      assert(e.getMessage.contains("_spark_metadata/8.compact "), e.getMessage)
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

}
