package io.batchlog

import java.io.File
import java.nio.charset.StandardCharsets.UTF_8
import java.nio.file.Files

import io.batchlog.log.{BatchTaggedFileStreamSinkLog, CompactIndex, LogFormat}

/** Damaged and stale indexes: proved before use, never trusted, and reads stay exact. */
class CompactIndexDamageSuite extends CompactIndexTestBase {

  /**
   * Each damage to `8.compact.index` of an interval-3 log of batches 0..10 (compacts 2, 5, 8):
   * applies it and returns the reason `prove` must give (None: `prove` cannot see it, only the
   * runs' CRCs can, and this is the reason `checkRuns` gives).
   */
  private val damages: Seq[(String, (BatchTaggedFileStreamSinkLog, File) => String)] = Seq(
    "random bytes" -> { (_, root) =>
      val r = new scala.util.Random(42)
      overwrite(root, "8.compact.index", Array.fill(300)(r.nextInt(256).toByte))
      "its first line is not 'batchlog-index v3 <length>' or 'batchlog-index v2'"
    },
    "truncated mid-line" -> { (_, root) =>
      val bytes = Files.readAllBytes(indexFile(root, 8).toPath)
      overwrite(root, "8.compact.index", bytes.take(lineEnds(bytes)(4) + 4))
      "it is truncated"
    },
    "truncated at a line boundary" -> { (_, root) =>
      val bytes = Files.readAllBytes(indexFile(root, 8).toPath)
      overwrite(root, "8.compact.index", bytes.take(lineEnds(bytes)(6) + 1))
      "it is truncated"
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
  private def assertReadsAndCompactionExact(root: File): Unit = {
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
      withIndexedLog() { (root, log, _) =>
        val reason = damage(log, root)
        assert(prove(log, 8) == Left(reason))
        assert(log.indexProblem(8).contains(reason))
        assert(log.indexOf(8) == log.scanIndex(8, statusOf(log, 8)))
        assertReadsAndCompactionExact(root)
      }
    }
  }

  test("a compact file rewritten in place (same length and mtime) is damage, not a stale index") {
    withIndexedLog() { (root, log, good) =>
      rewriteCompactSameLength(root)
      // Name, length, mtime and tiling all still hold: only the bytes of the runs differ. A
      // compact file is written once, so that is damage: never rescanned, never copied.
      assert(prove(log, 8) == Right(good))
      val in = new java.io.FileInputStream(metaFile(root, "8.compact"))
      val damaged =
        try CompactIndex.damagedRuns(good, in)
        finally in.close()
      assert(damaged.nonEmpty && damaged.forall(good.runs.contains))
      val file = log.logFilePath(8)
      val expected = BatchLogException.damagedCompactFile(
        file.toString,
        CompactIndex.pathOf(file).toString,
        file.getParent.getParent.toString,
        damaged.map(CompactIndex.describe)
      ).getMessage
      assert(log.indexProblem(8).contains(expected))
      val refused = intercept[BatchLogException](log.add(11, entries(11, perBatch(11))))
      assert(refused.code == BatchLogException.CorruptLog && refused.getMessage == expected)
      assert(!metaFile(root, "11.compact").exists() && !indexFile(root, 11).exists())
      val read = intercept[BatchLogException](log.foreachLiveEntryWhere(_ => true)(_ => ()))
      assert(read.getMessage == expected)
    }
  }

  test("a legacy v1 index is ignored (rebuilt in memory), not a problem; compaction writes v3") {
    withIndexedLog() { (root, log, good) =>
      val v1 = (Seq(
        "batchlog-index v1",
        s"compact ${good.compactLength} ${good.compactModTime} dropped -1 -1"
      ) ++ good.runs.take(2).map(r => s"${r.batchId.get} ${r.offset} ${r.length} ${r.count}"))
        .mkString("", "\n", "\n")
      overwrite(root, "8.compact.index", v1.getBytes(UTF_8))
      assert(prove(log, 8) == Left(CompactIndex.LegacyReason))
      assert(log.indexProblem(8).contains(CompactIndex.LegacyReason))
      assert(log.indexOf(8) == good)
      assertReadsAndCompactionExact(root)
      assert(new String(Files.readAllBytes(indexFile(root, 11).toPath), UTF_8)
        .startsWith(CompactIndex.Header + " "))
    }
  }
  test("an index of a newer version is not used (read by a scan), not a problem; nor rewritten") {
    withIndexedLog() { (root, log, good) =>
      // what a newer batchlog may write: a header this version does not know, then anything
      val v4 = ("batchlog-index v4 x\n" +
        new String(good.toBytes, UTF_8).linesIterator.drop(1).mkString("\n") + "\nfast 1 2 3\n")
        .getBytes(UTF_8)
      overwrite(root, "8.compact.index", v4)
      val reason = CompactIndex.newerReason(4)
      assert(
        reason ==
          "it is an index of a newer batchlog (batchlog-index v4; this batchlog reads v2 and v3)"
      )
      assert(prove(log, 8) == Left(reason))
      assert(CompactIndex.isExpectedReason(reason) && !CompactIndex.isExpectedReason("its x"))
      assert(log.indexProblem(8).contains(reason))
      assert(log.indexOf(8) == good)
      assertReadsAndCompactionExact(root)
      // the newer index is left as it was; the next compact file gets this version's index
      assert(Files.readAllBytes(indexFile(root, 8).toPath).sameElements(v4))
      assert(new String(Files.readAllBytes(indexFile(root, 11).toPath), UTF_8)
        .startsWith(CompactIndex.Header + " "))
      // a version this batchlog does know, written wrong, is damage as before
      overwrite(root, "8.compact.index", "batchlog-index v0\n".getBytes(UTF_8))
      assert(
        prove(log, 8) ==
          Left("its first line is not 'batchlog-index v3 <length>' or 'batchlog-index v2'")
      )
    }
  }
}
