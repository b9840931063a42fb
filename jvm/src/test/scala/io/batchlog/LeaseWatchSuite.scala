package io.batchlog

import java.io.File

import org.apache.hadoop.fs.Path

import io.batchlog.log.{Clock, JsonRecordFile, LeaseWatch, SinkOwner, SinkRecord, WriterLease}
import io.batchlog.ops.WriterFence
import io.batchlog.shim.CheckpointFileManager

/**
 * Liveness judged by the observer's own monotonic clock ([[io.batchlog.log.LeaseWatch]]), never by
 * comparing the writer's wall clock with ours; and the sink record changed only by compare-and-set.
 */
class LeaseWatchSuite extends SparkSessionTestBase {
  import TestLogs._

  private val Minute = 60000L

  private def fmOf(meta: Path): CheckpointFileManager =
    CheckpointFileManager.create(meta, spark.sessionState.newHadoopConf())

  private def metaOf(root: File): Path = {
    val dir = metaDir(root)
    assert(dir.mkdirs())
    new Path(dir.toURI)
  }

  private def lease(refreshedAtMs: Long, refreshes: Long = 1L) =
    WriterLease("q", "run-1", "elsewhere", 42L, 7L, refreshedAtMs, Minute, refreshes)

  private def refused(fm: CheckpointFileManager, meta: Path, waitMs: Long = 0L): String =
    intercept[BatchLogException](WriterFence.refuseLiveWriter(fm, meta, force = false, waitMs))
      .getMessage

  for ((skew, name) <- Seq(-10L -> "behind", 10L -> "ahead")) {
    test(s"a writer whose clock is 10 minutes $name is dead only once watched for its timeout") {
      withTempDir { root =>
        val meta = metaOf(root)
        val fm = fmOf(meta)
        val clock = new ManualClock()
        Clock.using(clock) {
          WriterLease.write(fm, meta, lease(System.currentTimeMillis() + skew * Minute))
          // first sight: watched for 0 s of the 60 s needed, whatever its refreshedAtMs says
          val m = refused(fm, meta)
          assert(m.contains("A streaming query is writing to"), m)
          assert(m.contains("query q (run run-1, driver pid 42 on elsewhere, batch 7)"), m)
          assert(m.contains("which this process has seen unchanged for 0 s"), m)
          assert(m.contains("the CLI does by default (--wait 60s)"), m)
          assert(m.contains("spark.batchlog.writer.fenceWait=lease (or 60s)"), m)
          clock.advance(Minute - 1)
          assert(refused(fm, meta).contains("seen unchanged for 59 s"))
          clock.advance(1)
          WriterFence.refuseLiveWriter(fm, meta, force = false) // dead: no error
          assert(WriterFence.liveWriter(fm, meta).isEmpty)
        }
      }
    }
  }

  test("a lease refreshed while watched is live, whatever the wall clocks say") {
    withTempDir { root =>
      val meta = metaOf(root)
      val fm = fmOf(meta)
      val clock = new ManualClock()
      Clock.using(clock) {
        // its wall clock is an hour behind ours: the old rule called it dead at once
        WriterLease.write(fm, meta, lease(System.currentTimeMillis() - 60 * Minute))
        var n = 1L
        clock.onSleep = _ => { n += 1; WriterLease.write(fm, meta, lease(0L, n)) }
        val m = refused(fm, meta, waitMs = 2 * Minute)
        assert(m.contains("which was refreshed while this process watched it: the writer lives"))
        assert(n == 2L) // seen changed at the first poll, a quarter of the timeout later
        // a writer that stops refreshing: dead after one whole timeout of no change, waited here
        clock.onSleep = _ => ()
        WriterFence.refuseLiveWriter(fm, meta, force = false, waitMs = 2 * Minute)
        // a wait shorter than what is left is not waited: refused at once
        WriterLease.write(fm, meta, lease(0L, 99L))
        val before = clock.nanoTime()
        assert(refused(fm, meta, waitMs = Minute / 2).contains("seen unchanged for 0 s"))
        assert(clock.nanoTime() == before)
        // force skips the judgement; an absent lease is no writer
        WriterFence.refuseLiveWriter(fm, meta, force = true)
        WriterLease.delete(fm, meta)
        assert(WriterFence.liveWriter(fm, meta).isEmpty)
      }
    }
  }

