package io.batchlog.testkit

import java.io.File
import java.util.concurrent.{CountDownLatch, TimeUnit}

import scala.jdk.CollectionConverters._

import org.apache.hadoop.fs.Path

import org.apache.spark.TaskContext
import org.apache.spark.scheduler.{SparkListener, SparkListenerTaskEnd}
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.expressions.UserDefinedFunction
import org.apache.spark.sql.functions.{col, udf}
import org.apache.spark.sql.streaming.{StreamingQuery, StreamingQueryException}

import io.batchlog.{BatchLogConf, ManualClock, RewindFixture}
import io.batchlog.commit.WriterGuard
import io.batchlog.SparkSessionTestBase
import io.batchlog.TestLogs._
import io.batchlog.log.{Clock, SinkRecord, WriterLease}
import io.batchlog.ops.{Rewind, RewindStepListener, WriterFence}
import io.batchlog.testshim.{intStream, MemoryStream}

/** Runs a test's step inside a task of the query (local mode: the same JVM). */
object TaskHook {
  @volatile var onRow: Long => Unit = (_: Long) => ()
  val hook: UserDefinedFunction = udf { (id: Long) => onRow(id); id }
}

/** Runs a test's step after a rewind's step `fence` (a zombie writer's, at that exact point). */
class AfterFence(spark: SparkSession) extends RewindStepListener {
  override def afterStep(step: String): Unit = if (step == "fence") AfterFence.run()
}

object AfterFence {
  @volatile var run: () => Unit = () => ()
}

/**
 * Fencing the store arbitrates, tried by deterministic interleavings: a writer whose lease keeper
 * fails or stalls stops before it commits (its files deleted); a writer's claim of the sink racing
 * an epoch bump loses; a zombie's commit after a rewind's epoch bump loses to the rewind's claim of
 * the next log id, and what it left in the checkpoint is found and removed. Each ends in a clear
 * refusal or a clean stop: the rows plain Spark reads back are exactly the committed batches'.
 */
class WriterFencingSuite extends SparkSessionTestBase with RewindFixture {
  import BatchLogConf._

  override protected def sparkConf: Map[String, String] =
    Map(CommitProtocolKey -> CommitProtocolClass)

  private val FaultManager = classOf[FaultInjectingCheckpointFileManager].getName

  private def rowsOf(batch: Int): Seq[Int] = (0 until 5).map(batch * 100 + _)

  private case class Sink(root: File) {
    val out = new File(root, "out")
    val checkpoint = new File(root, "checkpoint")
    val input: MemoryStream[Int] = intStream(spark, 2)
    def start(): StreamingQuery =
      input.toDF().select(TaskHook.hook(col("value").cast("long")).as("id")).writeStream
        .format("parquet").option("checkpointLocation", checkpoint.toString).start(out.toString)

    /** Its log's directory, and the file manager batchlog's log of it uses (the session's now). */
    val meta = new Path(new File(out, "_spark_metadata").toURI)
    def fileManager = ours(new File(meta.toUri)).checkpointFileManager

    /** Every row plain Spark reads back, sorted: a row committed twice shows twice. */
    def readBack: Seq[Long] =
      spark.read.parquet(out.toString).collect().map(_.getLong(0)).toSeq.sorted
    def rows: Set[Long] = readBack.toSet
    def batchFiles(b: Long): Seq[String] =
      Option(out.listFiles()).toSeq.flatten.map(_.getName)
        .filter(n => n.startsWith("part-") && n.contains(s"-batch-$b-"))
  }

  /**
   * The session confs under which every write of the writer lease (the keeper's refreshes) runs
   * [[FaultInjectingCheckpointFileManager.callback]] first, with a lease timeout of `leaseTimeout`.
   */
  private def callOnLeaseWrites(leaseTimeout: String): Seq[(String, String)] =
    callOnLease("createAtomic", leaseTimeout)

