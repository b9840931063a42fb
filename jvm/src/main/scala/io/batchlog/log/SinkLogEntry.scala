package io.batchlog.log

import io.batchlog.shim.SinkFileStatus

/**
 * One line of a batch-tagged sink log: Spark's `SinkFileStatus` plus the micro-batch that committed
 * the file.
 *
 * `batchId` is `None` only for an entry whose batch cannot be proven: written or compacted by plain
 * Spark, in a compact file, for a data file whose name carries no batch id. batchlog never makes a
 * batch id up.
 *
 * @param path
 *   the file path as a URI-encoded string, exactly as Spark writes it
 * @param commit
 *   what the batch's commit recorded about itself: on the first entry of the batches batchlog
 *   commits, None on every other entry ([[BatchCommit]])
 */
final case class SinkLogEntry(
    path: String,
    size: Long,
    isDir: Boolean,
    modificationTime: Long,
    blockReplication: Int,
    blockSize: Long,
    action: String,
    batchId: Option[Long],
    commit: Option[BatchCommit] = None
) {

  def toSinkFileStatus: SinkFileStatus =
    SinkFileStatus(path, size, isDir, modificationTime, blockReplication, blockSize, action)
}

object SinkLogEntry {
  def apply(status: SinkFileStatus, batchId: Long): SinkLogEntry = SinkLogEntry(
    status.path,
    status.size,
    status.isDir,
    status.modificationTime,
    status.blockReplication,
    status.blockSize,
    status.action,
    Some(batchId)
  )
}

/**
 * What a batch's commit recorded about itself: the query and the run that wrote it, the rows its
 * tasks wrote and how long its write took, from the write job's start to its log file. It travels
 * on the first line of the batch's log file, as the field `commit` before `batchId`: plain Spark
 * ignores it as it ignores `batchId`, compaction keeps it, and a sink with no such field (written
 * before it existed, or by plain Spark) simply has none. Each member is None where it is unknown.
 *
 * @param rows
 *   the rows the batch's write tasks wrote, as Spark's write stats counted them
 *   ([[io.batchlog.commit.WrittenRows]])
 */
final case class BatchCommit(
    queryId: Option[String],
    runId: Option[String],
    rows: Option[Long],
    durationMs: Option[Long]
)
