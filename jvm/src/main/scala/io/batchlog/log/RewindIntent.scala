package io.batchlog.log

import org.apache.hadoop.fs.Path

import io.batchlog.BatchLogException
import io.batchlog.shim.CheckpointFileManager

/**
 * The record a rewind writes into the sink's `_batchlog/` before it changes anything, and removes
 * as its last step. While it exists a re-run of the same rewind resumes and finishes the job, any
 * other rewind is refused, and [[io.batchlog.BatchTaggedCommitProtocol]] refuses to commit to the
 * sink, and a query that reads it ([[refuseReader]]) stops. A hop of a cascade ([[CascadeIntent]])
 * names the command that finishes the whole cascade in `finishWith`; a rewind of one sink has none
 * (its own command finishes it).
 */
final case class RewindIntent(
    toBatch: Long,
    sink: String,
    checkpoint: String,
    startedAtMs: Long,
    finishWith: Option[String] = None
)

object RewindIntent extends JsonRecordFile[RewindIntent]("batchlog-rewind.json") {
  val FileName: String = fileName

  /**
   * Stops a query that reads the sink of `metadataPath` (the `batchlog` source, or Spark's file
   * source through the guard) while a rewind of it is unfinished: its log may be half cut. No lease
   * guards a reader that writes no file sink, so this is what refuses it during a cascade.
   */
  def refuseReader(fm: CheckpointFileManager, metadataPath: Path): Unit =
    read(fm, metadataPath).foreach { i =>
      throw BatchLogException.rewindInProgress(
        i.sink,
        i.toBatch,
        i.checkpoint,
        andThen = "restart this query, which reads it",
        finishWith = i.finishWith
      )
    }
}
