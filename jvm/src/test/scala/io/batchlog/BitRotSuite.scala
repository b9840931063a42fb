package io.batchlog

import java.io.File
import java.nio.charset.StandardCharsets.UTF_8
import java.nio.file.Files

import org.apache.hadoop.fs.Path

import io.batchlog.log.{BatchTaggedFileStreamSinkLog, CompactIndex, LogFormat, SinkLogEntry}
import io.batchlog.ops.{DamagedRun, RestoredRun}
import io.batchlog.shim.SinkFileStatus

/**
 * Bit rot in a compact file is damage, never laundered: one character of an entry of `8.compact`
 * changed (a uuid digit of its path, a digit of its size or of its modification time), the file's
 * length and modification time kept, its JSON still valid. `verify` names it; compaction, reads by
 * batch and lookups refuse it with `CORRUPT_LOG` naming the file, the batch and the bytes; `repair`
 * restores exactly the damaged batch's entries (from its batch file, or from the data files when
 * the batch file is gone), after which the log continues through a compaction.
 */
class BitRotSuite extends CompactIndexTestBase {

  private val Damaged = 7L // its run is inside 8.compact (compacts 2, 5, 8 at interval 3)

  /**
   * An interval-3 sink of batches 0..10 whose entries name real data files under `root` (so that
   * `repair` can rebuild entries from them), its entries by batch, written through our log.
   */
  private def withSink(f: (
      File,
      BatchTaggedFileStreamSinkLog,
      Map[Long, Seq[SinkLogEntry]]
  ) => Unit): Unit = withSQLConf(BatchLogConf.CompactIntervalKey -> "3") {
    withTempDir { root =>
      val fs = new Path(root.toURI).getFileSystem(spark.sessionState.newHadoopConf())
      val written = (0L to 10L).map { b =>
        b -> (0 until perBatch(b)).map { i =>
          val dir = new File(root, s"p=$i")
          dir.mkdirs()
          val name = f"part-0000$i-batch-$b-00000000-0000-0000-0000-${b * 100 + i}%012d.parquet"
          val file = new File(dir, name)
          Files.write(file.toPath, Array.fill(100 + i)('x'.toByte))
          SinkLogEntry(SinkFileStatus(fs.getFileStatus(new Path(file.toURI))), b)
        }
      }.toMap
      val log = new BatchTaggedFileStreamSinkLog(spark, new File(root, "_spark_metadata").toString)
      (0L to 10L).foreach(b => assert(log.add(b, written(b).toArray)))
      f(root, log, written)
    }
  }

  /**
   * Changes one character of the first line of `batch` in `compact`; its length and mtime kept.
   */
  private def rot(root: File, field: String, compact: Long = 8, batch: Long = Damaged): Unit = {
    val f = metaFile(root, s"$compact.compact")
    val mtime = f.lastModified()
    val bytes = Files.readAllBytes(f.toPath)
    val text = new String(bytes, UTF_8)
    val lineAt = text.indexOf(s""","batchId":$batch}""") // the end of its first line
    val lineStart = text.lastIndexOf('\n', lineAt) + 1
    val line = text.substring(lineStart, lineAt)
    val at = lineStart + (field match {
      case "path" => line.indexOf(".parquet") - 1 // the uuid's last digit
      case key => line.indexOf(s""""$key":""") + key.length + 3 // the value's first digit
    })
    val c = bytes(at).toChar
    assert(c.isDigit, s"$field at $at is '$c'")
    bytes(at) = (if (c == '9') '1' else c + 1).toByte
    overwrite(root, s"$compact.compact", bytes)
    assert(f.setLastModified(mtime))
    assert(f.length() == bytes.length && f.lastModified() == mtime)
    assert(LogFormat.decode(new String(bytes, lineStart, lineAt - lineStart, UTF_8) + "}") != null)
  }

  private def intercepted(body: => Any): BatchLogException = {
    val e = intercept[BatchLogException](body)
    assert(e.code == BatchLogException.CorruptLog, e.getMessage)
    e
  }

  private def metaNames(root: File): Set[String] =
    Option(new File(root, "_spark_metadata").list()).toSet.flatten