  /** As [[callOnLeaseWrites]], for the lease's operation `op` (a write, a delete). */
  private def callOnLease(op: String, leaseTimeout: String): Seq[(String, String)] = Seq(
    WriterLeaseTimeoutKey -> leaseTimeout,
    TestkitConf.CheckpointFileManagerClassKey -> FaultManager,
    TestkitConf.FaultOpKey -> op,
    TestkitConf.FaultPathRegexKey -> "batchlog-lease\\.json$",
    TestkitConf.FaultActionKey -> "call"
  )

  private def withHooks[A](body: => A): A = {
    FaultInjectingCheckpointFileManager.reset()
    try body
    finally {
      TaskHook.onRow = (_: Long) => ()
      AfterFence.run = () => ()
      FaultInjectingCheckpointFileManager.callback = (_, _) => ()
    }
  }

  private def await(latch: CountDownLatch, what: String): Unit =
    assert(latch.await(60, TimeUnit.SECONDS), s"timed out waiting for $what")

  /** The query fails running `batch`; its error, with what a batch's failure says. */
  private def failedBatch(s: Sink, q: StreamingQuery, batch: Int): String = {
    s.input.addData(rowsOf(batch): _*)
    intercept[StreamingQueryException](processAll(q)).getMessage
  }

  /**
   * Runs `body` with the query of `s` past batch 0 (a 4 s lease, on `clock`), once the keeper's
   * next lease write hangs (a hung PUT) until `body` counts `release` down, or it ends.
   */
  private def withHungRefresh(s: Sink, clock: ManualClock)(
      body: (StreamingQuery, CountDownLatch, CountDownLatch) => Unit
  ): Unit = {
    val hang = new HangOnce("createAtomic")
    try Clock.using(clock) {
        withSQLConf(callOnLeaseWrites(leaseTimeout = "4s"): _*) {
          withQuery(s.start()) { q =>
            s.input.addData(rowsOf(0): _*)
            processAll(q)
            hang.armed.set(true)
            body(q, hang.stalled, hang.release)
          }
        }
      }
    finally hang.release.countDown()
  }

  /**
   * Makes the fault-injecting manager's callback hang the first call of `op` after `armed` is set
   * (a hung request) until `release` is counted down, or 120 s pass; `stalled` says it hangs. Every
   * other call runs `otherwise`.
   */
  final private class HangOnce(op: String) {
    val stalled = new CountDownLatch(1)
    val release = new CountDownLatch(1)
    val armed = new java.util.concurrent.atomic.AtomicBoolean(false)
    @volatile var otherwise: (String, Path) => Unit = (_, _) => ()
    FaultInjectingCheckpointFileManager.callback = { (called, p) =>
      if (called == op && armed.get && stalled.getCount > 0) {
        stalled.countDown(); release.await(120, TimeUnit.SECONDS)
      } else otherwise(called, p)
    }
  }

  test("a keeper whose refresh fails stops the query before it commits: files deleted") {
    withHooks {
      withTempDir { root =>
        val s = Sink(root)
        val refreshFailed = new CountDownLatch(1)
        val armed = new java.util.concurrent.atomic.AtomicBoolean(false)
        // once armed (batch 0 committed), the keeper's next refresh fails
        FaultInjectingCheckpointFileManager.callback = { (_, p) =>
          if (armed.get && refreshFailed.getCount > 0) {
            refreshFailed.countDown()
            throw new java.io.IOException(s"injected: the store refuses $p")
          }
        }
        withSQLConf(callOnLeaseWrites(leaseTimeout = "8s"): _*) {
          withQuery(s.start()) { q =>
            s.input.addData(rowsOf(0): _*)
            processAll(q)
            // batch 1's tasks arm the fault and wait for the failed refresh: the commit follows
            TaskHook.onRow = id =>
              if (id == 100L) { armed.set(true); await(refreshFailed, "the failed refresh") }
            val m = failedBatch(s, q, 1)
            assert(m.contains("This query no longer holds its writer lease on"), m)
            assert(m.contains("a refresh of its lease"), m)
            assert(m.contains("injected: the store refuses"), m)
            assert(m.contains("Batch 1 was not committed; its data files are deleted."), m)
          }
        }
        assert(s.batchFiles(1L).isEmpty)
        assert(ours(new File(s.out, "_spark_metadata")).getLatestBatchId().contains(0L))
        assert(s.rows == rowsOf(0).map(_.toLong).toSet)
      }
    }
  }

