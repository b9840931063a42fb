package io.batchlog

import java.io.File
import java.nio.file.Files

import scala.collection.mutable

import org.apache.hadoop.fs.Path

import io.batchlog.log.{BatchTaggedFileStreamSinkLog, DirectLookup}

/**
 * The lookup of one batch without a listing ([[DirectLookup]]): it answers exactly what a full read
 * of the log answers, from the one log file that holds the batch, or it declines (None) and the
 * caller reads the log; it never answers from a file it cannot prove.
 */
class DirectLookupSuite extends CompactIndexTestBase {

  private def lookup(log: BatchTaggedFileStreamSinkLog, b: Long, interval: Int = 3) =
    DirectLookup.paths(log.fileSystem, log.metadataPath, interval, b).map(_.toSet)

  /** What a full read of the log says batch `b` wrote. */
  private def fullRead(log: BatchTaggedFileStreamSinkLog, b: Long): Set[String] = {
    val out = mutable.Set.empty[String]
    log.foreachLivePathWhere(_.contains(b))(out += _)
    out.toSet
  }

  private def expected(b: Long): Set[String] = entries(b, perBatch(b)).map(_.path).toSet

  private def delete(root: File, names: String*): Unit =
    names.foreach(n => Files.delete(metaFile(root, n).toPath))

  test("answers every batch from its compact file or its batch file, as a full read does") {
    withIndexedLog(batches = 11) { (root, log, _) =>
      (0L to 10L).foreach { b =>
        assert(lookup(log, b) == Some(expected(b)), s"batch $b")
        assert(fullRead(log, b) == expected(b), s"batch $b")
      }
      // the batch files below the last compaction gone, as Spark's cleanup deletes them
      delete(root, "0", "1", "3", "4", "6", "7")
      (0L to 10L).foreach(b => assert(lookup(log, b) == Some(expected(b)), s"batch $b"))
      assert(lookup(log, 11) == None) // not logged: no compact file 11, no batch file 11
    }
  }

  test("declines a batch whose compact file is gone or has no proved index; refuses bit rot") {
    withIndexedLog(batches = 11) { (root, log, index) =>
      delete(root, "0", "1", "2.compact.index")
      assert(lookup(log, 0) == None) // 2.compact without an index: the long way
      assert(lookup(log, 1) == None)
      delete(root, "2.compact")
      assert(lookup(log, 0) == None) // nothing holds it here: the long way, from 8.compact
      assert(fullRead(log, 0) == expected(0))

      overwrite(root, "5.compact.index", Files.readAllBytes(indexFile(root, 8).toPath))
      assert(lookup(log, 4) == None) // the index of another compact file
      // A run whose bytes do not match its CRC while the compact file keeps the name, length and
      // mtime its index records: damage (a compact file is written once), refused, not declined.
      val runOf6 = index.runs.find(_.batchId.contains(6L)).get
      val f = metaFile(root, "8.compact")
      val bytes = Files.readAllBytes(f.toPath)
      val at = (runOf6.offset + 20).toInt // a letter of its first path: still a valid line
      val mtime = f.lastModified()
      assert(bytes(at).toChar.isLetter)
      bytes(at) = (if (bytes(at) == 'x') 'y' else 'x').toByte
      overwrite(root, "8.compact", bytes)
      assert(f.setLastModified(mtime))
      val refused = intercept[BatchLogException](lookup(log, 6))
      assert(refused.code == BatchLogException.CorruptLog)
      val run = s"batch 6 (bytes ${runOf6.offset}..${runOf6.offset + runOf6.length})"
      assert(refused.getMessage.contains(s"8.compact is damaged: the bytes of $run do not match"))
      assert(lookup(log, 7) == Some(expected(7))) // another run of the same file is sound
      assert(lookup(log, 9) == Some(expected(9))) // its batch file, after the last compaction
    }
  }

  test("a compact file with lines plain Spark wrote is declined (their batch needs a proof)") {
    withSQLConf(BatchLogConf.CompactIntervalKey -> "3") {
      withTempDir { root =>
        val meta = new File(root, "_spark_metadata")
        val van = vanilla(meta)
        (0 until 4).foreach(b => assert(van.add(b, entries(b, 2).map(_.toSinkFileStatus))))
        val log = ours(meta)
        assert(lookup(log, 0) == None) // 2.compact: untagged lines, no index
        assert(lookup(log, 3) == None) // batch file 3: untagged lines
      }
    }
  }

  test("after a compaction dropped batches for retention, older compact files are not used") {
    withSQLConf(
      BatchLogConf.CompactIntervalKey -> "3",
      BatchLogConf.RetentionBatchesKey -> "4"
    ) {
      withTempDir { root =>
        val log = buildSink(root, 9, perBatch) // 8.compact keeps batches 5..8
        assert(!indexFile(root, 2).exists() && !indexFile(root, 5).exists())
        assert(indexFile(root, 8).exists())
        (0L to 4L).foreach { b =>
          assert(fullRead(log, b).isEmpty, s"batch $b")
          assert(lookup(log, b) == None, s"batch $b") // 2.compact, 5.compact: no index
        }
        assert(lookup(log, 5) == None) // 5.compact itself lost its index
        (6L to 8L).foreach(b => assert(lookup(log, b) == Some(expected(b)), s"batch $b"))
        val api = BatchLog.forPath(spark, root.toString)
        (0L to 8L).foreach(b => assert(api.files(b).toSet == fullRead(log, b), s"batch $b"))
      }
    }
  }

  test("a reader whose compact interval differs from the sink's still answers exactly") {
    withIndexedLog(batches = 11) { (root, log, _) =>
      // interval 10: compaction 9 is no compact file here; the batch files answer (but for 9,
      // which that interval makes a compaction: declined)
      assert(lookup(log, 9, interval = 10) == None)
      (0L to 10L).filterNot(b => (b + 1) % 3 == 0 || b == 9).foreach { b =>
        assert(lookup(log, b, interval = 10) == Some(expected(b)), s"batch $b")
      }
      delete(root, "0")
      assert(lookup(log, 0, interval = 10) == None)
      assert(BatchLog.forPath(spark, root.toString).files(0).toSet == expected(0))
    }
  }

  test("the paths are returned as logged: URIs") {
    withIndexedLog(batches = 4, compact = 2) { (_, log, _) =>
      val p = lookup(log, 1).get.head
      assert(new Path(p).toUri.getScheme == "file")
    }
  }
}
