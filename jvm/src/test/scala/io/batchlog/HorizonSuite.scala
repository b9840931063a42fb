package io.batchlog

import java.io.File

import io.batchlog.log.SinkLogEntry
import io.batchlog.ops.Horizon

/**
 * The rewind horizon ([[Horizon]]): what the checkpoint retains (pure, from the batch ids of
 * `offsets/` and `commits/`) and how far back a sink's log is tagged (from log files written
 * through batchlog's and Spark's own logs; no query).
 */
class HorizonSuite extends SparkSessionTestBase {
  import BatchLogConf._
  import TestLogs._

  // ---- the checkpoint -------------------------------------------------------------------------

  /** (what, offsets, commits, horizon). */
  private val checkpoints: Seq[(String, Seq[Long], Seq[Long], Long)] = Seq(
    ("empty checkpoint", Nil, Nil, 0L),
    ("nothing purged", 0L to 5L, 0L to 5L, 0L),
    ("nothing purged, the latest batch planned only", 0L to 5L, 0L to 4L, 0L),
    ("offsets from 0, no commit yet", Seq(0L), Nil, 0L),
    // minBatchesToRetain-style retention: Spark purges both logs below the same threshold
    ("both purged below 16 (latest 20)", 16L to 20L, 16L to 20L, 17L),
    ("both purged below 16, batch 20 planned only", 16L to 20L, 16L to 19L, 17L),
    ("commits purged further than offsets", 3L to 10L, 5L to 10L, 6L),
    ("offsets purged further than commits", 5L to 10L, 3L to 10L, 6L),
    ("offsets purged, no commit left", 3L to 10L, Nil, 4L),
    // gaps are not the horizon's to see: the plan refuses a missing file inside the range
    ("a gap in offsets", Seq(0L, 1L, 4L, 5L), 0L to 5L, 0L),
    ("a gap after a purge", Seq(7L, 9L, 10L), Seq(7L, 9L, 10L), 8L),
    // offsets from 0 make the horizon 0 whatever commits/ holds (reported: commits purged
    // while offsets were not is not a layout Spark writes; the plan then refuses the rewind as
    // a missing commits/N-1 instead of a horizon)
    ("offsets from 0, commits purged", 0L to 10L, 3L to 10L, 0L)
  )

  checkpoints.foreach { case (what, offsets, commits, horizon) =>
    test(s"checkpoint horizon: $what") {
      assert(Horizon.ofCheckpoint(offsets, commits) === horizon)
    }
  }

  // ---- the sink -------------------------------------------------------------------------------

  /** Batch `b`'s entries: plain (vanilla-named) files, and batch-named ones from `namedFrom` on. */
  private def batch(b: Long, namedFrom: Long): Array[SinkLogEntry] =
    if (b >= namedFrom) Array(plainEntry(b, 0), namedEntry(b, 1)) else Array(plainEntry(b, 0))

  private val NoNames = Long.MaxValue

  /** Writes batches `range` with Spark's log (`vanilla`) or batchlog's. */
  private def write(dir: File, range: Seq[Long], vanillaLog: Boolean, namedFrom: Long): Unit = {
    lazy val v = vanilla(dir)
    lazy val o = ours(dir)
    range.foreach { b =>
      val es = batch(b, namedFrom)
      assert(if (vanillaLog) v.add(b, es.map(_.toSinkFileStatus)) else o.add(b, es))
    }
  }

  /**
   * (what, how the log is written, the files left, horizon). Interval 3, cleanup right away keeping
   * 2 batches (so after batch 10 only 8.compact, 9 and 10 are left) unless `deletion` is off.
   */
  private val sinks: Seq[(String, File => Unit, Boolean, Set[String], Long)] = Seq(
    ("an empty log", _ => (), true, Set.empty, 0L),
    (
      "batchlog's log, cleaned up",
      write(_, 0L to 10L, vanillaLog = false, NoNames),
      true,
      Set("8.compact", "9", "10"),
      0L
    ),
    (
      "Spark's log, every batch file kept: every batch proven",
      write(_, 0L to 10L, true, NoNames),
      false,
      expectedNames(0 until 11, 3),
      0L
    ),
    (
      "Spark's log, cleaned up: nothing proves 8.compact's entries",
      write(_, 0L to 10L, vanillaLog = true, NoNames),
      true,
      Set("8.compact", "9", "10"),
      9L
    ),
    (
      "Spark's log, cleaned up, batch-named files: every batch known",
      write(_, 0L to 10L, vanillaLog = true, namedFrom = 0L),
      true,
      Set("8.compact", "9", "10"),
      9L
    ),
    (
      "Spark's log, cleaned up, batch-named files from batch 6: just above batch 5",
      write(_, 0L to 10L, vanillaLog = true, namedFrom = 6L),
      true,
      Set("8.compact", "9", "10"),
      6L
    ),
    (
      "a Spark interlude (8..13) in batchlog's log, its batch files gone",
      { dir =>
        write(dir, 0L to 7L, vanillaLog = false, NoNames)
        write(dir, 8L to 13L, vanillaLog = true, NoNames)
        write(dir, 14L to 14L, vanillaLog = false, NoNames)
      },
      true,
      Set("11.compact", "12", "13", "14.compact"),
      12L
    )
  )

  sinks.foreach { case (what, build, deletion, left, horizon) =>
    test(s"sink horizon: $what") {
      withSQLConf(
        CompactIntervalKey -> "3",
        MinBatchesToRetainKey -> "2",
        CleanupDelayKey -> "0",
        DeletionKey -> deletion.toString
      ) {
        withTempDir { root =>
          val dir = metaDir(root)
          build(dir)
          assert(logFileNames(dir) === left)
          assert(Horizon.ofSink(ours(dir)) === horizon)
        }
      }
    }
  }
}