  test("a keeper whose refresh stalls: the writer stops once its last refresh is too old") {
    withHooks {
      withTempDir { root =>
        val s = Sink(root)
        val clock = new ManualClock()
        withHungRefresh(s, clock) { (q, stalled, _) =>
          // during batch 1, 3.5 s pass on the writer's clock with no refresh: more than the 3 s
          // (4 s timeout minus a 1 s refresh interval) it may go without one
          TaskHook.onRow = id =>
            if (id == 100L) { await(stalled, "the stalled refresh"); clock.advance(3500) }
          val m = failedBatch(s, q, 1)
          assert(m.contains("This query no longer holds its writer lease on"), m)
          assert(
            m.contains("its last successful refresh started 3.5 s ago, more than " +
              "the 3.0 s it may be old"),
            m
          )
          assert(m.contains("Batch 1 was not committed; its data files are deleted."), m)
        }
        assert(s.batchFiles(1L).isEmpty)
        assert(s.rows == rowsOf(0).map(_.toLong).toSet)
      }
    }
  }

  test("a batch failing while a refresh hangs: its lease goes once the refresh lands") {
    // The failed batch's abort waits one second for the refresh in flight, then gives up; the
    // watcher removes the lease once the hung write lands and the query's thread has ended. Without
    // that, the lease of an ended run would stay until the next writer's takeover timeout.
    withHooks {
      withTempDir { root =>
        val s = Sink(root)
        val lease = new File(s.out, "_batchlog/_batchlog-lease.json")
        withHungRefresh(s, new ManualClock()) { (q, stalled, release) =>
          val run = q.runId.toString
          // The failing task first waits for the batch's other task to end and reach the driver:
          // a task still running as the job fails may finish after the abort, its report dropped
          // by Spark, and leave its file as an orphan (in no log, for vacuum), not this test's case.
          val ended = new java.util.concurrent.ConcurrentLinkedQueue[(Int, Int)]
          val listener = new SparkListener {
            override def onTaskEnd(e: SparkListenerTaskEnd): Unit =
              if (e.taskInfo.successful) ended.add((e.stageId, e.taskInfo.index))
          }
          spark.sparkContext.addSparkListener(listener)
          TaskHook.onRow = id =>
            if (id == 100L) {
              val tc = TaskContext.get()
              await(stalled, "the hung refresh")
              eventually("the batch's other task to end") {
                ended.asScala.exists(t => t._1 == tc.stageId() && t._2 != tc.partitionId())
              }
              throw new IllegalStateException("injected failure of batch 1")
            }
          val m =
            try failedBatch(s, q, 1)
            finally spark.sparkContext.removeSparkListener(listener)
          assert(m.contains("injected failure of batch 1"), m)
          // the abort could not remove it: the refresh holding the lease has not landed
          assert(leaseOf(s).exists(_.runId == run), "the lease went before its refresh landed")
          release.countDown()
          awaitLeaseWatcher(run)
          assert(!lease.exists(), "the ended run's lease stayed after its refresh landed")
        }
        assert(s.batchFiles(1L).isEmpty)
        assert(s.rows == rowsOf(0).map(_.toLong).toSet)
      }
    }
  }

