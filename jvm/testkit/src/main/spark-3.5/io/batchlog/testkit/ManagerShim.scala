package io.batchlog.testkit

import io.batchlog.shim.CheckpointFileManager

/** The parts of a wrapping `CheckpointFileManager` that differ by Spark layout (3.5). */
private[testkit] object ManagerShim {
  type FileContextBased = org.apache.spark.sql.execution.streaming.FileContextBasedCheckpointFileManager
  type FileSystemBased = org.apache.spark.sql.execution.streaming.FileSystemBasedCheckpointFileManager
}

/** A manager that wraps `underlying`. */
private[testkit] trait WrappingManager extends CheckpointFileManager {
  protected def underlying: CheckpointFileManager

}
