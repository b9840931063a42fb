package io.batchlog

import java.io.File
import java.nio.charset.StandardCharsets.UTF_8
import java.nio.file.Files

import org.apache.hadoop.fs.Path

import io.batchlog.checkpoint.StateFiles
import io.batchlog.log.{LogTruncation, SinkLogEntry, SinkRecord}
import io.batchlog.ops.{Rewind, RewindPlan}

/**
 * Planning a rewind ([[Rewind.plan]]) on a sink and checkpoint written file by file, as a query
 * with one file source and one HDFS-backed stateful operator leaves them after batches 0..7: sink
 * log at interval 3, two data files per batch, `offsets/` and `commits/` 0..7, the file source's
 * log 0..7 (interval 10, `offsets/N` naming log offset N), state versions 1..8. Nothing runs.
 */
class RewindPlanSuite extends SparkSessionTestBase with RewindFixture {
  import BatchLogConf._
  import TestLogs._

  private def local(p: Path): String = p.toUri.getPath

  /** (local path, size, batch, logged) of each data file the plan deletes. */
  private def dataFilesOf(p: RewindPlan): Set[(String, Long, Long, Boolean)] =
    p.dataFiles.map(d => (local(d.path), d.size, d.batchId, d.logged)).toSet

  /** The data files of batches `bs` as the fixture wrote them, all logged. */
  private def loggedFiles(fx: Fixture, bs: Seq[Long]): Set[(String, Long, Long, Boolean)] =
    bs.flatMap { b =>
      (0 to 1).map { i =>
        val f = new File(fx.out, new Path(namedEntry(b, i).path).getName)
        (f.getPath, f.length(), b, true)
      }
    }.toSet

  private def meta(fx: Fixture): Path = new Path(fx.meta.toURI.toString.stripSuffix("/"))

  test("a rewind to batch 5 plans batches 5..7 away: data, logs, commits, offsets, state") {
    withSQLConf(CompactIntervalKey -> "3", DeletionKey -> "false") {
      withFixture() { fx =>
        // a failed attempt's file of batch 6, never logged; other files are not data files
        val orphan = new File(fx.out, s"part-00009-batch-6-${uuid(6, 9)}.c000.json")
        write(orphan, "orphan")
        Seq("_SUCCESS", ".part-00009-batch-6-x.crc", "part-00008-plain.json")
          .foreach(n => write(new File(fx.out, n), "-"))
        write(new File(fx.out, s"_temporary/part-00007-batch-7-${uuid(7, 7)}.json"), "-")

        val p = fx.plan(5L)
        assert(dataFilesOf(p) ===
          loggedFiles(fx, 5L to 7L) + ((orphan.getPath, orphan.length(), 6L, false)))
        assert(p.sinkLog === LogTruncation(meta(fx), 4L, 3, Nil, None, Seq(7L, 6L, 5L)))
        assert(p.sourceLogs.map { case (i, t) => (i, t.keepUpTo, t.interval, t.delete) } ===
          Seq((0, 5L, 10, Seq(7L, 6L))))
        assert(p.sourceLogs.forall(_._2.rebuild.isEmpty))
        assert(p.stateFiles.map(s => local(s._1)).toSet ===
          Set(6L, 7L, 8L).map(v => new File(fx.cp, s"state/0/0/$v.delta").getPath))
        assert(!p.removeStateDir)
        assert(p.commitsToDelete === Seq(7L, 6L, 5L))
        assert(p.offsetsToDelete === Seq(7L, 6L))
        assert((p.sinkLatest, p.offsetsLatest, p.commitsLatest) === ((7L, 7L, 7L)))
        assert((p.sinkHorizon, p.checkpointHorizon, p.horizon) === ((0L, 0L, 0L)))
        assert(!p.isNoop && !p.resuming && !p.force && p.queryId === QueryId)
      }
    }
  }

