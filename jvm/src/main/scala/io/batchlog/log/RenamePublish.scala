package io.batchlog.log

import java.io.{IOException, OutputStream}
import java.util.UUID
import java.util.concurrent.ConcurrentHashMap

import scala.util.control.NonFatal

import org.apache.hadoop.fs.{AbstractFileSystem, DelegateToFileSystem, FileAlreadyExistsException}
import org.apache.hadoop.fs.{FileSystem, Path}

import org.apache.spark.sql.SparkSession

import io.batchlog.shim.CheckpointFileManager

/**
 * A write-once publish (a log file, a claim, a record's next version) by a temp file and
 * `FileSystem.rename`, with the rename's answer checked.
 *
 * Why: Spark's default manager publishes through `FileContext.rename` without overwrite. That
 * checks for the target first, then renames; the store decides a race between two writers who both
 * passed the check. Where the file system's `FileContext` binding is a `DelegateToFileSystem`
 * (ABFS, S3A, most cloud connectors), the store's refusal comes back as `FileSystem.rename`'s
 * `false`, and Hadoop turns it into a bare `IOException` ("rename from ... failed"), not the
 * `FileAlreadyExistsException` that tells a writer another one published the file first, and the
 * temp file stays. ABFS on the Blob API renames by a Copy Blob with `If-None-Match: *`, so the
 * store does refuse the second of two racing writers. Measured against Azurite, 30 rounds of two
 * racing publishes of one log file: through the manager the loser got that `IOException` in 29 and
 * left its temp file in all 30; through this object it got `FileAlreadyExistsException` in all 30,
 * the file held the winner's bytes, and no temp file stayed.
 *
 * How: the bytes go to `.<name>.<uuid>.tmp` beside the target (Spark's temp name, which a refused
 * publish's cleanup finds), then `rename`. `false` with the target present is Hadoop's
 * `FileAlreadyExistsException`, the temp file removed; `false` without it is an `IOException`.
 *
 * Used only for Spark's `FileContextBasedCheckpointFileManager` on a file system bound through
 * `DelegateToFileSystem`, and not on the local disk ([[LocalPublish]]). HDFS binds its own
 * `FileContext` (`Hdfs`), whose rename refuses an existing target atomically. A manager set with
 * `spark.sql.streaming.checkpointFileManagerClass` is always used as it is.
 */
private[log] object RenamePublish {

  private val DefaultManager = "FileContextBasedCheckpointFileManager"

  /** By scheme: whether its `FileContext` binding delegates to a `FileSystem`. */
  private val delegates = new ConcurrentHashMap[String, java.lang.Boolean]()

  /**
   * The file system of `file` if a write-once publish of it goes through [[publishOnce]] (with the
   * session's Hadoop settings, as the manager has them); None: through the manager.
   */
  def target(fm: CheckpointFileManager, file: Path): Option[FileSystem] = {
    val scheme = file.toUri.getScheme
    if (fm.getClass.getSimpleName != DefaultManager || scheme == null || scheme == "file") None
    // a scheme known not to delegate (HDFS) skips the session's Hadoop settings, copied per call
    else if (java.lang.Boolean.FALSE.equals(delegates.get(scheme))) None
    else
      SparkSession.getActiveSession.orElse(SparkSession.getDefaultSession).flatMap { spark =>
        try {
          val fs = file.getFileSystem(spark.sessionState.newHadoopConf())
          val delegating = delegates.computeIfAbsent(
            scheme,
            _ => AbstractFileSystem.get(fs.getUri, fs.getConf).isInstanceOf[DelegateToFileSystem]
          )
          if (delegating) Some(fs) else None
        } catch { case NonFatal(_) => None }
      }
  }

  /**
   * Writes `file` with `fn`, published by a rename the store may refuse: Hadoop's
   * `FileAlreadyExistsException` if `file` exists, before or by a racing writer, and nothing
   * changed.
   */
  def publishOnce(fs: FileSystem, file: Path)(fn: OutputStream => Unit): Unit = {
    val tmp = new Path(file.getParent, s".${file.getName}.${UUID.randomUUID()}.tmp")
    def dropTemp(): Unit =
      try fs.delete(tmp, false)
      catch { case NonFatal(_) => }
    try {
      val out = fs.create(tmp, false)
      try fn(out)
      finally out.close()
      if (!fs.rename(tmp, file)) {
        dropTemp()
        if (fs.exists(file)) {
          throw new FileAlreadyExistsException(s"$file exists: another writer published it first")
        }
        throw new IOException(s"Could not rename $tmp to $file (the store said no)")
      }
    } catch { case e: Throwable => dropTemp(); throw e }
  }
}
