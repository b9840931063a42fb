package io.batchlog.ops

import java.nio.charset.StandardCharsets.UTF_8

import org.apache.hadoop.fs.Path
import org.json4s.{DefaultFormats, Formats}
import org.json4s.jackson.Serialization

import org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager

/**
 * The record a rewind writes into the sink's `_spark_metadata/` before it changes anything, and
 * removes as its last step. While it exists a re-run of the same rewind resumes and finishes the
 * job, any other rewind is refused, and [[io.batchlog.BatchTaggedCommitProtocol]] refuses to commit
 * to the sink. Its name is not a number, so Spark's log ignores it.
 */
final case class RewindIntent(toBatch: Long, sink: String, checkpoint: String, startedAtMs: Long)

object RewindIntent {
  val FileName = "batchlog-rewind.json"
  implicit private val formats: Formats = DefaultFormats

  def path(metadataPath: Path): Path = new Path(metadataPath, FileName)

  def read(fm: CheckpointFileManager, metadataPath: Path): Option[RewindIntent] = {
    val p = path(metadataPath)
    if (!fm.exists(p)) None
    else {
      val in = fm.open(p)
      try Some(Serialization.read[RewindIntent](new String(in.readAllBytes(), UTF_8)))
      finally in.close()
    }
  }

  def write(fm: CheckpointFileManager, metadataPath: Path, intent: RewindIntent): Unit = {
    val out = fm.createAtomic(path(metadataPath), overwriteIfPossible = true)
    try {
      out.write(Serialization.write(intent).getBytes(UTF_8))
      out.close()
    } catch { case e: Throwable => out.cancel(); throw e }
  }

  def delete(fm: CheckpointFileManager, metadataPath: Path): Unit = fm.delete(path(metadataPath))
}