  for (takenOver <- Seq(false, true)) {
    val what =
      if (takenOver) "leaves the lease another writer took meanwhile"
      else "removes the lease while it still names the run"
    test(s"a run whose watcher stalled past its lease's age at the end $what") {
      // The run ends after its watcher went 61 s (on its own clock) without a refresh: more than
      // the 45 s a 60 s lease may go without one. By then an observer may have called the lease
      // dead and a new writer may have taken it: the run removes the file only if it still names
      // the run (read right before), so the next command or start need not watch a dead run's
      // lease; another writer's lease stays. (A refresh every 15 s of real time does not come
      // within this test.)
      withTempDir { root =>
        val s = Sink(root)
        val clock = new ManualClock()
        val other = WriterLease("other-query", "other-run", "elsewhere", 7L, 1L, 0L, 60000L, 1L)
        Clock.using(clock) {
          withSQLConf(WriterLeaseTimeoutKey -> "60s") {
            val q = s.start()
            try {
              s.input.addData(rowsOf(0): _*)
              processAll(q)
              clock.advance(61000)
              if (takenOver) WriterLease.write(s.fileManager, s.meta, other)
            } finally q.stop()
            def guarded = WriterGuard.guardedSinks.exists(_.toString.contains(root.getName + "/"))
            eventually("the run's guard to go after it stopped (30 s)")(!guarded)
            if (takenOver) assert(leaseOf(s).contains(other), leaseOf(s))
            else assert(leaseOf(s).isEmpty, leaseOf(s))
          }
        }
        assert(s.rows == rowsOf(0).map(_.toLong).toSet)
      }
    }
  }

  /** The lease of the sink `s`, as the store has it now. */
  private def leaseOf(s: Sink): Option[WriterLease] = {
    WriterLease.read(s.fileManager, s.meta)
  }

  /**
   * Waits up to 30 s for `cond` to hold once. It is evaluated once a round and never again after it
   * held: a lease read can land in the instant a refresh replaces the file (see [[awaitLeaseOf]]),
   * so a second read could fail what the first one proved.
   */
  private def eventually(what: String)(cond: => Boolean): Unit = {
    val deadline = System.currentTimeMillis() + 30000
    var held = cond
    while (!held && System.currentTimeMillis() < deadline) {
      Thread.sleep(20)
      held = cond
    }
    assert(held, s"timed out waiting for $what")
  }

  /**
   * Runs `body` on a fresh sink whose query stopped after batch 0 (a 4 s lease) while the ended
   * run's removal of its lease hangs (a hung DELETE) until `body` counts `release` down, or it
   * ends; batch 1's rows are given before. `body` gets the ended run's id. Then plain Spark must
   * read batches 0 to 2, each row once.
   */
  private def withHungRemoval(body: (Sink, String, HangOnce) => Unit): Unit =
    withHooks {
      withTempDir { root =>
        val s = Sink(root)
        val hang = new HangOnce("delete")
        try withSQLConf(callOnLease("delete,open", leaseTimeout = "4s"): _*) {
            val ended = withQuery(s.start()) { q =>
              s.input.addData(rowsOf(0): _*)
              processAll(q)
              hang.armed.set(true)
              q.runId.toString
            }
            await(hang.stalled, "the ended run's removal of its lease")
            s.input.addData(rowsOf(1): _*)
            body(s, ended, hang)
          }
        finally hang.release.countDown()
        assert(s.readBack == (0 to 2).flatMap(rowsOf).map(_.toLong))
      }
    }

  /**
   * Waits up to 30 s for the lease of `s` to name `run`. A live run refreshes its lease every
   * second, and with the fault-injecting manager a refresh goes through Hadoop's `FileContext`
   * rename with overwrite, which on the local file system deletes the old file first: a read may
   * find none for that instant. (Spark's default manager, which batchlog publishes through on a
   * local disk, and HDFS and the object stores replace it atomically.)
   */
  /**
   * Writes `lease` over the sink's lease until it stays for 2.5 s, more than two refresh intervals
   * (1 s). A write can land between the keeper's read of its own lease and its refresh, which then
   * replaces it (seen once on a loaded machine). A keeper that reads a lease naming another run
   * never writes again, so a lease that stays that long was seen.
   */
  private def writeUntilItStays(s: Sink, lease: WriterLease): Unit =
    eventually(s"the lease to stay ${lease.describe}") {
      WriterLease.write(s.fileManager, s.meta, lease)
      Thread.sleep(2500)
      leaseOf(s).contains(lease)
    }

