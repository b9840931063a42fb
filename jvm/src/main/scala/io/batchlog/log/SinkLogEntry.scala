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
 */
final case class SinkLogEntry(
    path: String,
    size: Long,
    isDir: Boolean,
    modificationTime: Long,
    blockReplication: Int,
    blockSize: Long,
    action: String,
    batchId: Option[Long]
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
