package io.batchlog.log

import java.util.ConcurrentModificationException

import scala.util.control.NonFatal

import org.apache.hadoop.fs.{FileStatus, Path}

import org.apache.spark.internal.Logging

import io.batchlog.{BatchLogException, Compat}
import io.batchlog.shim.CheckpointFileManager

/**
 * What a failed publish of a log file left in the store, read back before anyone acts on it.
 *
 * Why: the request that publishes a log file (a rename on HDFS, a conditional PUT or the completion
 * of a multipart upload on S3) can be applied by the store while its answer is lost: a timeout, a
 * 5xx from a load balancer, a reset connection. The client then retries, and the retry is refused
 * because the file exists: its own file. Taken at its word, that refusal says "another writer", and
 * the batch's data files would be deleted while a published log file lists them: the batch is lost
 * and plain Spark fails with `FILE_NOT_EXIST`. (Iceberg treats the same case as
 * `CommitStateUnknownException`.)
 *
 * So every failure of a publish is settled by reading the store back:
 *   - the file is there and holds exactly what this writer wrote: the publish happened. It is
 *     adopted, and the batch is committed;
 *   - the file is there and holds something else: another writer's (or a rewind's claim). The batch
 *     is refused as before (`ConcurrentModificationException`), and its data files are in no log:
 *     the committer deletes them;
 *   - the file is not there after a refusal (it existed, then a rewind cut it): refused as well;
 *   - the file is not there after a failure without a definite answer, or the store cannot be read:
 *     the request might still be applied. The batch fails with `COMMIT_OUTCOME_UNKNOWN`, whose data
 *     files the committer keeps (an orphan is `vacuum`'s to remove once no log lists it; a file a
 *     published log lists is never deleted).
 *
 * Errors of batchlog's own checks before the publish ([[BatchLogException]]: a lost lease, a
 * damaged compact file) and [[NotPublished]] errors (a store-side compaction given up before its
 * completion, a compact file that changed under its copy) are final: nothing was published.
 */
private[log] object PublishOutcome extends Logging {

  /**
   * An error raised before the publishing request was sent, or after the store refused it for good:
   * nothing was published, there is nothing to read back.
   */
  trait NotPublished { self: Throwable => }

  /**
   * Runs `publish` (true: published; false: the file was there before it started, as Spark's
   * `addNewBatchByStream` says), settling a failure once the publishing request was `sent` by
   * reading `file` back: `ours(status)` says whether the file the store holds is the one this
   * writer wrote. True when it is (adopted).
   */
  def settle(
      file: Path,
      batchId: Long,
      statusOf: Path => Option[FileStatus],
      sent: => Boolean
  )(publish: => Boolean)(ours: FileStatus => Boolean): Boolean =
    try publish
    catch {
      case e: BatchLogException => throw e
      case e: NotPublished => throw e.asInstanceOf[Throwable]
      case NonFatal(e) if !sent => throw e // before the publishing request: nothing published
      case NonFatal(e) =>
        val held =
          try Right(statusOf(file).map(ours))
          catch { case NonFatal(r) => e.addSuppressed(r); Left(r) }
        held match {
          case Right(Some(true)) =>
            logWarning(
              s"The publish of $file failed ($e), but the store holds the file this writer " +
                s"wrote: batch $batchId is committed"
            )
            true
          case Right(Some(false)) =>
            e match {
              case refused: ConcurrentModificationException => throw refused
              case _ =>
                throw new ConcurrentModificationException(
                  s"$file was published by another writer while this one's publish failed",
                  e
                )
            }
          case Right(None) if e.isInstanceOf[ConcurrentModificationException] => throw e
          case _ => throw BatchLogException.commitOutcomeUnknown(file.toString, batchId, e)
        }
    }

  /** True if `file` holds exactly `bytes` (a batch file: small, read whole). */
  def holdsBytes(fm: CheckpointFileManager, file: Path, bytes: Array[Byte]): Boolean = {
    val in = LogFiles.open(fm, file)
    try {
      val held = Compat.readAllBytes(in)
      java.util.Arrays.equals(held, bytes)
    } finally in.close()
  }

  /**
   * True if `status` is a compact file of length `length` whose bytes at `run` have the run's
   * CRC32C: the last run of a compaction holds the new batch's lines, which name data files by the
   * random UUIDs of this job's tasks, so no other writer's file matches it. (With no run at all,
   * the length decides: such a file lists no data file of this writer.)
   */
  def holdsRun(
      fm: CheckpointFileManager,
      status: FileStatus,
      length: Long,
      run: Option[IndexRun]
  ): Boolean =
    status.getLen == length && run.forall { r =>
      val in = LogFiles.open(fm, status.getPath)
      try {
        in.seek(r.offset)
        val crc = Compat.crc32c()
        val buf = new Array[Byte](1 << 16)
        var left = r.length
        var n = 0
        while (left > 0 && n >= 0) {
          n = in.read(buf, 0, math.min(buf.length.toLong, left).toInt)
          if (n > 0) { crc.update(buf, 0, n); left -= n }
        }
        left == 0 && crc.getValue == r.crc
      } finally in.close()
    }
}
