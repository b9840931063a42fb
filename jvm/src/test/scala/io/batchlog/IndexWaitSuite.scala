package io.batchlog

import java.io.File
import java.nio.file.Files

import io.batchlog.log.BatchTaggedFileStreamSinkLog

/**
 * A reader that meets a compact file its writer has just published, before the index that follows
 * it, waits for the index instead of rebuilding it by a scan of the whole compact file; and waits
 * for nothing where no index is coming (an old compact file, a log plain Spark compacted).
 */
class IndexWaitSuite extends CompactIndexTestBase {

  private def waits(log: BatchTaggedFileStreamSinkLog): Long = log.indexWaits

  /** As a writer that took `ms` to write 5.compact's index after 5.compact. */
  private def previousIndexTook(root: File, ms: Long): Unit =
    assert(indexFile(root, 5).setLastModified(metaFile(root, "5.compact").lastModified() + ms))

  test("the index that follows a fresh compact file is waited for and used, not rebuilt") {
    withIndexedLog(batches = 9, compact = 8) { (root, log, _) =>
      previousIndexTook(root, 1000) // a reader waits up to 2 x 1 s + 0.2 s
      val bytes = Files.readAllBytes(indexFile(root, 8).toPath)
      Files.delete(indexFile(root, 8).toPath)
      val api = BatchLog.forPath(spark, root.toString)
      val before = waits(api.log)
      // The compaction's writer, writing the index once the reader is waiting for it (a writer
      // that slept a fixed time instead could finish before a reader on a busy machine looked).
      // It publishes the file whole, as every store batchlog writes to does (a rename, a PUT): a
      // reader polling a file written in place could read it half-written, and rebuild.
      val writer = new Thread(() => {
        val deadline = System.nanoTime() + 30000L * 1000000L
        while (waits(api.log) == before && System.nanoTime() < deadline) Thread.sleep(2)
        val target = indexFile(root, 8).toPath
        val tmp = root.toPath.resolve("index.tmp") // beside the log, not in it
        Files.write(tmp, bytes)
        Files.move(tmp, target, java.nio.file.StandardCopyOption.ATOMIC_MOVE)
      })
      writer.start()
      try assert(api.files(7).toSeq === entries(7, perBatch(7)).map(_.path).toSeq)
      finally writer.join()
      assert(waits(api.log) === before + 1)
      // read from the index on disk (its head), not rebuilt by a scan
      assert(api.log.cachedHeadIds === Seq(8L) && api.log.cachedIndexIds.isEmpty)
    }
  }

  test("an index that does not come is waited for once per compact file, then rebuilt") {
    withIndexedLog(batches = 9, compact = 8) { (root, log, good) =>
      previousIndexTook(root, 0) // a reader waits 0.2 s
      Files.delete(indexFile(root, 8).toPath)
      val api = BatchLog.forPath(spark, root.toString)
      val before = waits(api.log)
      assert(api.files(7).toSeq === entries(7, perBatch(7)).map(_.path).toSeq)
      assert(api.files(6).toSeq === entries(6, perBatch(6)).map(_.path).toSeq)
      assert(waits(api.log) === before + 1)
      assert(api.log.indexOf(8) === good) // rebuilt in memory, the same runs
      assert(!indexFile(root, 8).exists()) // readers never write
    }
  }

  test("no wait for a compact file written long ago, nor where the previous one has no index") {
    withIndexedLog(batches = 9, compact = 8) { (root, _, _) =>
      Files.delete(indexFile(root, 8).toPath)
      val old = metaFile(root, "8.compact")
      assert(old.setLastModified(old.lastModified() - 60 * 60 * 1000L))
      val api = BatchLog.forPath(spark, root.toString)
      val before = waits(api.log)
      assert(api.files(7).toSeq === entries(7, perBatch(7)).map(_.path).toSeq)
      assert(waits(api.log) === before)
    }
    withIndexedLog(batches = 9, compact = 8) { (root, _, _) =>
      // as plain Spark leaves a log: no index beside any compact file
      Files.delete(indexFile(root, 8).toPath)
      Files.delete(indexFile(root, 5).toPath)
      val api = BatchLog.forPath(spark, root.toString)
      val before = waits(api.log)
      assert(api.files(7).toSeq === entries(7, perBatch(7)).map(_.path).toSeq)
      assert(waits(api.log) === before)
    }
  }

  test("a store clock minutes ahead: the wait stays bounded and once per compact file") {
    // The store stamps 8.compact and both of 5's files 5 minutes ahead of this clock: 8.compact
    // looks fresh (written "in the future"); the wait is still bounded by the previous index's
    // gap (both stamps by the store's clock) and the grace, once, then the index is rebuilt.
    withIndexedLog(batches = 9, compact = 8) { (root, _, good) =>
      val ahead = 5 * 60 * 1000L
      for (f <- Seq(metaFile(root, "5.compact"), metaFile(root, "8.compact"))) {
        assert(f.setLastModified(System.currentTimeMillis() + ahead))
      }
      previousIndexTook(root, 1000) // a reader waits up to 2 x 1 s + 0.2 s, never beyond 3 s
      Files.delete(indexFile(root, 8).toPath)
      val api = BatchLog.forPath(spark, root.toString)
      val before = waits(api.log)
      val t0 = System.nanoTime()
      assert(api.files(7).toSeq === entries(7, perBatch(7)).map(_.path).toSeq)
      assert(api.files(6).toSeq === entries(6, perBatch(6)).map(_.path).toSeq)
      val tookMs = (System.nanoTime() - t0) / 1000000L
      assert(waits(api.log) === before + 1)
      assert(tookMs >= 2000 && tookMs < 10000, s"$tookMs ms") // waited 2.2 s, once
      // rebuilt in memory: the same runs, for the compact file's new time
      assert(api.log.indexOf(8) === good.copy(compactModTime =
        metaFile(root, "8.compact").lastModified()
      ))
    }
  }
}