  test("a rewind to batch 0 plans everything away, state/ with it") {
    withSQLConf(CompactIntervalKey -> "3", DeletionKey -> "false") {
      withFixture() { fx =>
        val p = fx.plan(0L)
        assert(dataFilesOf(p) === loggedFiles(fx, 0L to 7L))
        assert(p.sinkLog.delete === (7L to 0L by -1L) && p.sinkLog.keepUpTo === -1L)
        assert(p.sourceLogs.map(s => (s._1, s._2.delete)) === Seq((0, (7L to 1L by -1L))))
        assert(p.removeStateDir && p.stateFiles.isEmpty)
        assert(p.commitsToDelete === (7L to 0L by -1L))
        assert(p.offsetsToDelete === (7L to 1L by -1L))
      }
    }
  }

  test("a rewind to the batch after the latest is a no-op") {
    withSQLConf(CompactIntervalKey -> "3", DeletionKey -> "false") {
      withFixture() { fx =>
        val p = fx.plan(Latest + 1)
        assert(p.isNoop)
        assert(p.dataFiles.isEmpty && p.sinkLog.isNoop && p.sourceLogs.isEmpty)
        assert(p.stateFiles.isEmpty && p.commitsToDelete.isEmpty && p.offsetsToDelete.isEmpty)
        assert(!fx.plan(Latest).isNoop)
      }
    }
  }

  test("a cleaned-up sink log is rebuilt from the compact file above the target") {
    withSQLConf(CompactIntervalKey -> "3", MinBatchesToRetainKey -> "4", CleanupDelayKey -> "0") {
      withFixture() { fx =>
        assert(logFileNames(fx.meta) === Set("2.compact", "3", "4", "5.compact", "6", "7"))
        val p = fx.plan(2L)
        assert(p.sinkLog ===
          LogTruncation(meta(fx), 1L, 3, Seq(0L, 1L), Some(2L), (7L to 2L by -1L)))
        // entries of batches 2..7 are read from 2.compact and 5.compact through their indexes
        assert(dataFilesOf(p) === loggedFiles(fx, 2L to 7L))
      }
    }
  }

  test("one compact file left: the cut is laid out for the interval readers derive") {
    withSQLConf(CompactIntervalKey -> "3", MinBatchesToRetainKey -> "2", CleanupDelayKey -> "0") {
      withFixture() { fx =>
        assert(logFileNames(fx.meta) === Set("5.compact", "6", "7"))
        val p = fx.plan(4L)
        assert(dataFilesOf(p) === loggedFiles(fx, 4L to 7L))
        // Spark derives interval 6 from 5.compact alone; laid out for 6 the cut would leave batch
        // files 0..3 and no compact file, and readers (at 3, the configured interval) would look
        // for 2.compact. It is laid out for 3, which readers derive from 2.compact.
        assert(p.sinkLog ===
          LogTruncation(meta(fx), 3L, 3, Seq(2L, 3L), Some(5L), Seq(7L, 6L, 5L)))
        Rewind.apply(spark, p, quiet = true)
        assert(logFileNames(fx.meta) === Set("2.compact", "3"))
        assert(ours(fx.meta).allFiles().map(_.batchId.get).toSet === (0L to 3L).toSet)
      }
    }
  }

  private def refusal(code: String, message: String)(plan: => RewindPlan): Unit = {
    val e = intercept[BatchLogException](plan)
    assert(e.code === code)
    assert(e.getMessage === message)
  }

  test("a target above the batch after the latest, or below 0, is refused") {
    withSQLConf(CompactIntervalKey -> "3") {
      withFixture() { fx =>
        refusal(
          BatchLogException.InvalidArgument,
          "Invalid to_batch = 9: the sink's latest batch is 7, so a rewind can go to batch 8 at " +
            "most. Nothing was changed."
        )(fx.plan(9L))
        refusal(
          BatchLogException.InvalidArgument,
          "Invalid to_batch = -1: it must be >= 0. Nothing was changed."
        )(fx.plan(-1L))
      }
    }
  }