  private def awaitLeaseOf(s: Sink, run: String): Unit =
    eventually(s"the lease to name run $run, not ${leaseOf(s)}")(leaseOf(s).exists(_.runId == run))

  test("a restart waits for the ended run's removal of its lease, then takes it") {
    // Without the wait, the restarted run took the lease while the ended run's watcher was between
    // its check (the lease is its own) and its delete; the delete then removed the new run's lease
    // and the new run stopped at its next batch.
    withHungRemoval { (s, ended, hang) =>
      withQuery(s.start()) { q =>
        Thread.sleep(2000) // the restart's batch 1 waits (up to the 4 s lease timeout)
        assert(leaseOf(s).exists(_.runId == ended), "the restart took the lease")
        assert(ours(new File(s.out, "_spark_metadata")).getLatestBatchId().contains(0L))
        hang.release.countDown() // the ended run's delete lands: then the restart takes the lease
        processAll(q)
        awaitLeaseOf(s, q.runId.toString)
        Thread.sleep(2500) // more than two refresh intervals (1 s): the lease stays its own
        s.input.addData(rowsOf(2): _*)
        processAll(q)
        awaitLeaseOf(s, q.runId.toString)
      }
    }
  }

  test("a removal that hangs past the restart's wait and lands later stops the restart, loudly") {
    withHungRemoval { (s, _, hang) =>
      withQuery(s.start()) { q =>
        processAll(q) // waited 4 s for the hung delete, then took the lease: batch 1 commits
        awaitLeaseOf(s, q.runId.toString)
        // The delete lands between two refreshes: the keeper is held before its next check of the
        // lease. (Landing between a check and its refresh, it is undone by the refresh, which
        // writes the lease again: harmless, as the run is still the only writer.)
        val keeper = leaseWatcher(q.runId.toString)
        assert(keeper.isDefined, s"no lease watcher of run ${q.runId}")
        val held = new CountDownLatch(1)
        val goOn = new CountDownLatch(1)
        hang.otherwise = (op, _) =>
          if (op == "open" && keeper.contains(Thread.currentThread) && held.getCount > 0) {
            held.countDown(); goOn.await(60, TimeUnit.SECONDS)
          }
        await(held, "the keeper's next check of the lease")
        hang.release.countDown() // the ended run's delete lands over the restart's lease
        eventually("the late removal")(leaseOf(s).isEmpty)
        goOn.countDown()
        // the keeper finds no lease and stops refreshing: it only waits for the query's thread,
        // in Thread.join() without a timeout (between refreshes it is in join(ms): TIMED_WAITING)
        eventually("the keeper to stop refreshing") {
          val t = keeper.get
          t.getState == Thread.State.WAITING &&
          t.getStackTrace.exists(f =>
            f.getClassName == "java.lang.Thread" && f.getMethodName == "join"
          )
        }
        val m = failedBatch(s, q, 2)
        assert(m.contains("This query no longer holds its writer lease on"), m)
        assert(m.contains("was removed by another process"), m)
        assert(m.contains("Batch 2 was not written to the sink; nothing was changed."), m)
      }
      assert(s.batchFiles(2L).isEmpty)
      // the next start takes the lease again and commits batch 2, once
      withQuery(s.start()) { q =>
        processAll(q)
        awaitLeaseOf(s, q.runId.toString)
      }
    }
  }

  test("a removal landing between the keeper's check and its refresh is undone by the refresh") {
    // The other interleaving of a late removal: the keeper read the lease (its own) and is about
    // to write it again when the delete lands. The refresh writes the lease back; the run is still
    // the only writer (a rewind or a takeover moves the epoch before it acts), so it goes on.
    withHooks {
      withTempDir { root =>
        val s = Sink(root)
        withHungRefresh(s, new ManualClock()) { (q, stalled, release) =>
          await(stalled, "the keeper's refresh, after its check of the lease")
          s.fileManager.delete(WriterLease.path(s.meta)) // another process removes the lease
          assert(leaseOf(s).isEmpty, "the lease is still there")
          release.countDown() // the refresh lands: the lease is written again
          awaitLeaseOf(s, q.runId.toString)
          Thread.sleep(2500) // more than two refresh intervals (1 s): the keeper keeps refreshing
          awaitLeaseOf(s, q.runId.toString)
          s.input.addData(rowsOf(1): _*)
          processAll(q)
          assert(q.exception.isEmpty, q.exception)
          assert(s.batchFiles(1L).nonEmpty, "batch 1 wrote no data file")
        }
        assert(ours(new File(s.out, "_spark_metadata")).getLatestBatchId().contains(1L))
        assert(s.readBack == (0 to 1).flatMap(rowsOf).map(_.toLong))
      }
    }
  }

