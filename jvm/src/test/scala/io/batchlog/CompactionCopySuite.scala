package io.batchlog

import java.io.File
import java.nio.charset.StandardCharsets.UTF_8
import java.nio.file.Files

import scala.jdk.CollectionConverters._

import io.batchlog.log.{CompactCopy, LogFormat}

/**
 * Compaction copies the previous compact file's runs beside the lines that follow them (a second
 * thread, the lines held in memory meanwhile, up to a bound), or in order through streams on any
 * other file system. Every way through must write the same bytes, and a compaction that fails while
 * the copy runs must publish nothing and leave no thread behind.
 */
class CompactionCopySuite extends CompactIndexTestBase {

  /** 40 to 42 entries a batch: a tail of a few kilobytes after the copied runs. */
  private val wide: Long => Int = b => (40 + b % 3).toInt

  /** Spark's other manager: not the local publish, so the copy goes through streams, in order. */
  private val streamManager =
    classOf[io.batchlog.shim.CheckpointFileManager].getPackage.getName +
      ".FileSystemBasedCheckpointFileManager"

  private def withHeldBytes[A](n: Int)(f: => A): A = {
    val before = CompactCopy.heldBytes
    CompactCopy.heldBytes = n
    try f
    finally CompactCopy.heldBytes = before
  }

  private def copyThreads(): Seq[String] = Thread.getAllStackTraces.keySet.asScala.toSeq
    .map(_.getName).filter(_.startsWith("batchlog compaction copy"))

  /** Batches 0..10 (compacts 2, 5, 8) in `root`, then compaction 11: its file and index runs. */
  private def compactOnce(root: File): (Array[Byte], Seq[(Option[Long], Long, Long, Long)]) = {
    val log = buildSink(root, 11, wide)
    managers += log.checkpointFileManager.getClass.getName
    assert(log.add(11, entries(11, wide(11))))
    val expected = (0L to 11L).flatMap(b => entries(b, wide(b)))
    assert(compactLines(root, 11).tail.map(LogFormat.decode) == expected)
    val runs = proved(log, 11).runs.map(r => (r.batchId, r.offset, r.length, r.crc))
    assert(runs.map(_._1) == (0L to 11L).map(Some(_)))
    (Files.readAllBytes(metaFile(root, "11.compact").toPath), runs)
  }

  private val managers = scala.collection.mutable.Buffer.empty[String]

  test("the copy beside the tail, the copy in order, and every bound on what is held agree") {
    withSQLConf(BatchLogConf.CompactIntervalKey -> "3") {
      val beside = withTempDir(compactOnce)
      val ways = Seq(
        "nothing held: every write waits for the copy" -> (() =>
          withHeldBytes(0)(withTempDir(compactOnce))
        ),
        "the bound reached mid-tail" -> (() => withHeldBytes(700)(withTempDir(compactOnce))),
        "in order, through streams" -> (() =>
          withSQLConf("spark.sql.streaming.checkpointFileManagerClass" -> streamManager) {
            withTempDir(compactOnce)
          }
        )
      )
      ways.foreach { case (way, run) =>
        val (bytes, runs) = run()
        assert(runs == beside._2, way)
        assert(java.util.Arrays.equals(bytes, beside._1), way)
      }
      assert(copyThreads().isEmpty)
      assert(managers.last == streamManager)
    }
  }

  test("a compaction that fails while the runs are copied publishes nothing and leaves no thread") {
    Seq(16 << 20, 0).foreach { held =>
      withHeldBytes(held) {
        withSQLConf(BatchLogConf.CompactIntervalKey -> "3") {
          withTempDir { root =>
            val log = buildSink(root, 11, wide)
            val batchFile = metaFile(root, "10")
            val good = Files.readAllBytes(batchFile.toPath)
            val lines = new String(good, UTF_8).split("\n", -1)
            overwrite(root, "10", lines.updated(3, "{\"path\":").mkString("\n").getBytes(UTF_8))
            val before = metaFile(root, "").list().toSet
            val e = intercept[BatchLogException](log.add(11, entries(11, wide(11))))
            assert(e.getMessage.contains(s"${batchFile.getName}, line 4, is not a valid log entry"))
            assert(copyThreads().isEmpty)
            assert(metaFile(root, "").list().toSet == before, "a temp or compact file was left")
            overwrite(root, "10", good)
            assert(log.add(11, entries(11, wide(11))))
            val expected = (0L to 11L).flatMap(b => entries(b, wide(b)))
            assert(compactLines(root, 11).tail.map(LogFormat.decode) == expected)
            assert(log.indexProblem(11).isEmpty)
          }
        }
      }
    }
  }
}