  test("a wait of `lease` watches a lease for its own timeout, saying how far it is") {
    withTempDir { root =>
      val meta = metaOf(root)
      val fm = fmOf(meta)
      val clock = new ManualClock()
      Clock.using(clock) {
        WriterLease.write(fm, meta, lease(0L, 5L))
        val seen = scala.collection.mutable.ArrayBuffer.empty[(Long, Long)]
        val path = WriterLease.path(meta).toString
        val verdict =
          LeaseWatch.watch(path, BatchLogConf.FenceWaitLease, clock, (u, t) => seen += ((u, t))) {
            () => WriterLease.read(fm, meta)
          }
        assert(verdict == LeaseWatch.NoWriter) // unchanged for its whole timeout: dead
        assert(seen.toSeq == Seq(0L, 15000L, 30000L, 45000L).map(_ -> Minute), seen)
        // a refreshed one is live as soon as the refresh is seen
        WriterLease.write(fm, meta, lease(0L, 6L))
        clock.onSleep = _ => WriterLease.write(fm, meta, lease(0L, 7L))
        LeaseWatch.watch(path, BatchLogConf.FenceWaitLease, clock)(() =>
          WriterLease.read(fm, meta)
        ) match {
          case LeaseWatch.Live(_, _, refreshed) => assert(refreshed)
          case other => fail(s"a refreshed lease judged $other")
        }
      }
      withSQLConf(BatchLogConf.FenceWaitKey -> "lease") {
        assert(BatchLogConf.fenceWaitMs(spark) == BatchLogConf.FenceWaitLease)
      }
      withSQLConf(BatchLogConf.FenceWaitKey -> "soon") {
        val e = intercept[BatchLogException](BatchLogConf.fenceWaitMs(spark))
        assert(e.getMessage.contains("or `lease` (the lease's own timeout)"), e.getMessage)
      }
    }
  }

  test("a lease and a record written before their counters existed read as version 0") {
    withTempDir { root =>
      val meta = metaOf(root)
      val fm = fmOf(meta)
      val dir = new File(meta.toUri)
      java.nio.file.Files.write(
        new File(dir, "batchlog-lease.json").toPath,
        """{"queryId":"q","runId":"r","host":"h","pid":1,"batchId":3,"refreshedAtMs":5,"timeoutMs":9}"""
          .getBytes("UTF-8")
      )
      java.nio.file.Files.write(
        new File(dir, "batchlog-sink.json").toPath,
        """{"version":1,"compactInterval":3,"epoch":2,"owners":[]}""".getBytes("UTF-8")
      )
      assert(WriterLease.read(fm, meta).contains(WriterLease("q", "r", "h", 1L, 3L, 5L, 9L, 0L)))
      assert(SinkRecord.read(fm, meta).contains(SinkRecord(1, 3, 2L, Nil, 0L)))
    }
  }

  test("the sink record changes by compare-and-set: a stale update is refused, the bump stays") {
    withTempDir { root =>
      val meta = metaOf(root)
      val fm = fmOf(meta)
      val first = SinkRecord.compareAndSet(fm, meta, None, SinkRecord.first("a", 0L, 3, 1L))
      assert(first.seq == 1L && first.epoch == 0L)
      // a writer read version 1; a rewind bumps the epoch first
      val bumped = WriterFence.bumpEpoch(fm, meta)(_.get.rewoundTo(0L, "a", 2L))
      assert(bumped.seq == 2L && bumped.epoch == 1L)
      val c = intercept[SinkRecord.Conflict](
        SinkRecord.compareAndSet(fm, meta, Some(first), first.copy(compactInterval = 5))
      )
      assert(c.expected == 1L && c.current.map(_.epoch).contains(1L))
      assert(SinkRecord.read(fm, meta).contains(bumped)) // the bump was not undone
      assert(JsonRecordFile.isRecordName(SinkRecord.versionPath(meta, 2L).getName))
      // only the claim of the latest version is kept
      val dir = new File(SinkRecord.path(meta).getParent.toUri)
      assert(dir.list().filter(_.startsWith("_batchlog-sink")).toSet ==
        Set("_batchlog-sink.json", "_batchlog-sink.2.json"))
    }
  }

  test("a crash between a version's claim and the record: the next update rolls it forward") {
    withTempDir { root =>
      val meta = metaOf(root)
      val fm = fmOf(meta)
      val v1 = SinkRecord.compareAndSet(fm, meta, None, SinkRecord.first("a", 0L, 3, 1L))
      // version 2 claimed (its record inside), the crash before the record was replaced
      val v2 = v1.copy(epoch = 7L, owners = v1.owners :+ SinkOwner("b", 4L, 2L), seq = 2L)
      val claim = new File(SinkRecord.versionPath(meta, 2L).toUri)
      java.nio.file.Files.write(
        claim.toPath,
        org.json4s.jackson.Serialization
          .write(v2)(org.json4s.DefaultFormats).getBytes("UTF-8")
      )
      assert(SinkRecord.read(fm, meta).contains(v1))
      intercept[SinkRecord.Conflict](SinkRecord.compareAndSet(fm, meta, Some(v1), v1))
      assert(SinkRecord.read(fm, meta).contains(v2)) // rolled forward, never back
      val v3 = SinkRecord.compareAndSet(fm, meta, Some(v2), v2.copy(compactInterval = 5))
      assert(v3.seq == 3L && v3.epoch == 7L && SinkRecord.read(fm, meta).contains(v3))
    }
  }

  test("observations stay bounded in a driver that watches ever new sinks; the current one kept") {
    val clock = new ManualClock()
    val max = JsonRecordFile.MaxRemembered
    (0 to max + 10).foreach(i => LeaseWatch.unchangedMs(s"file:/sinks/$i/lease", lease(0L), clock))
    assert(LeaseWatch.watched <= max + 1)
    clock.advance(Minute)
    // the lease watched last is still remembered: seen unchanged for the minute since
    assert(LeaseWatch.unchangedMs(s"file:/sinks/${max + 10}/lease", lease(0L), clock) == Minute)
  }
}