  test("a target below the checkpoint's horizon is refused, naming minBatchesToRetain") {
    withSQLConf(CompactIntervalKey -> "3", MinBatchesToRetainKey -> "5") {
      withFixture() { fx =>
        (0 to 2).foreach { b =>
          deleteWithCrc(new File(fx.cp, s"offsets/$b"));
          deleteWithCrc(new File(fx.cp, s"commits/$b"))
        }
        refusal(
          BatchLogException.BeyondHorizon,
          "Cannot rewind to batch 3: the oldest batch a rewind can reach is 4 (the checkpoint " +
            s"keeps offsets and commits from batch 3 only ($MinBatchesToRetainKey = 5); raise " +
            s"$MinBatchesToRetainKey to keep a longer rewind horizon). Nothing was changed."
        )(fx.plan(3L))
        assert(fx.plan(4L).checkpointHorizon === 4L)
      }
    }
  }

  test("a target below the sink's horizon (untagged entries) is refused, pointing at adopt") {
    withSQLConf(CompactIntervalKey -> "3", MinBatchesToRetainKey -> "2", CleanupDelayKey -> "0") {
      // plain Spark wrote the log and named the files: 5.compact's entries are unprovable
      withFixture(named = false, vanillaLog = true) { fx =>
        assert(logFileNames(fx.meta) === Set("5.compact", "6", "7"))
        val sink = new Path(fx.out.toURI.toString.stripSuffix("/"))
        refusal(
          BatchLogException.BeyondHorizon,
          "Cannot rewind to batch 5: the oldest batch a rewind can reach is 6 (the sink's entries " +
            "of batches below 6 are untagged (written or compacted by plain Spark); run " +
            s"`python -m batchlog adopt $sink` to tag the ones that can be proven). Nothing was " +
            "changed."
        )(fx.plan(5L))
        val p = fx.plan(6L)
        assert(p.sinkHorizon === 6L)
        assert(p.dataFiles.map(_.batchId).sorted === Seq(6L, 6L, 7L, 7L))
      }
    }
  }

  test("a checkpoint that is not the sink's query's, or has a hole, is refused") {
    withSQLConf(CompactIntervalKey -> "3", DeletionKey -> "false") {
      withFixture() { fx =>
        val cpRoot = new Path(fx.cp.toURI.toString.stripSuffix("/"))
        // async progress tracking leaves holes in offsets/
        deleteWithCrc(new File(fx.cp, "offsets/4"))
        refusal(
          BatchLogException.UnsupportedCheckpoint,
          s"Cannot roll back $cpRoot/offsets/4: it is missing inside the retained range (async " +
            "progress tracking writes sparse logs). " + unsupportedTail
        )(fx.plan(5L))
        // batches planned beyond what the sink committed: another query's checkpoint
        write(new File(fx.cp, "offsets/9"), "v1\n{}")
        refusal(
          BatchLogException.UnsupportedCheckpoint,
          s"Cannot roll back $cpRoot: it has planned batches up to 9 but the sink " +
            s"${new Path(fx.out.toURI.toString.stripSuffix("/"))} has committed up to 7: they " +
            "are not the checkpoint and sink of one query. " + unsupportedTail
        )(fx.plan(5L))
        // the sink's record names another owner
        SinkRecord.write(
          localFm(fx.meta),
          meta(fx),
          SinkRecord.first("another-query", 0L, 3, 0L)
        )
        val e = intercept[BatchLogException](fx.plan(5L))
        assert(e.code === BatchLogException.UnsupportedCheckpoint)
        assert(e.getMessage.contains(s"it is the checkpoint of query $QueryId, but the sink " +
          s"${fx.out.toURI.toString.stripSuffix("/")} is written by query another-query"))
      }
    }
  }

  private val unsupportedTail =
    "Rewind supports the file source, sources that only log their initial offsets (Kafka, " +
      "rate), and the HDFS-backed and RocksDB state stores; rebuild this query's output from " +
      "scratch with a new checkpoint instead. Nothing was changed."
}
