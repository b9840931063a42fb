package io.batchlog.ops

import scala.collection.mutable

import org.apache.spark.sql.SparkSession

import io.batchlog.{BatchLogConf, BatchLogException}
import io.batchlog.log.{LogLayout, OperationLog}

/**
 * What happened to a sink, read back: each live batch (from the log, which every sink has, so a
 * sink written before history existed shows its batches too), each compaction whose file is still
 * live, and each maintenance operation run on it (from `_batchlog/_history/`, [[OperationLog]]). It
 * changes nothing.
 *
 * A batch's time is the newest modification time of the files it wrote: the log keeps that for
 * every entry, through every compaction, so the history of a batch lasts as long as the log holds
 * it (its retention). So does what its commit recorded ([[io.batchlog.log.BatchCommit]]: query,
 * run, rows, duration), on its first line; a batch committed before that existed has none. A batch
 * whose files were all deleted by a later rewind is not a batch any more; the rewind's record says
 * what it removed.
 */
object History {

  def of(spark: SparkSession, outputPath: String): SinkHistory = BatchLogException.unchanged {
    val reader = new SinkReader(spark, outputPath)
    val log = reader.log
    val perBatch = mutable.TreeMap.empty[Long, SinkBatch]
    var untagged = 0L
    log.foreachLiveEntry { e =>
      e.batchId match {
        case Some(b) =>
          val s = perBatch.getOrElse(b, SinkBatch(b, 0L, 0L, 0L, None, None, None, None))
          perBatch(b) = e.commit.foldLeft(
            s.copy(
              files = s.files + 1,
              bytes = s.bytes + e.size,
              timeMs = math.max(s.timeMs, e.modificationTime)
            )
          )((s, c) =>
            s.copy(rows = c.rows, durationMs = c.durationMs, queryId = c.queryId, runId = c.runId)
          )
        case None => untagged += 1
      }
    }
    val compactions =
      log.listLogFiles().toSeq.filter(s => LogLayout.isCompactName(s.getPath.getName))
        .flatMap { s =>
          LogLayout.idOfName(s.getPath.getName).map(id =>
            SinkCompaction(id, s.getPath.getName, s.getLen, s.getModificationTime)
          )
        }
    val operations = OperationLog.list(log.checkpointFileManager, reader.metadataPath).map { r =>
      SinkOperation(
        r.operation,
        r.timeMs,
        r.durationMs,
        r.user,
        r.host,
        r.applicationId,
        r.batchlogVersion,
        r.arguments,
        r.outcome,
        r.changed
      )
    }
    SinkHistory(
      outputPath,
      reader.latestBatch(),
      untagged,
      perBatch.values.toSeq,
      compactions,
      operations,
      BatchLogConf.historyRetentionMs(spark)
    )
  }
}
