package io.batchlog.ops

import org.apache.spark.sql.SparkSession

import io.batchlog.BatchLogConf
import io.batchlog.checkpoint.QueryCheckpoint
import io.batchlog.log.{BatchTaggedFileStreamSinkLog, SinkOwner, SinkRecord}

/**
 * The rewind horizon: the oldest batch a rewind can reach, the latest of the sink's tagged lineage,
 * what the checkpoint retains and the batch from which the checkpoint's query owns the sink.
 */
object Horizon {

  /**
   * The batch from which query `queryId` owns the sink (its latest range in `owners`); 0 when the
   * record names no owner. A query that took the sink over at batch F cannot replay the batches
   * below F: another query wrote them, and the sink skipped this query's own batches up to F - 1
   * (Spark's sink skips every batch id already logged). A rewind of its checkpoint below F would
   * delete the other query's output and write the rows of those skipped batches instead.
   */
  def ofOwner(owners: Seq[SinkOwner], queryId: String): Long =
    owners.lastOption.filter(_.queryId == queryId).fold(0L)(_.fromBatch)

  /**
   * A rewind to N > 0 needs `offsets/N-1` and `commits/N-1` (and `offsets/N` for exact replay);
   * Spark purges both below `latest - minBatchesToRetain`.
   */
  def ofCheckpoint(offsets: Seq[Long], commits: Seq[Long]): Long =
    if (offsets.isEmpty || offsets.head == 0) 0L
    else math.max(offsets.head, commits.headOption.getOrElse(offsets.head)) + 1

  /**
   * Untagged entries (no tag, no batch-tagged name, no proof from surviving log files) can only be
   * in the latest compact file `c`, from a batch <= c whose entries are not all known. A batch's
   * entries are all known if any of them carries its batch (batchlog tags and names every file of
   * the batches it writes; a proof enumerates the batch) or the surviving log files prove the batch
   * ([[io.batchlog.log.LineageProof]]). The horizon is just above the newest batch that is not
   * known: a rewind to it or later finds every file of the batches it redoes.
   */
  def ofSink(log: BatchTaggedFileStreamSinkLog): Long =
    log.liveLogBatchIds().headOption.filter(log.isCompactFile).filter(log.mayHaveUntagged)
      .map(c => c -> log.indexOf(c).runs)
      .collect {
        case (c, runs) if runs.exists(_.batchId.isEmpty) =>
          val known = runs.flatMap(_.batchId).toSet ++ log.lineageProof(c).provenBatches
          (c to 0L by -1L).find(b => !known(b)).getOrElse(c) + 1
      }.getOrElse(0L)

  /** The sink's horizon and owner and, given the query's checkpoint, the checkpoint's horizon. */
  def report(
      spark: SparkSession,
      log: BatchTaggedFileStreamSinkLog,
      checkpointPath: Option[String]
  ): HorizonReport = {
    val sink = ofSink(log)
    val checkpoint = checkpointPath.map(new QueryCheckpoint(spark, _))
    val cp = checkpoint.map(c => ofCheckpoint(c.offsetIds, c.commitIds))
    val owners = SinkRecord.read(log.checkpointFileManager, log.metadataPath).toSeq
      .flatMap(_.owners)
    val owner = owners.lastOption
    val skipped = checkpoint.filter(_ => owners.nonEmpty).map { c =>
      skippedBatches(c.commitIds, c.queryId, owners, log.getLatestBatchId().getOrElse(-1L))
    }
    val ownerFrom = checkpoint.fold(0L)(c => ofOwner(owners, c.queryId))
    HorizonReport(
      sink,
      cp,
      cp.map(c => math.max(math.max(c, sink), ownerFrom)).getOrElse(sink),
      BatchLogConf.sinkLogSettings(spark).minBatchesToRetain,
      owner.map(_.queryId),
      owner.map(_.fromBatch),
      checkpoint.map(_.queryId),
      skipped.map(_.length.toLong),
      skipped.flatMap(_.headOption),
      skipped.flatMap(_.lastOption)
    )
  }

  /**
   * The batches `commits` (ascending) of query `queryId` that the sink has from another writer: at
   * or below the sink's `latest`, in a range the record gives to another owner. Spark's sink
   * skipped them (it skips every batch id already logged, without calling batchlog), so their rows
   * are not in the sink: what a head-start second writer leaves when nothing stopped it (a session
   * without batchlog's extension, [[io.batchlog.commit.HeadStart]]).
   */
  def skippedBatches(
      commits: Seq[Long],
      queryId: String,
      owners: Seq[SinkOwner],
      latest: Long
  ): Seq[Long] =
    commits.filter { b =>
      b <= latest && !owners.filter(_.fromBatch <= b).lastOption.exists(_.queryId == queryId)
    }
}
