package io.batchlog

import java.io.File

import org.apache.hadoop.fs.Path

import io.batchlog.log.{CompactIndex, LogFormat, LogTruncation}
import io.batchlog.log.JsonField

/**
 * Cutting a compactible log back to a batch ([[LogTruncation]]), on log files written by hand in a
 * temporary directory: no session, no query. Every log here has compact interval 3 (compactions at
 * 2, 5, 8, 11), two entries per batch, batch files holding their batch and compact files every
 * batch up to theirs, and an index beside each compact file.
 */
class LogTruncationSuite extends TempDirs {
  import TestLogs._

  private val Interval = 3

  private def isCompact(id: Long) = (id + 1) % Interval == 0
  private def nameOf(id: Long) = if (isCompact(id)) s"$id.compact" else id.toString
  private def lines(b: Long): Seq[String] = (0 until 2).map(i => LogFormat.encode(plainEntry(b, i)))

  /** Log files `ids` (the others absent, as after a cleanup), each compact file indexed. */
  private def writeLog(dir: File, ids: Seq[Long]): Unit = ids.foreach { id =>
    writeLogFile(dir, nameOf(id), if (isCompact(id)) (0L to id).flatMap(lines) else lines(id))
    if (isCompact(id)) writeLogFile(dir, s"${nameOf(id)}${CompactIndex.Suffix}", Nil)
  }

  private def plan(dir: File, keepUpTo: Long): LogTruncation =
    LogTruncation.plan(localFm(dir), new Path(dir.toURI), keepUpTo, Interval)

  private def cut(dir: File, t: LogTruncation): Unit =
    LogTruncation.apply(localFm(dir), t)(LogFormat.taggedBatch)

  /** Names of the files in `dir`, checksums and temp files aside. */
  private def files(dir: File): Set[String] =
    dir.listFiles().map(_.getName).filterNot(_.startsWith(".")).toSet

  /** The batches of the lines of log file `name`, in file order. */
  private def batchesIn(dir: File, name: String): Seq[Long] =
    readLines(new File(dir, name)).tail.map(l => LogFormat.taggedBatch(l).get)

  private def desc(from: Long, to: Long): Seq[Long] = (from to to by -1L)

  /** (keepUpTo, files present, rebuild, rebuildFrom, delete). */
  private val cases: Seq[(Long, Seq[Long], Seq[Long], Option[Long], Seq[Long])] = Seq(
    // every file of batches 0..10 present
    (1L, 0L to 10L, Nil, None, desc(10, 2)), // before the first compact
    (2L, 0L to 10L, Nil, None, desc(10, 3)), // exactly at the first compact
    (5L, 0L to 10L, Nil, None, desc(10, 6)), // exactly at a compact
    (6L, 0L to 10L, Nil, None, desc(10, 7)), // just after a compact
    (7L, 0L to 10L, Nil, None, desc(10, 8)), // in the middle of an interval
    (10L, 0L to 10L, Nil, None, Nil), // the latest batch: nothing to do
    (-1L, 0L to 10L, Nil, None, desc(10, 0)), // everything
    // cleanup deleted the files below 5.compact
    (6L, 5L to 10L, Nil, None, desc(10, 7)),
    (5L, 5L to 10L, Nil, None, desc(10, 6)),
    (4L, 5L to 10L, Seq(2L, 3L, 4L), Some(5L), desc(10, 5)),
    (3L, 5L to 10L, Seq(2L, 3L), Some(5L), desc(10, 5)),
    (2L, 5L to 10L, Seq(2L), Some(5L), desc(10, 5)),
    (1L, 5L to 10L, Seq(0L, 1L), Some(5L), desc(10, 5)),
    (0L, 5L to 10L, Seq(0L), Some(5L), desc(10, 5)),
    (-1L, 5L to 10L, Nil, None, desc(10, 5)),
    // cleanup deleted the files below 8.compact: the oldest compact file above is the source
    (4L, 8L to 10L, Seq(2L, 3L, 4L), Some(8L), desc(10, 8)),
    (6L, 8L to 10L, Seq(5L, 6L), Some(8L), desc(10, 8)),
    (8L, 8L to 10L, Nil, None, Seq(10L, 9L)),
    // up to 11.compact, files below 5.compact gone: the oldest compact above keepUpTo, 5
    (3L, 5L to 12L, Seq(2L, 3L), Some(5L), desc(12, 5))
  )