  test("a refresh that lands after its lease could be called dead ends the keeping for good") {
    // The keeper's PUT hangs past the lease's timeout: an observer calls the run dead and a new
    // writer takes the lease; then the hung PUT goes through over the new writer's lease. Before
    // the fix, the keeper's next refresh was on time again and the run went on committing.
    withHooks {
      withTempDir { root =>
        val s = Sink(root)
        val clock = new ManualClock()
        var late: Option[WriterLease] = None
        withHungRefresh(s, clock) { (q, stalled, release) =>
          await(stalled, "the hung refresh")
          clock.advance(4500) // past the 4 s timeout: the lease may be called dead
          WriterLease.write(s.fileManager, s.meta, WriterLease("q2", "r2", "h2", 2L, 0L, 0L, 4000L))
          release.countDown() // the hung PUT lands over the new writer's lease
          eventually("the late refresh")(leaseOf(s).exists(_.runId == q.runId.toString))
          late = leaseOf(s)
          Thread.sleep(2500) // more than two refresh intervals (1 s): none comes
          assert(leaseOf(s) == late, "the run refreshed its lease after a late refresh")
          val m = failedBatch(s, q, 1)
          assert(m.contains("This query no longer holds its writer lease on"), m)
          assert(
            m.contains("landed 4.5 s after the previous one started, more than the 3.5 s " +
              "a lease may go unrefreshed: another writer may have taken the lease"),
            m
          )
          // refused before the batch: it knew before it started
          assert(m.contains("Batch 1 was not written to the sink; nothing was changed."), m)
        }
        // its late version stays: the run does not remove a lease another writer may own
        assert(late.isDefined && leaseOf(s) == late)
        assert(s.batchFiles(1L).isEmpty)
        assert(s.rows == rowsOf(0).map(_.toLong).toSet)
      }
    }
  }

  test("a late refresh of the run a writer replaced is taken back; another run's stops it") {
    withTempDir { root =>
      val s = Sink(root)
      val (meta, fm) = (s.meta, s.fileManager)
      // a dead writer's lease (a 2 s timeout), on the sink before the query starts
      val zombie = WriterLease("zombie-query", "zombie-run", "zombie-host", 1L, 0L, 0L, 2000L, 1L)
      WriterLease.write(fm, meta, zombie)
      withSQLConf(WriterLeaseTimeoutKey -> "4s", FenceWaitKey -> "10s") {
        withQuery(s.start()) { q =>
          s.input.addData(rowsOf(0): _*)
          processAll(q) // watched it unchanged for 2 s, then took it
          val run = q.runId.toString
          awaitLeaseOf(s, run)
          WriterLease.write(fm, meta, zombie.copy(refreshes = 2L)) // the zombie's late refresh
          eventually("the lease taken back")(leaseOf(s).exists(_.runId == run))
          s.input.addData(rowsOf(1): _*)
          processAll(q)
          // a lease naming any other run: this run no longer holds it, and stops
          writeUntilItStays(s, zombie.copy(runId = "third-run", refreshes = 3L))
          val m = failedBatch(s, q, 2)
          assert(m.contains("names another run now"), m)
          assert(m.contains("Batch 2 was not written to the sink; nothing was changed."), m)
        }
      }
      assert(leaseOf(s).exists(_.runId == "third-run"))
      assert(s.batchFiles(2L).isEmpty)
      assert(s.rows == (rowsOf(0) ++ rowsOf(1)).map(_.toLong).toSet)
    }
  }

