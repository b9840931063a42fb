package io.batchlog.ops

import org.apache.hadoop.fs.Path

import io.batchlog.log.LogTruncation

/** A data file a rewind deletes; `logged` is false for an orphan found by its batch-tagged name. */
final case class DataFileToDelete(path: Path, size: Long, batchId: Long, logged: Boolean)

/**
 * What a rewind of a sink and its query's checkpoint to batch `toBatch` will do: computed from
 * listings and log contents only, changing nothing (a dry run prints it). See [[Rewind]].
 */
final case class RewindPlan(
    sink: Path,
    metadataPath: Path,
    checkpoint: Path,
    toBatch: Long,
    sinkLatest: Long,
    offsetsLatest: Long,
    commitsLatest: Long,
    sinkHorizon: Long,
    checkpointHorizon: Long,
    dataFiles: Seq[DataFileToDelete],
    sinkLog: LogTruncation,
    sourceLogs: Seq[(Int, LogTruncation)],
    stateFiles: Seq[(Path, Long)],
    removeStateDir: Boolean,
    commitsToDelete: Seq[Long],
    offsetsToDelete: Seq[Long],
    resuming: Boolean,
    queryId: String,
    force: Boolean
) {

  def horizon: Long = math.max(sinkHorizon, checkpointHorizon)

  /** True if carrying the plan out changes nothing (a rewind to the batch after the latest). */
  def isNoop: Boolean =
    dataFiles.isEmpty && sinkLog.isNoop && sourceLogs.isEmpty && stateFiles.isEmpty &&
      !removeStateDir && commitsToDelete.isEmpty && offsetsToDelete.isEmpty

  /** The plan as a report: counts and names, not every data file. */
  def summary: RewindPlanSummary = {
    import RewindPlan.cut
    RewindPlanSummary(
      sink.toString,
      checkpoint.toString,
      toBatch,
      sinkLatest,
      offsetsLatest,
      commitsLatest,
      horizon,
      sinkHorizon,
      checkpointHorizon,
      resuming,
      queryId,
      force,
      if (sinkLatest >= toBatch) toBatch to sinkLatest else Nil,
      dataFiles.length,
      dataFiles.map(_.size).sum,
      dataFiles.count(!_.logged),
      dataFiles.groupBy(_.batchId).toSeq.sortBy(_._1).map { case (b, fs) =>
        BatchFiles(b, fs.length, fs.map(_.size).sum)
      },
      cut(sinkLog),
      RewindPlan.sourceLogCuts(sourceLogs),
      stateFiles.map(_._1.toString),
      stateFiles.map(_._2).sum,
      removeStateDir,
      commitsToDelete,
      offsetsToDelete
    )
  }
}

object RewindPlan {

  /** A log cut as a report: the files it rebuilds and deletes, by name. */
  def cut(t: LogTruncation): LogCut =
    LogCut(t.dir.toString, t.keepUpTo, t.rebuild.map(t.fileName), t.delete.map(t.fileName))

  /** File sources' log cuts as a report. */
  def sourceLogCuts(cuts: Seq[(Int, LogTruncation)]): Seq[SourceLogCut] = cuts.map { case (i, t) =>
    val c = cut(t)
    SourceLogCut(c.dir, c.keepUpTo, c.rebuild, c.delete, i)
  }
}

/**
 * What a rewind cuts in a checkpoint besides `offsets/` and `commits/`: each file source's log (by
 * source index), the state files above the target (with their sizes), and all of `state/` for a
 * rewind to batch 0.
 */
final case class CheckpointCuts(
    sourceLogs: Seq[(Int, LogTruncation)],
    stateFiles: Seq[(Path, Long)],
    removeStateDir: Boolean
)
