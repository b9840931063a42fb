package io.batchlog

import org.apache.spark.sql.execution.{streaming => flat}

/**
 * The Spark internals batchlog builds on, for Spark 3.5 and 4.0: there the streaming internals
 * live in the flat `org.apache.spark.sql.execution.streaming` package (4.1 moved them; see
 * `spark-4.1/`). Every member used has the same signature on all those lines.
 */
package object shim {
  type CompactibleFileStreamLog[T <: AnyRef] = flat.CompactibleFileStreamLog[T]
  val CompactibleFileStreamLog: flat.CompactibleFileStreamLog.type = flat.CompactibleFileStreamLog

  type FileStreamSinkLog = flat.FileStreamSinkLog
  val FileStreamSinkLog: flat.FileStreamSinkLog.type = flat.FileStreamSinkLog

  type SinkFileStatus = flat.SinkFileStatus
  val SinkFileStatus: flat.SinkFileStatus.type = flat.SinkFileStatus

  type FileStreamSink = flat.FileStreamSink

  type StreamingQueryWrapper = flat.StreamingQueryWrapper

  type CheckpointFileManager = flat.CheckpointFileManager
  val CheckpointFileManager: flat.CheckpointFileManager.type = flat.CheckpointFileManager
}
