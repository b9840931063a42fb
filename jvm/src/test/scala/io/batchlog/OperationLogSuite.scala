package io.batchlog

import java.io.File
import java.util.concurrent.{Executors, TimeUnit}

import scala.concurrent.{Await, ExecutionContext, Future}
import scala.concurrent.duration._

import org.apache.hadoop.fs.Path

import io.batchlog.log.{OperationLog, OperationRecord}

/**
 * A sink's history records ([[OperationLog]]) against the assumptions a real deployment breaks:
 * writers whose clocks are days apart, and several processes writing records at once.
 */
class OperationLogSuite extends SparkSessionTestBase {
  import TestLogs._

  private val Day = 24L * 3600 * 1000

  private def record(op: String, timeMs: Long) =
    OperationRecord(1, op, timeMs, 0L, "u", "h", "app", "v", Map.empty, "done", Map.empty)

  private def names(meta: File): Seq[String] =
    Option(OperationLog.dir(new Path(meta.toURI)).toUri.getPath).map(new File(_))
      .flatMap(d => Option(d.list())).map(_.toSeq.sorted).getOrElse(Nil)

  test("retention goes by the store's clock: a writer days ahead deletes no recent record") {
    withTempDir { root =>
      val meta = metaDir(root)
      val fm = localFm(meta)
      val metaPath = new Path(meta.toURI)
      val now = System.currentTimeMillis()
      OperationLog.append(fm, metaPath, record("rewind", now), 90 * Day)
      OperationLog.append(fm, metaPath, record("vacuum", now), 90 * Day)
      // a host whose clock runs 200 days ahead: by its clock both records are past retention
      OperationLog.append(fm, metaPath, record("repair", now + 200 * Day), 90 * Day)
      assert(OperationLog.list(fm, metaPath).map(_.operation).sorted === Seq(
        "repair",
        "rewind",
        "vacuum"
      ))
      // a record the store wrote 100 days ago goes at the next record, even from a host whose
      // clock runs 200 days behind
      val old = new File(OperationLog.dir(metaPath).toUri.getPath).listFiles()
        .find(_.getName.contains("-rewind-")).get
      assert(old.setLastModified(now - 100 * Day))
      OperationLog.append(fm, metaPath, record("adopt", now - 200 * Day), 90 * Day)
      assert(OperationLog.list(fm, metaPath).map(_.operation) === Seq("adopt", "vacuum", "repair"))
      assert(names(meta).size === 3)
    }
  }

  test("records written by many writers at once are all kept, each once") {
    withTempDir { root =>
      val meta = metaDir(root)
      val metaPath = new Path(meta.toURI)
      val pool = Executors.newFixedThreadPool(8)
      implicit val ec: ExecutionContext = ExecutionContext.fromExecutor(pool)
      try {
        val now = System.currentTimeMillis()
        // 8 writers, each with its own file manager (as separate processes have), each appending
        // 10 records with retention on: none deletes another's
        val writers = (0 until 8).map { w =>
          Future {
            val fm = localFm(meta)
            (0 until 10).foreach(i =>
              OperationLog.append(fm, metaPath, record(s"w$w-$i", now + i), 90 * Day)
            )
          }
        }
        Await.result(Future.sequence(writers), 2.minutes)
      } finally {
        pool.shutdown()
        pool.awaitTermination(1, TimeUnit.MINUTES)
      }
      val ops = OperationLog.list(localFm(meta), metaPath).map(_.operation)
      assert(ops.sorted === (for (w <- 0 until 8; i <- 0 until 10) yield s"w$w-$i").sorted)
      assert(names(meta).count(_.endsWith(".json")) === 80)
    }
  }
}
