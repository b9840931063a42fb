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
 * A small JSON record batchlog keeps about a sink (the rewind intent, the sink record, the writer
 * lease), in `<output>/_batchlog/` ([[RecordDir]]): beside the log, not in it, so that deleting
 * `_spark_metadata` (the usual reaction to a broken log) does not take the records along, and
 * `repair` still knows the query's compact interval and owner. Spark's file index skips every name
 * starting with `_`, so readers of the output never see them. Written atomically through the log's
 * `CheckpointFileManager` (readers see the old or the new record, never a part); read with one
 * `open` (a missing file is `None`, no separate existence probe).
 *
 * Sinks written by earlier versions keep their records in `_spark_metadata/` itself: a read looks
 * there only when the record is missing from `_batchlog/`, and the next write of a record moves it
 * (writes the new place, then removes the old), so a migrated sink costs no extra request.
 */
object JsonRecordFile extends org.apache.spark.internal.Logging {

  /**
   * How many sinks a JVM-wide note by sink path holds before it starts over: such notes only spare
   * a request, so forgetting them is safe, and a driver that writes ever new sinks for weeks must
   * not grow by one entry per sink.
   */
  val MaxRemembered = 4096

  /** The directory of batchlog's records, under the sink's output directory. */
  val RecordDir = "_batchlog"

  /**
   * What a record's name starts with in [[RecordDir]]: `_`, which Spark's file listing skips. A
   * glob read of every entry of the output (with `basePath` set to it) makes `_batchlog` a root
   * path of its own, and Spark skips only `_spark_metadata` as such; a file listed under it would
   * make Spark see conflicting partition directories (Spark's own `FileStreamSinkSuite`,
   * "partitioned writing and batch reading with 'basePath'", found it).
   */
  val HiddenPrefix = "_"

  /** `<output>/_batchlog` for the log `<output>/_spark_metadata`. */
  def recordDir(metadataPath: Path): Path = {
    // `file:/out/_spark_metadata/` (a java.io.File's URI) names the log too: its parent is `out`
    val u = metadataPath.toUri
    val meta =
      if (u.getPath == null || !u.getPath.endsWith("/") || u.getPath == "/") metadataPath
      else {
        new Path(new java.net.URI(u.getScheme, u.getAuthority, u.getPath.stripSuffix("/"), null))
      }
    new Path(meta.getParent, RecordDir)
  }

  /** True for the name of one of batchlog's records (not a log file, not an index). */
  def isRecordName(name: String): Boolean =
    name.stripPrefix(HiddenPrefix).startsWith("batchlog-") && name.endsWith(".json")

  /**
   * The JSON record of type `T` in file `p`, for records that only inform (a reader's, an
   * operation's): None if the file is missing, and None with a warning naming `what` and the file
   * if it cannot be read, so one damaged record does not hide the others.
   */
  def readLenient[T <: AnyRef: Manifest](
      fm: CheckpointFileManager,
      p: Path,
      what: String
  ): Option[T] =
    try {
      val in = fm.open(p)
      val text =
        try new String(Compat.readAllBytes(in), UTF_8)
        finally in.close()
      Some(Serialization.read[T](text)(DefaultFormats, implicitly[Manifest[T]]))
    } catch {
      case _: FileNotFoundException => None
      case scala.util.control.NonFatal(e) =>
        logWarning(s"batchlog's $what record $p cannot be read; skipped", e)
        None
    }

  /**
   * Publishes file `p` of a records' directory (`_batchlog/`, `_batchlog/_readers/`, ...), which
   * the first record written creates: one request more only then, none on the ordinary path (an
   * object store needs no directory at all). Two first writers race: the one whose publish found no
   * directory may find it there by the time it looks (the other created it), so a missing file or
   * directory is retried once, with the directory made if it is still absent.
   */
  def publishCreatingDir(fm: CheckpointFileManager, p: Path, overwrite: Boolean)(
      fn: java.io.OutputStream => Unit
  ): Unit =
    try LogFiles.publish(fm, p, overwrite)(fn)
    catch {
      case e: java.io.IOException
          if !e.isInstanceOf[org.apache.hadoop.fs.FileAlreadyExistsException] &&
            !e.isInstanceOf[java.nio.file.FileAlreadyExistsException] &&
            (e.isInstanceOf[FileNotFoundException] || !fm.exists(p.getParent)) =>
        if (!fm.exists(p.getParent)) fm.mkdirs(p.getParent)
        LogFiles.publish(fm, p, overwrite)(fn)
    }

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

  /** Where the record of the sink whose log is `metadataPath` lives: `<output>/_batchlog/`. */
  def path(metadataPath: Path): Path =
    new Path(JsonRecordFile.recordDir(metadataPath), JsonRecordFile.HiddenPrefix + fileName)

  /** Where versions before `_batchlog/` kept it: in the log directory itself. */
  def legacyPath(metadataPath: Path): Path = new Path(metadataPath, fileName)

  /** The record: from `_batchlog/`, else (a sink not written since an upgrade) the old place. */
  def read(fm: CheckpointFileManager, metadataPath: Path): Option[T] =
    readWithPath(fm, metadataPath).map(_._1)