  Seq("path", "size", "modificationTime").foreach { field =>
    Seq(true, false).foreach { batchFileKept =>
      val from = if (batchFileKept) "its batch file" else "the data files (batch file gone)"
      test(s"one $field digit rotted in a compact file: refused everywhere, repaired from $from") {
        withSink { (root, log, written) =>
          val original = Files.readAllBytes(metaFile(root, "8.compact").toPath)
          val run = proved(log, 8).runs.find(_.batchId.contains(Damaged)).get
          val file = log.logFilePath(8)
          rot(root, field)
          if (!batchFileKept) assert(metaFile(root, Damaged.toString).delete())
          val expected = BatchLogException.damagedCompactFile(
            file.toString,
            CompactIndex.pathOf(file).toString,
            file.getParent.getParent.toString,
            Seq(s"batch $Damaged (bytes ${run.offset}..${run.offset + run.length})")
          ).getMessage
          assert(expected.contains(s"`python -m batchlog repair ${file.getParent.getParent}`"))

          // verify: unhealthy, naming the file, the batch and its bytes.
          val api = BatchLog.forPath(spark, root.toString)
          val report = api.verify()
          assert(!report.healthy)
          assert(report.logErrors == Seq(expected))
          assert(report.damagedRuns == Seq(
            DamagedRun(file.toString, 8, Some(Damaged), run.offset, run.length, run.count)
          ))
          assert(report.indexProblems.isEmpty && report.missingCount == 0)
          assert(report.sizeMismatchCount == 0 && report.wrongBatchCount == 0)

          // Reads and lookups of the damaged batch refuse; the others are answered.
          val refusal = intercepted(api.files(Damaged))
          assert(refusal.getMessage == expected + " " + BatchLogException.NothingChanged)
          intercepted(api.batchOf(written(Damaged).head.path))
          intercepted(log.foreachLiveEntryWhere(_.contains(Damaged))(_ => ()))
          assert(api.files(6).toSeq.sorted == written(6).map(_.path).sorted)

          // The next compaction refuses: nothing published, nothing left behind.
          val before = metaNames(root)
          assert(intercepted(log.add(11, Array.empty)).getMessage == expected)
          assert(metaNames(root) == before)
          assert(
            new BatchTaggedFileStreamSinkLog(spark, log.metadataPath.toString)
              .getLatestBatchId().contains(10L)
          )

          // repair: a dry run says what and from where and changes nothing; then it restores.
          val source =
            if (batchFileKept) s"batch file ${log.logFilePath(Damaged)}"
            else s"the data files named with batch $Damaged (size and modification time from " +
              "the file system)"
          val restored = Seq(RestoredRun(file.toString, Damaged, run.count, source))
          val dry = api.repair().dryRun(true).execute()
          assert(dry.runsOnly && dry.needed && !dry.written)
          assert(dry.runsRestored == restored)
          assert(metaNames(root) == before)
          val done = BatchLog.forPath(spark, root.toString).repair().execute()
          assert(done.runsRestored == restored && !done.written && done.movedAside.isEmpty)
          // Exactly the entries as they were logged: the compact file's bytes as written.
          assert(Files.readAllBytes(metaFile(root, "8.compact").toPath).sameElements(original))
          val evidence = root.listFiles().filter(_.getName.startsWith("_spark_metadata.damaged-"))
          assert(evidence.length == 1)
          assert(evidence.head.list().toSet.filterNot(_.endsWith(".crc")) ==
            Set("8.compact", "8.compact.index"))
          val after = BatchLog.forPath(spark, root.toString)
          val healthy = after.verify()
          assert(healthy.healthy && healthy.damagedRuns.isEmpty, healthy)
          assert(after.files(Damaged).toSeq.sorted == written(Damaged).map(_.path).sorted)
          assert(after.batchOf(written(Damaged).head.path) == Damaged)

          // The log continues through the next compaction, every entry exactly once.
          val cont = new BatchTaggedFileStreamSinkLog(spark, log.metadataPath.toString)
          assert(cont.add(11, Array.empty))
          val all = (0L to 10L).flatMap(written).toSet
          assert(compactLines(root, 11).drop(1).map(LogFormat.decode).toSet == all)
          assert(compactLines(root, 11).length - 1 == all.size)
          assert(cont.indexProblem(11).isEmpty)
        }
      }
    }
  }

  test(
    "an older compact file's bit rot (read by lookups through its index) is found and repaired"
  ) {
    withSink { (root, log, written) =>
      val original = Files.readAllBytes(metaFile(root, "5.compact").toPath)
      val run = proved(log, 5).runs.find(_.batchId.contains(3L)).get
      rot(root, "size", compact = 5, batch = 3)
      val api = BatchLog.forPath(spark, root.toString)
      // files(3) is looked up in 5.compact, the first compaction at or after it: refused.
      val bytes = s"bytes ${run.offset}..${run.offset + run.length}"
      assert(intercepted(api.files(3)).getMessage.contains(
        s"5.compact is damaged: the bytes of batch 3 ($bytes)"
      ))
      // verify sees it though 8.compact is the live one; so no refusal is a dead end.
      val report = api.verify()
      assert(!report.healthy && report.damagedRuns.map(d => (d.compactId, d.batchId)) ==
        Seq((5L, Some(3L))))
      val done = api.repair().execute()
      assert(done.runsRestored.map(_.batchId) == Seq(3L) && !done.written)
      assert(Files.readAllBytes(metaFile(root, "5.compact").toPath).sameElements(original))
      assert(api.verify().healthy)
      assert(api.files(3).toSeq.sorted == written(3).map(_.path).sorted)
    }
  }

  test("a damaged run neither its batch file nor the data files give: the whole log is rebuilt") {
    withSink { (root, log, written) =>
      rot(root, "size")
      assert(metaFile(root, Damaged.toString).delete())
      val lost = new File(new java.net.URI(written(Damaged).last.path))
      assert(lost.delete()) // 1 data file of batch 7 left for its 2 entries
      val plan = BatchLog.forPath(spark, root.toString).repair().dryRun(true).execute()
      assert(plan.needed && !plan.runsOnly && plan.runsRestored.isEmpty)
      assert(plan.logProblems.contains(
        s"${log.logFilePath(8)}: the 2 entries of damaged batch $Damaged are neither in its batch " +
          s"file nor the data files named with batch $Damaged (1 found): the whole log is rebuilt"
      ))
    }
  }
}
