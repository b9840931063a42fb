package io.batchlog.log

import java.io.FileNotFoundException
import java.nio.charset.StandardCharsets.UTF_8

import org.apache.hadoop.fs.{EtagSource, FileStatus, FileSystem, Path}
import org.apache.hadoop.util.functional.FutureIO
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

  /** True if `a` and `b` are statuses of the same version of a file, by their ETags. */
  def sameVersion(a: FileStatus, b: FileStatus): Boolean = (a, b) match {
    case (x: EtagSource, y: EtagSource) =>
      x.getEtag != null && x.getEtag.nonEmpty && x.getEtag == y.getEtag &&
      a.getLen == b.getLen && a.getModificationTime == b.getModificationTime
    case _ => false
  }
}

class JsonRecordFile[T <: AnyRef: Manifest](val fileName: String) {
  implicit private val formats: Formats = DefaultFormats

  def path(metadataPath: Path): Path = new Path(metadataPath, fileName)

  def read(fm: CheckpointFileManager, metadataPath: Path): Option[T] =
    readFile(fm, path(metadataPath))

  /** The record in file `p` (a missing file is `None`). */
  protected def readFile(fm: CheckpointFileManager, p: Path): Option[T] = {
    val in =
      try fm.open(p)
      catch { case _: FileNotFoundException => return None }
    parse(p, readText(in))
  }

  private def readText(in: java.io.InputStream): String =
    try new String(Compat.readAllBytes(in), UTF_8)
    finally in.close()

  private def parse(p: Path, text: String): Option[T] =
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

  def write(fm: CheckpointFileManager, metadataPath: Path, record: T): Unit =
    LogFiles.publish(fm, path(metadataPath), overwrite = true)(_.write(bytes(record)))

  protected def bytes(record: T): Array[Byte] = Serialization.write(record).getBytes(UTF_8)

  def delete(fm: CheckpointFileManager, metadataPath: Path): Unit = fm.delete(path(metadataPath))

  /**
   * Reads the record again and again (a writer's check before each commit). On a store whose file
   * statuses carry ETags (S3A and the other object stores: `fs.capability.etags.available`), at the
   * cost of one status request while it is unchanged: the status (ETag, length, modification time)
   * is compared with the one of the last read, and the file is read only when it differs. A record
   * changes only by being replaced whole ([[write]]), which gives it a new ETag. (A read through a
   * remembered status would spare even that request, but S3A's analytics stream may then serve the
   * old bytes from its cache.) Elsewhere a plain read each time. A missing record is `None`.
   */
  final class Watched(fs: FileSystem, metadataPath: Path) {
    private val p = fs.makeQualified(path(metadataPath))
    private val etags =
      try fs.hasPathCapability(p, "fs.capability.etags.available")
      catch { case _: Exception => false }
    @volatile private var last: Option[(FileStatus, Option[T])] = None

    def read(): Option[T] =
      try {
        if (!etags) parse(p, readText(fs.open(p)))
        else {
          val st = fs.getFileStatus(p)
          last match {
            case Some((seen, record)) if JsonRecordFile.sameVersion(seen, st) => record
            case _ =>
              val record =
                parse(p, readText(FutureIO.awaitFuture(fs.openFile(p).withFileStatus(st).build())))
              last = Some((st, record))
              record
          }
        }
      } catch { case _: FileNotFoundException => last = None; None }
  }
}