  /** [[read]], with the file it was read from. */
  def readWithPath(fm: CheckpointFileManager, metadataPath: Path): Option[(T, Path)] =
    Seq(path(metadataPath), legacyPath(metadataPath)).iterator
      .flatMap(p => readFile(fm, p).map(_ -> p)).firstOption

  /** The record as an earlier version kept it in the log directory `dir` (or a copy of one). */
  def readIn(fm: CheckpointFileManager, dir: Path): Option[(T, Path)] = {
    val p = new Path(dir, fileName)
    readFile(fm, p).map(_ -> p)
  }

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
    try {
      val json = org.json4s.jackson.JsonMethods.parse(text)
      precheck(p, json)
      Some(json.extract[T])
    } catch {
      case e: BatchLogException => throw e
      case e: Exception =>
        throw new BatchLogException(
          BatchLogException.CorruptLog,
          s"batchlog's record $p cannot be read (${e.getMessage.linesIterator.firstOption
              .getOrElse(e.toString)}). Restore it from a backup or remove it: batchlog then " +
            "treats the sink as one it has not seen yet.",
          e
        )
    }

  /**
   * Called with the record's JSON before it is read as a `T`: a record this batchlog must not use
   * (a newer version's) is refused here, by its version, even when its other fields are not those a
   * `T` needs. Nothing by default. Fields a record does not know are ignored when read and not
   * written back.
   */
  protected def precheck(p: Path, json: org.json4s.JValue): Unit = ()

  /**
   * Replaces the record (atomically) in `_batchlog/`, creating the directory if it is missing, and
   * removes a copy in the old place (once per log and JVM: a lease written every few seconds does
   * not pay a delete each time).
   */
  def write(fm: CheckpointFileManager, metadataPath: Path, record: T): Unit = {
    publishRecordFile(fm, path(metadataPath), overwrite = true)(_.write(bytes(record)))
    val legacy = legacyPath(metadataPath)
    if (migrated.add(legacy.toString)) {
      fm.delete(legacy)
      // one entry per sink this JVM wrote: a driver writing ever new sinks starts over now and then
      // (a forgotten sink costs one delete more at its next write)
      if (migrated.size > JsonRecordFile.MaxRemembered) migrated.clear()
    }
  }

  protected def publishRecordFile(fm: CheckpointFileManager, p: Path, overwrite: Boolean)(
      fn: java.io.OutputStream => Unit
  ): Unit = JsonRecordFile.publishCreatingDir(fm, p, overwrite)(fn)

  protected def bytes(record: T): Array[Byte] = Serialization.write(record).getBytes(UTF_8)

  /**
   * Moves a record an earlier version left in `_spark_metadata/` to `_batchlog/` (a writer's first
   * batch: from then on, its per-commit read finds the record at the first try). One request when
   * there is nothing to move.
   */
  def migrate(fm: CheckpointFileManager, metadataPath: Path): Unit =
    if (!fm.exists(path(metadataPath))) readFile(fm, legacyPath(metadataPath)).foreach { r =>
      write(fm, metadataPath, r)
      fm.delete(legacyPath(metadataPath))
    }

  /** Old-place paths this JVM has removed after writing the new place. */
  private val migrated = java.util.concurrent.ConcurrentHashMap.newKeySet[String]()

  /** Removes the record, in both places. */
  def delete(fm: CheckpointFileManager, metadataPath: Path): Unit = {
    fm.delete(path(metadataPath))
    fm.delete(legacyPath(metadataPath))
  }

  /**
   * Reads the record again and again (a writer's check before each commit). On a store whose file
   * statuses carry ETags (S3A and the other object stores: `fs.capability.etags.available`), at the
   * cost of one status request while it is unchanged: the status (ETag, length, modification time)
   * is compared with the one of the last read, and the file is read only when it differs. A record
   * changes only by being replaced whole ([[write]]), which gives it a new ETag. (A read through a
   * remembered status would spare even that request, but S3A's analytics stream may then serve the
   * old bytes from its cache.) Elsewhere a plain read each time. A record missing from `_batchlog/`
   * is looked for in the old place (a sink not migrated yet); missing there too, `None`.
   */
  final class Watched(fs: FileSystem, metadataPath: Path) {
    private val p = fs.makeQualified(path(metadataPath))
    private val legacy = fs.makeQualified(legacyPath(metadataPath))

    def read(): Option[T] = readNew().getOrElse {
      try parse(legacy, readText(fs.open(legacy)))
      catch { case _: FileNotFoundException => None }
    }

    private val etags =
      try fs.hasPathCapability(p, "fs.capability.etags.available")
      catch { case _: Exception => false }
    @volatile private var last: Option[(FileStatus, Option[T])] = None

    /** The record in `_batchlog/`; None if it is missing there. */
    private def readNew(): Option[Option[T]] =
      try {
        if (!etags) Some(parse(p, readText(fs.open(p))))
        else {
          val st = fs.getFileStatus(p)
          last match {
            case Some((seen, record)) if JsonRecordFile.sameVersion(seen, st) => Some(record)
            case _ =>
              val record =
                parse(p, readText(FutureIO.awaitFuture(fs.openFile(p).withFileStatus(st).build())))
              last = Some((st, record))
              Some(record)
          }
        }
      } catch { case _: FileNotFoundException => last = None; None }
  }
}
