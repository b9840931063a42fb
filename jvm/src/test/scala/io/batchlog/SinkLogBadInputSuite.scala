package io.batchlog

import java.io.File

import io.batchlog.log.{BatchTaggedFileStreamSinkLog, SinkRecord}

/** Corrupt, truncated, mis-versioned and missing log files: errors that name the file. */
class SinkLogBadInputSuite extends SparkSessionTestBase {
  import BatchLogConf._
  import TestLogs._

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
      val mtime = f.lastModified()
      overwrite(f, "v2" +: readLines(f).tail)
      // Same length and (as within one millisecond) same time: the index still matches the file,
      // and no run's checksum covers the header, so a read through the index checks it itself.
      assert(f.setLastModified(mtime))
      assertFails(BatchLogException.CorruptLog, f, "'v2'")(log.allFiles())
      assertFails(BatchLogException.CorruptLog, f, "'v2'")(log.checkHeader(2L))
      // verify reads the live compact file once, run by run through its index: the header too
      val report = io.batchlog.ops.Verify.run(spark, dir.getParent)
      assert(!report.healthy && report.logErrors.exists(_.contains("'v2'")), report.logErrors)
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

  test("a young log read at another interval than its writer's says so, not 'run repair'") {
    withTempDir { root =>
      val dir = metaDir(root)
      // the writer: interval 10, batches 0..5 (no compact file yet), its record says 10
      withSQLConf(CompactIntervalKey -> "10") {
        val log = ours(dir)
        (0L to 5L).foreach(b => assert(log.add(b, entriesOf(b))))
        SinkRecord.write(
          log.checkpointFileManager,
          log.metadataPath,
          SinkRecord.first("q", 0L, 10, 1L)
        )
      }
      // a reader at interval 3 looks for 5.compact: the error names the interval to set
      withSQLConf(CompactIntervalKey -> "3") {
        val e = intercept[BatchLogException](ours(dir).allFiles())
        assert(e.code === BatchLogException.InvalidArgument, e.getMessage)
        assert(e.getMessage.contains("_spark_metadata/5.compact, which the log at 3"), e.getMessage)
        assert(e.getMessage.contains(s"set $CompactIntervalKey=10 in this session"), e.getMessage)
        assert(!e.getMessage.contains("repair"), e.getMessage)
      }
      // ... which reads it
      withSQLConf(CompactIntervalKey -> "10") {
        assert(ours(dir).allFiles().map(_.batchId.get).distinct.sorted.toSeq === (0L to 5L))
      }
      // without a record, the missing file is what is wrong: repair is the way out
      new File(root, "_batchlog").listFiles().foreach(_.delete())
      withSQLConf(CompactIntervalKey -> "3") {
        assertFails(BatchLogException.MissingLogFile, new File(dir, "5.compact"), "repair")(
          ours(dir).allFiles()
        )
      }
    }
  }
}
