package io.batchlog.log

import java.io.FileNotFoundException
import java.nio.charset.StandardCharsets.UTF_8

import org.apache.hadoop.fs.{FileStatus, Path}
import org.json4s.{DefaultFormats, Formats}
import org.json4s.jackson.Serialization

import io.batchlog.shim.CheckpointFileManager

/**
 * One maintenance operation run on a sink (a rewind, cascade, takeover, adopt, repair or vacuum
 * that was not a dry run), as its history keeps it.
 *
 * @param operation
 *   `rewind`, `cascade`, `takeover`, `adopt`, `repair` or `vacuum`
 * @param timeMs
 *   when it ended (the wall clock of the process that ran it, ms since the epoch)
 * @param user
 *   who ran it: the Hadoop user of that process
 * @param host
 *   the host it ran on
 * @param applicationId
 *   the Spark application that ran it
 * @param arguments
 *   what it was asked (`toBatch`, `checkpoint`, `force`, `olderThan`, ...)
 * @param outcome
 *   `done`, or `failed: <error code>` (what it changed is then unknown: run it again)
 * @param changed
 *   what it changed, counted (`batches`, `dataFilesDeleted`, `dataBytesDeleted`, ...)
 */
final case class OperationRecord(
    version: Int,
    operation: String,
    timeMs: Long,
    durationMs: Long,
    user: String,
    host: String,
    applicationId: String,
    batchlogVersion: String,
    arguments: Map[String, String],
    outcome: String,
    changed: Map[String, Long]
)

/**
 * The operations run on a sink: one record each, written once, in
 * `<output>/_batchlog/_history/_<timeMs, 13 digits>-<operation>-<uuid>.json` (JSON: the fields of
 * [[OperationRecord]]). Beside the sink's other records, so that they outlive a deleted or repaired
 * `_spark_metadata`, and hidden from Spark's file index by the `_` of every name. Names sort by
 * time, so a listing is the history in order. A record older than the history's retention
 * (`spark.batchlog.history.retention`) is deleted when the next one is written: the directory stays
 * as small as the operations of that span, and nothing else removes a record.
 *
 * "Older" is measured by the store's clock, not the writer's: a record's age is its modification
 * time, which the store sets, against the new record's. Writers' clocks may be minutes apart (or a
 * host's clock years off): judged by its own clock, a writer running ahead would delete its peers'
 * recent records. Names carry the writer's time, so records of writers with skewed clocks may list
 * out of their true order, by that skew.
 */
object OperationLog {
  implicit private val formats: Formats = DefaultFormats

  val Version = 1
  val DirName = "_history"

  def dir(metadataPath: Path): Path = new Path(JsonRecordFile.recordDir(metadataPath), DirName)

  /** The time a record's name carries; None for a name that is not a record's. */
  def timeOfName(name: String): Option[Long] =
    if (!name.startsWith("_") || !name.endsWith(".json") || name.length < 15) None
    else scala.util.Try(name.substring(1, 14).toLong).toOption

  /**
   * Writes `record` (once: a fresh name) into the history of the sink whose log is `metadataPath`,
   * then deletes the records older than `retentionMs` before it, by the store's clock. Records
   * written meanwhile by other processes are each a name of their own: none is lost. Returns the
   * record's path.
   */
  def append(
      fm: CheckpointFileManager,
      metadataPath: Path,
      record: OperationRecord,
      retentionMs: Long
  ): Path = {
    val name = f"_${record.timeMs}%013d-${record.operation}-${java.util.UUID.randomUUID()}.json"
    val p = new Path(dir(metadataPath), name)
    JsonRecordFile.publishCreatingDir(fm, p, overwrite = false)(
      _.write(Serialization.write(record).getBytes(UTF_8))
    )
    val listed = statuses(fm, metadataPath)
    // the new record's time by the store's clock; not listed yet (never on a consistent store):
    // no retention this time
    listed.find(_.getPath.getName == name).foreach { written =>
      val cutoff = written.getModificationTime - retentionMs
      listed.filter(_.getModificationTime < cutoff).foreach(s => fm.delete(s.getPath))
    }
    p
  }

  /**
   * The sink's operations, oldest first; a record that cannot be read is skipped, with a warning.
   */
  def list(fm: CheckpointFileManager, metadataPath: Path): Seq[OperationRecord] =
    statuses(fm, metadataPath).map(_.getPath).sortBy(_.getName).flatMap(p => readFile(fm, p))

  private def statuses(fm: CheckpointFileManager, metadataPath: Path): Seq[FileStatus] =
    (try fm.list(dir(metadataPath))
    catch { case _: FileNotFoundException => Array.empty[FileStatus] })
      .toSeq.filter(s => timeOfName(s.getPath.getName).isDefined)

  private def readFile(fm: CheckpointFileManager, p: Path): Option[OperationRecord] =
    JsonRecordFile.readLenient[OperationRecord](fm, p, "history") // None: expired since listed
}
