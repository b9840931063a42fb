package io.batchlog

import java.io.File
import java.nio.charset.StandardCharsets.UTF_8
import java.util.concurrent.{Callable, CountDownLatch, Executors, TimeUnit}

import scala.util.Try

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.{FileAlreadyExistsException, Path}

import io.batchlog.shim.CheckpointFileManager
import io.batchlog.log.{BatchTaggedFileStreamSinkLog, LogFiles}

/**
 * The atomic write of batchlog's files on the local disk, which bypasses Spark's `FileContext`
 * manager to avoid forking processes: it must keep every guarantee of `createAtomic` — no replacing
 * an existing file unless asked, never a partial file, no temp file left — and leave files that
 * Hadoop's checksummed local file system reads.
 */
class LocalPublishSuite extends SparkSessionTestBase {
  import TestLogs._

  private def manager(dir: File): CheckpointFileManager =
    CheckpointFileManager.create(new Path(dir.toURI), new Configuration())

  private def publish(fm: CheckpointFileManager, f: Path, text: String, overwrite: Boolean): Unit =
    LogFiles.publish(fm, f, overwrite)(_.write(text.getBytes(UTF_8)))

  private def read(fm: CheckpointFileManager, f: Path): String = {
    val in = fm.open(f)
    try new String(Compat.readAllBytes(in), UTF_8)
    finally in.close()
  }

  /** Every name in `dir` but the published ones: temp files left behind. */
  private def leftovers(dir: File, published: String*): Seq[String] =
    dir.list().toSeq.filterNot(n => published.contains(n) || published.exists(p => n == s".$p.crc"))

  test("a new file is published whole, with nothing left beside it") {
    withTempDir { dir =>
      val fm = manager(dir)
      val f = new Path(dir.toURI.toString, "7")
      publish(fm, f, "v1\n{}", overwrite = false)
      assert(read(fm, f) === "v1\n{}")
      assert(leftovers(dir, "7").isEmpty, dir.list().toSeq)
    }
  }

  test("an existing file is not replaced, whoever wrote it, and no temp file is left") {
    withTempDir { dir =>
      val fm = manager(dir)
      val f = new Path(dir.toURI.toString, "7")
      // written by Spark's own manager (with a .crc), then by batchlog's publish
      val out = fm.createAtomic(f, overwriteIfPossible = false)
      out.write("first".getBytes(UTF_8)); out.close()
      intercept[FileAlreadyExistsException](publish(fm, f, "second", overwrite = false))
      assert(read(fm, f) === "first")
      val g = new Path(dir.toURI.toString, "8")
      publish(fm, g, "first", overwrite = false)
      intercept[FileAlreadyExistsException](publish(fm, g, "second", overwrite = false))
      assert(read(fm, g) === "first")
      assert(leftovers(dir, "7", "8").isEmpty, dir.list().toSeq)
    }
  }

  test("a replaced file is read back through Hadoop's checksums: no stale .crc is left") {
    withTempDir { dir =>
      val fm = manager(dir)
      val f = new Path(dir.toURI.toString, "5.compact.index")
      val out = fm.createAtomic(f, overwriteIfPossible = true)
      out.write(("old " * 1000).getBytes(UTF_8)); out.close()
      assert(new File(dir, ".5.compact.index.crc").exists())
      publish(fm, f, "new", overwrite = true)
      assert(read(fm, f) === "new") // an old .crc would fail this read with a ChecksumException
      assert(!new File(dir, ".5.compact.index.crc").exists())
      assert(leftovers(dir, "5.compact.index").isEmpty, dir.list().toSeq)
    }
  }

  test("a write that fails publishes nothing and leaves nothing") {
    withTempDir { dir =>
      val fm = manager(dir)
      val f = new Path(dir.toURI.toString, "3")
      val e = intercept[IllegalStateException] {
        LogFiles.publish(fm, f, overwrite = false) { out =>
          out.write("half".getBytes(UTF_8)); throw new IllegalStateException("boom")
        }
      }
      assert(e.getMessage === "boom")
      assert(dir.list().isEmpty, dir.list().toSeq)
    }
  }

  test("of writers racing for one new file exactly one wins, and its bytes are the file") {
    withTempDir { dir =>
      val fm = manager(dir)
      (1 to 20).foreach { round =>
        val f = new Path(dir.toURI.toString, round.toString)
        val start = new CountDownLatch(1)
        val pool = Executors.newFixedThreadPool(4)
        val results = (1 to 4).map { w =>
          pool.submit(new Callable[Try[Unit]] {
            def call(): Try[Unit] = {
              start.await(); Try(publish(fm, f, s"writer $w", overwrite = false))
            }
          })
        }
        start.countDown()
        val outcomes = results.map(_.get(60, TimeUnit.SECONDS))
        pool.shutdown()
        val winners = outcomes.zipWithIndex.collect { case (r, i) if r.isSuccess => i + 1 }
        assert(winners.length === 1, outcomes)
        assert(
          outcomes.filter(_.isFailure).forall(_.failed.get.isInstanceOf[FileAlreadyExistsException])
        )
        assert(read(fm, f) === s"writer ${winners.head}")
      }
      assert(leftovers(dir, (1 to 20).map(_.toString): _*).isEmpty, dir.list().toSeq)
    }
  }

  test(
    "the log publishes the local way whether its path is bare or qualified, and Spark reads it"
  ) {
    withSQLConf(BatchLogConf.CompactIntervalKey -> "3") {
      Seq(false, true).foreach { qualified =>
        withTempDir { root =>
          val dir = metaDir(root)
          val log = new BatchTaggedFileStreamSinkLog(
            spark,
            if (qualified) dir.toURI.toString else dir.toString
          )
          (0L to 3L).foreach(b => assert(log.add(b, entriesOf(b))))
          // Spark's manager leaves a .crc beside each file it writes; the local way leaves none
          assert(dir.list().sorted.toSeq === Seq("0", "1", "2.compact", "2.compact.index", "3"))
          assert(vanilla(dir).allFiles().map(_.path).toSet === (0L to 3L).flatMap(entriesOf(_))
            .map(_.path).toSet)
        }
      }
    }
  }
}
