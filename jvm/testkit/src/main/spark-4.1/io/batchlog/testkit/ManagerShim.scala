package io.batchlog.testkit

import io.batchlog.shim.CheckpointFileManager

/** The parts of a wrapping `CheckpointFileManager` that differ by Spark layout (4.1). */
private[testkit] object ManagerShim {
  type FileContextBased =
    org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager
  type FileSystemBased =
    org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager
}

/** A manager that wraps `underlying`. */
private[testkit] trait WrappingManager extends CheckpointFileManager {
  protected def underlying: CheckpointFileManager

  /** Spark 4.1 added `close()` to the manager: close the wrapped one. */
  override def close(): Unit = underlying.close()
}