  test("a writer's claim of the sink racing an epoch bump loses; the bump stays") {
    withHooks {
      withTempDir { root =>
        val s = Sink(root)
        val meta = s.meta
        // as the writer claims the new sink (its record's version 1), another process claims it
        // first: a takeover by another query, with its epoch bump
        FaultInjectingCheckpointFileManager.callback = { (_, _) =>
          WriterFence.bumpEpoch(s.fileManager, meta)(_ =>
            SinkRecord.first("other-query", 0L, 10, 1L)
          )
        }
        withSQLConf(
          TestkitConf.CheckpointFileManagerClassKey -> FaultManager,
          TestkitConf.FaultOpKey -> "createAtomic",
          TestkitConf.FaultPathRegexKey -> "batchlog-sink\\.1\\.json$",
          TestkitConf.FaultActionKey -> "call",
          TestkitConf.FaultTimesKey -> "1"
        ) {
          withQuery(s.start()) { q =>
            val m = failedBatch(s, q, 0)
            assert(
              m.contains("was changed by another process (a rewind, takeover or repair) " +
                "as this query claimed it"),
              m
            )
            assert(m.contains("moved past version 0"), m)
            assert(m.contains("Batch 0 was not written to the sink; nothing was changed."), m)
          }
        }
        val r = SinkRecord.read(s.fileManager, meta).get
        assert(r.owners.map(_.queryId) == List("other-query") && r.epoch == 0L && r.seq == 1L)
        assert(s.batchFiles(0L).isEmpty)
        assert(ours(new File(meta.toUri)).getLatestBatchId().isEmpty)
      }
    }
  }

  test("a zombie's commit after the rewind's epoch bump loses to its claim of the next log id") {
    withSQLConf(CompactIntervalKey -> "3", DeletionKey -> "false") {
      withHooks {
        withFixture() { fx =>
          val plan = fx.plan(5L, force = true)
          val zombie = ours(fx.meta) // a writer that passed its checks before the bump
          var refused: Option[scala.util.Try[Boolean]] = None
          AfterFence.run = { () =>
            // it writes what a batch 8 writes: offsets, state, then its log file 8.compact
            write(new File(fx.cp, "offsets/8"), "v1\n{}\n{\"logOffset\":8}")
            write(new File(fx.cp, "state/0/0/9.delta"), "d")
            write(new File(fx.cp, "state/0/1/9.delta"), "d")
            // refused: log id 8 exists (Spark's add says false; a publish racing the claim would
            // fail with ConcurrentModificationException)
            refused = Some(scala.util.Try(zombie.add(8L, Array(namedEntry(8L, 0)))))
          }
          withSQLConf(RewindStepListenerKey -> classOf[AfterFence].getName) {
            Rewind.apply(spark, plan, quiet = true)
          }
          assert(refused.contains(scala.util.Success(false)))
          // the rewind completed: the log ends at 4, the claim and the zombie's files are gone
          val log = ours(fx.meta)
          assert(log.getLatestBatchId().contains(4L))
          assert(!fx.meta.list().exists(n => n.startsWith("8") || n.startsWith("5")))
          assert(log.allFiles().map(_.batchId.get).toSet == (0L to 4L).toSet)
          assert(!new File(fx.cp, "offsets/8").exists() && !new File(fx.cp, "offsets/6").exists())
          assert(new File(fx.cp, "offsets/5").exists() && !new File(fx.cp, "commits/5").exists())
          val state = new File(fx.cp, "state/0")
          assert(!new File(state, "0/9.delta").exists() && !new File(state, "1/9.delta").exists())
          assert(new File(state, "0/5.delta").exists() && !new File(state, "0/6.delta").exists())
          // the record's epoch moved: the zombie, were it to go on, is refused at its next check
          assert(SinkRecord.read(log.checkpointFileManager, new Path(fx.meta.toURI))
            .exists(_.seq == 1L))
        }
      }
    }
  }
}