  cases.foreach { case (keepUpTo, present, rebuild, from, delete) =>
    test(s"cut back to $keepUpTo a log of ${present.map(nameOf).mkString(", ")}") {
      withTempDir { dir =>
        writeLog(dir, present)
        val t = plan(dir, keepUpTo)
        assert(t === LogTruncation(new Path(dir.toURI), keepUpTo, Interval, rebuild, from, delete))
        assert(t.isNoop === (rebuild.isEmpty && delete.isEmpty))
        cut(dir, t)

        // Exactly the files of batches <= keepUpTo are left (those rebuilt added), and the
        // indexes of the compact files left: none beside a deleted or rebuilt compact file.
        val kept = (present.filter(_ <= keepUpTo) ++ rebuild).sorted
        val keptIndexes =
          present.filter(id => id <= keepUpTo && isCompact(id)).map(id => s"${nameOf(id)}.index")
        assert(files(dir) === (kept.map(nameOf) ++ keptIndexes).toSet)
        // Rebuilt files hold exactly their batches' lines, in the order of the source file.
        rebuild.foreach { id =>
          assert(readLines(new File(dir, nameOf(id))) ===
            LogFormat.Header +: (if (isCompact(id)) (0L to id).flatMap(lines) else lines(id)))
        }
        // What a reader of the latest batch reads: every entry of batches 0..keepUpTo, once.
        if (keepUpTo >= 0) {
          val live = kept.filter(_ >= kept.filter(isCompact).lastOption.getOrElse(0L))
          assert(live.flatMap(id => batchesIn(dir, nameOf(id))) ===
            (0L to keepUpTo).flatMap(b => Seq(b, b)))
        }
        assert(plan(dir, keepUpTo).isNoop, "a second run has nothing left to do")
      }
    }
  }

  test("fileName names compact files with their suffix") {
    val t = LogTruncation(new Path("/x"), 4L, Interval, Nil, None, Nil)
    assert(Seq(0L, 1L, 2L, 5L, 6L).map(t.fileName) === Seq("0", "1", "2.compact", "5.compact", "6"))
  }

  test("re-planning after a crash between rebuilding and deleting finishes the cut") {
    withTempDir { dir =>
      writeLog(dir, 5L to 10L)
      val t = plan(dir, 4L)
      cut(dir, t.copy(delete = t.delete.take(2))) // rebuilt 2.compact, 3, 4; deleted 10 and 9
      val again = plan(dir, 4L)
      assert(again.rebuild === Nil && again.rebuildFrom === None)
      assert(again.delete === desc(8, 5))
      cut(dir, again)
      assert(files(dir) === Set("2.compact", "3", "4"))
    }
  }

  test("a line of unknown batch in the source compact file fails the rebuild, changing nothing") {
    withTempDir { dir =>
      writeLog(dir, 5L to 7L)
      val untagged = LogFormat.encode(plainEntry(1, 0).copy(batchId = None))
      writeLogFile(dir, "5.compact", lines(0) ++ Seq(untagged) ++ (2L to 5L).flatMap(lines))
      val before = files(dir)
      val e = intercept[BatchLogException](cut(dir, plan(dir, 3L)))
      assert(e.code === BatchLogException.CorruptLog)
      assert(e.getMessage.contains("5.compact, line 4,"), e.getMessage)
      assert(e.getMessage.contains("its batch is unknown, so it cannot be split by batch"))
      assert(files(dir) === before)
    }
  }

  test("a needed file missing with no later compact file is refused, naming the file") {
    withTempDir { dir =>
      writeLog(dir, 6L to 7L) // 5.compact lost by hand: nothing above 6 holds its entries
      val e = intercept[BatchLogException](plan(dir, 6L))
      assert(e.code === BatchLogException.MissingLogFile)
      assert(
        e.getMessage.contains(
          s"${new Path(new Path(dir.toURI), "5.compact")} is missing: it is needed " +
            "to cut the log back to batch 6 and no later compact file holds its entries"
        ),
        e.getMessage
      )
    }
  }

  test("keepUpTo beyond the latest batch is refused as a missing file (no product path asks it)") {
    withTempDir { dir =>
      writeLog(dir, 0L to 10L)
      // 11 is the next compaction batch; 12 needs 11.compact: neither exists, nothing is cut.
      Seq(11L, 12L).foreach { k =>
        val e = intercept[BatchLogException](plan(dir, k))
        assert(e.code === BatchLogException.MissingLogFile, k)
      }
      assert(files(dir).size === 11 + 3)
    }
  }

  test("a file-source log (entries with their log offset as batchId) is cut the same way") {
    withTempDir { dir =>
      def entry(b: Long) = s"""{"path":"file:///in/f$b.json","timestamp":1,"batchId":$b}"""
      writeLogFile(dir, "5.compact", (0L to 5L).map(entry))
      (6L to 7L).foreach(b => writeLogFile(dir, b.toString, Seq(entry(b))))
      val t = plan(dir, 3L)
      assert((t.rebuild, t.rebuildFrom, t.delete) === ((Seq(2L, 3L), Some(5L), desc(7, 5))))
      LogTruncation.apply(localFm(dir), t)(JsonField.long(_, "batchId"))
      assert(files(dir) === Set("2.compact", "3"))
      assert(readLines(new File(dir, "2.compact")) === "v1" +: (0L to 2L).map(entry))
      assert(readLines(new File(dir, "3")) === Seq("v1", entry(3)))
    }
  }
}
