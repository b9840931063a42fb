package io.batchlog.commit

import org.apache.hadoop.fs.Path

import org.apache.spark.sql.SparkSession
import io.batchlog.shim.CheckpointFileManager

import io.batchlog.BatchLogException
import io.batchlog.checkpoint.{QueryCheckpoint, StrayBatches}
import io.batchlog.log.{BatchTaggedFileStreamSinkLog, RepairIntent, RewindIntent, SinkRecord}

/**
 * Whether a query may start writing a sink, decided before its first batch.
 *
 * Spark's `FileStreamSink.addBatch(N)` returns without running a job, hence without calling the
 * commit protocol, when N is at or below the latest batch in the sink's log. A second query (its
 * own checkpoint) whose batch ids are all at or below the sink's latest ("a head start elsewhere")
 * would therefore never reach [[WriterGuard]]: every one of its batches is skipped, it ends without
 * an error, and none of its rows are in the sink. So the check is made when the query starts
 * ([[HeadStartListener]]), from the sink's record and the query's checkpoint:
 *   - the record names another query as the owner: refused, whatever the batch ids (the committer
 *     would refuse its first batch past the sink's latest anyway, after the skipped ones);
 *   - the record names no owner (none written yet: a log of plain Spark's sink, or one rebuilt by
 *     `repair`) and the query's next batch is below the sink's latest: refused, since at least the
 *     batches from there to the latest but one cannot be a replay of its own. A next batch equal to
 *     the latest is allowed: it is the normal recovery of a query that crashed after its sink
 *     logged batch N and before its checkpoint committed N (Spark re-runs N and the sink skips it);
 *   - the owner is this query: allowed.
 * Before all that, an unfinished rewind ([[io.batchlog.log.RewindIntent]]) refuses any query: the
 * rewind claimed the sink's next log id (so that a zombie writer cannot publish it), and Spark's
 * sink would skip that batch id of a starting query without calling the committer.
 */
object HeadStart {

  /**
   * Why the query `queryId` (checkpoint `checkpointRoot`) must not start writing the sink at
   * `output`; None if it may (or `output` is not yet a sink).
   */
  def refusal(
      spark: SparkSession,
      output: String,
      checkpointRoot: String,
      queryId: String
  ): Option[BatchLogException] = {
    val meta =
      try BatchTaggedFileStreamSinkLog.metadataPathOf(spark, output)
      catch { case e: BatchLogException if e.code == BatchLogException.NotASink => return None }
    val fm = CheckpointFileManager.create(meta, spark.sessionState.newHadoopConf())
    // An unfinished rewind holds a claim of the sink's next log id: Spark's sink would skip that
    // batch id without calling the committer, which refuses the run only at its first batch.
    unfinishedOperation(fm, meta, output).foreach(e => return Some(e))
    val owner = SinkRecord.read(fm, meta).flatMap(_.owner)
    if (owner.exists(_.queryId == queryId)) return None
    val log = new BatchTaggedFileStreamSinkLog(spark, meta.toString)
    val latest = log.getLatestBatchId().getOrElse(-1L)
    val next = nextBatch(spark, checkpointRoot)
    if (owner.isEmpty && next >= latest) None
    else {
      Some(
        BatchLogException.sinkOwnedAtStart(
          meta.getParent.toString,
          queryId,
          owner.map(o => (o.queryId, o.fromBatch)),
          next,
          latest
        )
      )
    }
  }

  /**
   * What a fenced zombie of the query `queryId` planned on its rewound checkpoint `checkpointRoot`
   * (batches above a gap in `offsets/`, [[StrayBatches]]), removed before the query's first batch
   * when the query owns the sink at `output`: without it Spark's restart fails (it reads the
   * missing `offsets/N-1`) and a file source would skip the files logged there for good. Also the
   * commits above the sink's latest batch ([[StrayBatches.healAhead]]: a zombie's late `commits/N`,
   * or a last batch a repair could not rebuild), which the sink would refuse for good. The ids
   * removed; none for a query that does not own the sink (it is refused) or has no strays.
   */
  def healStrays(
      spark: SparkSession,
      output: String,
      checkpointRoot: String,
      queryId: String
  ): Seq[Long] = {
    val cp = new QueryCheckpoint(spark, checkpointRoot)
    // A zombie paused between renaming a checkpoint file and its checksum renames the checksum
    // once it resumes, after a rewind removed the file: with `.N.crc` and no `N`, Spark could never
    // write batch N again ("Multiple streaming queries ..."). Such a checksum is never part of a
    // write in progress (the file is renamed first): it goes (a local disk only).
    cp.removeStrayChecksums(cp.commitsDir, cp.commitIds.lastOption.getOrElse(-1L))
    cp.removeStrayChecksums(cp.offsetsDir, cp.offsetIds.lastOption.getOrElse(-1L))
    val meta =
      try BatchTaggedFileStreamSinkLog.metadataPathOf(spark, output)
      catch { case e: BatchLogException if e.code == BatchLogException.NotASink => return Nil }
    val fm = CheckpointFileManager.create(meta, spark.sessionState.newHadoopConf())
    if (!SinkRecord.read(fm, meta).flatMap(_.owner).exists(_.queryId == queryId)) Nil
    else {
      val latest =
        new BatchTaggedFileStreamSinkLog(spark, meta.toString).getLatestBatchId().getOrElse(-1L)
      StrayBatches.healAhead(spark, cp, latest) ++ StrayBatches.heal(spark, cp, latest)
    }
  }

  /**
   * Why no query may write the sink at `meta` now: a rewind or a repair that did not finish (a
   * half-rewound sink mixes old and new output; a half-repaired log may lack its newest batches).
   * Checked when a query starts and again by [[WriterGuard]] at its run's first batch.
   */
  def unfinishedOperation(
      fm: CheckpointFileManager,
      meta: Path,
      sink: String
  ): Option[BatchLogException] =
    RewindIntent.read(fm, meta)
      .map(i =>
        BatchLogException.rewindInProgress(
          i.sink,
          i.toBatch,
          i.checkpoint,
          finishWith = i.finishWith
        )
      )
      .orElse(
        RepairIntent.read(fm, meta)
          .map(r => BatchLogException.repairInProgress(sink, r.startedAtMs, r.movedAside))
      )

  /**
   * The batch the query of `checkpointRoot` runs next: the one after its last commit (0: none). Its
   * `offsets/` may not exist yet when the query starts, so [[QueryCheckpoint]], which requires it,
   * is not used.
   */
  def nextBatch(spark: SparkSession, checkpointRoot: String): Long = {
    val root = new Path(checkpointRoot)
    val fm = CheckpointFileManager.create(root, spark.sessionState.newHadoopConf())
    val commits = new Path(root, QueryCheckpoint.CommitsDir)
    if (!fm.exists(commits)) 0L
    else {
      fm.list(commits).map(_.getPath.getName).filter(_.matches("[0-9]+")).map(_.toLong)
        .reduceOption((a: Long, b: Long) => math.max(a, b)).map(_ + 1).getOrElse(0L)
    }
  }
}
