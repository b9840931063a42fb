package io.batchlog

import org.apache.spark.sql.execution.streaming.{checkpointing, runtime, sinks}

/**
 * The Spark internals batchlog builds on, named once per internal layout, for Spark 4.1, 4.2 and
 * 4.3: there the streaming internals live in `org.apache.spark.sql.execution.streaming.runtime`,
 * `.sinks` and `.checkpointing`. Spark 3.5 and 4.0 keep them in the flat
 * `org.apache.spark.sql.execution.streaming` package, and get their own copy of this file. Every
 * member used has the same signature on all those lines; only the package moves. batchlog's code
 * imports these names from here, never from Spark's streaming packages.
 */
package object shim {
  type CompactibleFileStreamLog[T <: AnyRef] = runtime.CompactibleFileStreamLog[T]
  val CompactibleFileStreamLog: runtime.CompactibleFileStreamLog.type =
    runtime.CompactibleFileStreamLog

  type FileStreamSinkLog = sinks.FileStreamSinkLog
  val FileStreamSinkLog: sinks.FileStreamSinkLog.type = sinks.FileStreamSinkLog

  type SinkFileStatus = sinks.SinkFileStatus
  val SinkFileStatus: sinks.SinkFileStatus.type = sinks.SinkFileStatus

  type FileStreamSink = sinks.FileStreamSink

  type StreamingQueryWrapper = runtime.StreamingQueryWrapper

  type CheckpointFileManager = checkpointing.CheckpointFileManager
  val CheckpointFileManager: checkpointing.CheckpointFileManager.type =
    checkpointing.CheckpointFileManager
}
