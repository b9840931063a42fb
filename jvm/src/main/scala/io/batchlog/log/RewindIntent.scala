package io.batchlog.log

/**
 * The record a rewind writes into the sink's `_batchlog/` before it changes anything, and removes
 * as its last step. While it exists a re-run of the same rewind resumes and finishes the job, any
 * other rewind is refused, and [[io.batchlog.BatchTaggedCommitProtocol]] refuses to commit to the
 * sink. A hop of a cascade ([[CascadeIntent]]) names the command that finishes the whole cascade in
 * `finishWith`; a rewind of one sink has none (its own command finishes it).
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
}
