package io.batchlog.log

import java.io.FileNotFoundException
import java.nio.charset.StandardCharsets.UTF_8

import org.apache.hadoop.fs.Path
import org.json4s.{DefaultFormats, Formats}
import org.json4s.jackson.Serialization

import io.batchlog.shim.CheckpointFileManager

import io.batchlog.BatchLogException
import io.batchlog.Compat
import io.batchlog.Compat._

/**
 * A small JSON record batchlog keeps beside the log in `_spark_metadata/` (the rewind intent, the
 * sink record, the writer lease). Its name is not a number, so Spark's log ignores it. Written
 * atomically through the log's `CheckpointFileManager` (readers see the old or the new record,
 * never a part); read with one `open` (a missing file is `None`, no separate existence probe).
 */
object JsonRecordFile {

  /** True for the name of one of batchlog's records (not a log file, not an index). */
  def isRecordName(name: String): Boolean = name.startsWith("batchlog-") && name.endsWith(".json")
}

class JsonRecordFile[T <: AnyRef: Manifest](val fileName: String) {
  implicit private val formats: Formats = DefaultFormats

  def path(metadataPath: Path): Path = new Path(metadataPath, fileName)

  def read(fm: CheckpointFileManager, metadataPath: Path): Option[T] = {
    val p = path(metadataPath)
    val in =
      try fm.open(p)
      catch { case _: FileNotFoundException => return None }
    val text =
      try new String(Compat.readAllBytes(in), UTF_8)
      finally in.close()
    try Some(Serialization.read[T](text))
    catch {
      case e: Exception =>
        throw new BatchLogException(
          BatchLogException.CorruptLog,
          s"batchlog's record $p cannot be read (${e.getMessage.linesIterator.firstOption
              .getOrElse(e.toString)}). Restore it from a backup or remove it: batchlog then " +
            "treats the sink as one it has not seen yet.",
          e
        )
    }
  }

  def write(fm: CheckpointFileManager, metadataPath: Path, record: T): Unit =
    LogFiles.publish(fm, path(metadataPath), overwrite = true)(
      _.write(Serialization.write(record).getBytes(UTF_8))
    )

  def delete(fm: CheckpointFileManager, metadataPath: Path): Unit = fm.delete(path(metadataPath))
}
