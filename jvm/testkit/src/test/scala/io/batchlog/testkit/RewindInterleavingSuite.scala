package io.batchlog.testkit

import java.io.File

import org.apache.hadoop.fs.Path

import io.batchlog.{BatchLogConf, BatchLogException, RewindFixture, SparkSessionTestBase}
import io.batchlog.TestLogs._
import io.batchlog.log.{RewindIntent, SinkRecord}
import io.batchlog.ops.{Rewind, Takeover}

/**
 * A rewind interleaved with a writer at the exact point where the writer's checks cannot see it: a
 * writer checks for a rewind at its run's first batch and re-reads the sink's epoch before each
 * commit, so one whose lease had expired (stalled, or declared dead) can commit a batch after the
 * rewind checked the sink and before it bumped the epoch. The rewind must then stop before it
 * changes anything; the writer stops at its next batch (the epoch moved).
 */
class RewindInterleavingSuite extends SparkSessionTestBase with RewindFixture {
  import BatchLogConf._

  test("a batch committed as the rewind bumps the epoch stops the rewind: nothing is deleted") {
    withSQLConf(CompactIntervalKey -> "3", DeletionKey -> "false") {
      withFixture() { fx =>
        val plan = fx.plan(5L)
        val dataFiles = plan.dataFiles.map(d => new File(d.path.toUri))
        assert(dataFiles.size == 6 && dataFiles.forall(_.exists()))
        val meta = new Path(fx.meta.toURI)
        FaultInjectingCheckpointFileManager.reset()
        // The writer's commit of batch 8, run just before the rewind writes the bumped record.
        FaultInjectingCheckpointFileManager.callback =
          (_, _) => assert(ours(fx.meta).add(8L, Array(namedEntry(8L, 0))))
        val e =
          try withSQLConf(
              TestkitConf.CheckpointFileManagerClassKey ->
                classOf[FaultInjectingCheckpointFileManager].getName,
              TestkitConf.FaultOpKey -> "createAtomic",
              TestkitConf.FaultPathRegexKey -> "batchlog-sink\\.json$",
              TestkitConf.FaultActionKey -> "call",
              TestkitConf.FaultTimesKey -> "1"
            ) {
              intercept[BatchLogException](Rewind.apply(spark, plan, quiet = true))
            }
          finally FaultInjectingCheckpointFileManager.callback = (_, _) => ()
        assert(e.code == BatchLogException.SinkChangedWhileWriting)
        assert(e.getMessage.contains("its latest batch is now 8, the rewind was planned with 7"))
        assert(e.getMessage.contains("Nothing was deleted"))
        // Nothing deleted: the data files, the log up to the writer's batch 8, the checkpoint.
        assert(dataFiles.forall(_.exists()))
        assert(ours(fx.meta).getLatestBatchId().contains(8L))
        assert((0 to 7).forall(b => new File(fx.cp, s"offsets/$b").exists()))
        // The intent is gone (a writer's restart is not refused) and the epoch moved (the writer
        // that committed batch 8 stops before its next commit).
        val fm = ours(fx.meta).checkpointFileManager
        assert(RewindIntent.read(fm, meta).isEmpty)
        assert(SinkRecord.read(fm, meta).isDefined)
      }
    }
  }

  /** A checkpoint of another query (`other-query`) that has run no batch. */
  private def otherCheckpoint(root: File): File = {
    val cp = new File(root, "other-checkpoint")
    write(new File(cp, "metadata"), """{"id":"other-query"}""")
    new File(cp, "offsets").mkdirs()
    new File(cp, "commits").mkdirs()
    cp
  }

  private def withFaultCall[A](op: String, pathRegex: String)(call: Path => Unit)(body: => A): A = {
    FaultInjectingCheckpointFileManager.reset()
    FaultInjectingCheckpointFileManager.callback = (_, p) => call(p)
    try withSQLConf(
        TestkitConf.CheckpointFileManagerClassKey ->
          classOf[FaultInjectingCheckpointFileManager].getName,
        TestkitConf.FaultOpKey -> op,
        TestkitConf.FaultPathRegexKey -> pathRegex,
        TestkitConf.FaultActionKey -> "call",
        TestkitConf.FaultTimesKey -> "1"
      )(body)
    finally FaultInjectingCheckpointFileManager.callback = (_, _) => ()
  }

  test("a zombie's publish during a takeover loses to its claim of the next log id") {
    withSQLConf(CompactIntervalKey -> "3", DeletionKey -> "false") {
      withFixture() { fx =>
        val other = otherCheckpoint(fx.out.getParentFile)
        val plan = Takeover.plan(spark, fx.sink, other.toString, force = false)
        val zombie = ours(fx.meta) // the old owner's writer, past its checks before the bump
        var published: Option[Boolean] = None
        // run as the takeover moves the epoch (the create of the record's next version)
        withFaultCall("createAtomic", "batchlog-sink\\.[0-9]+\\.json$") { _ =>
          published = Some(zombie.add(8L, Array(namedEntry(8L, 0))))
        } {
          assert(Takeover.apply(spark, fx.sink, plan, dryRun = false).done)
        }
        assert(published.contains(false)) // log id 8 was the takeover's: refused
        // the claim was released: batch 8 is the new owner's, the log ends at 7
        assert(ours(fx.meta).getLatestBatchId().contains(7L))
        assert(!fx.meta.list().exists(_.startsWith("8")))
        val meta = new Path(fx.meta.toURI)
        val record = SinkRecord.read(ours(fx.meta).checkpointFileManager, meta).get
        assert(record.owner.map(o => (o.queryId, o.fromBatch)).contains(("other-query", 8L)))
      }
    }
  }

  test("a batch committed before the takeover's claim stops it: nothing is changed") {
    withSQLConf(CompactIntervalKey -> "3", DeletionKey -> "false") {
      withFixture() { fx =>
        val other = otherCheckpoint(fx.out.getParentFile)
        val plan = Takeover.plan(spark, fx.sink, other.toString, force = false)
        val e = withFaultCall("createAtomic", "_spark_metadata/8(\\.compact)?$") { _ =>
          assert(ours(fx.meta).add(8L, Array(namedEntry(8L, 0)))) // the old owner's batch 8
        } {
          intercept[BatchLogException](Takeover.apply(spark, fx.sink, plan, dryRun = false))
        }
        assert(e.code == BatchLogException.SinkChangedWhileWriting)
        assert(e.getMessage.contains("while the takeover was starting: its latest batch is now 8"))
        assert(e.getMessage.endsWith("Nothing was changed."))
        assert(ours(fx.meta).getLatestBatchId().contains(8L))
        val meta = new Path(fx.meta.toURI)
        assert(SinkRecord.read(ours(fx.meta).checkpointFileManager, meta).isEmpty)
      }
    }
  }
}
