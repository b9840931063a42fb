package io.batchlog.log

import java.io.FileNotFoundException
import java.nio.charset.StandardCharsets.UTF_8

import org.apache.hadoop.fs.Path
import org.json4s.{DefaultFormats, Formats}
import org.json4s.jackson.Serialization

import io.batchlog.shim.CheckpointFileManager

/**
 * A query that reads the sink: registered by the reading query's session when the query starts
 * (`ReaderRegistration` in the commit path), once per run, not once per batch.
 *
 * @param queryId
 *   the reading query's id (its checkpoint's `metadata`)
 * @param checkpoint
 *   its checkpoint (qualified)
 * @param sourceIndex
 *   the index of the source that reads this sink (`<checkpoint>/sources/<i>`)
 * @param kind
 *   `batchlog` (the `batchlog` source) or `file` (Spark's file source over the sink's path)
 * @param sink
 *   the reading query's own output, when it writes a file sink
 * @param sinceMs
 *   when it was first registered; `seenMs` when last (the reader's clock)
 */
final case class SinkReaderRecord(
    version: Int,
    queryId: String,
    checkpoint: String,
    sourceIndex: Int,
    kind: String,
    sink: Option[String],
    sinceMs: Long,
    seenMs: Long
)

/**
 * The sink's readers, one record each in `<output>/_batchlog/_readers/_<queryId>-<i>.json` (JSON:
 * the fields of [[SinkReaderRecord]]). Beside the sink's own records, hidden from Spark's file
 * index by the `_` of every name. A reader's record is replaced at each start of its query (the
 * first registration time kept); nothing removes it: `inspect` shows one not seen for longer than
 * `spark.batchlog.readers.staleAfter` as stale.
 */
object SinkReaders {
  implicit private val formats: Formats = DefaultFormats

  val Version = 1
  val DirName = "_readers"

  /** The kind of a reader through the `batchlog` source: the source's name. */
  val KindBatchlog = "batchlog"
  val KindFile = "file"

  def dir(metadataPath: Path): Path = new Path(JsonRecordFile.recordDir(metadataPath), DirName)

  def file(metadataPath: Path, queryId: String, sourceIndex: Int): Path =
    new Path(dir(metadataPath), s"_$queryId-$sourceIndex.json")

  /** Registers `reader` with the sink whose log is `metadataPath`; the record written. */
  def register(
      fm: CheckpointFileManager,
      metadataPath: Path,
      reader: SinkReaderRecord
  ): SinkReaderRecord = {
    val p = file(metadataPath, reader.queryId, reader.sourceIndex)
    val record = readFile(fm, p).fold(reader)(before => reader.copy(sinceMs = before.sinceMs))
    JsonRecordFile.publishCreatingDir(fm, p, overwrite = true)(
      _.write(Serialization.write(record).getBytes(UTF_8))
    )
    record
  }

  /** The sink's readers, by query id and source index; a record that cannot be read is skipped. */
  def list(fm: CheckpointFileManager, metadataPath: Path): Seq[SinkReaderRecord] = {
    val statuses =
      try fm.list(dir(metadataPath))
      catch { case _: FileNotFoundException => Array.empty[org.apache.hadoop.fs.FileStatus] }
    statuses.toSeq.map(_.getPath).filter(_.getName.endsWith(".json"))
      .flatMap(p => readFile(fm, p)).sortBy(r => (r.queryId, r.sourceIndex))
  }

  private def readFile(fm: CheckpointFileManager, p: Path): Option[SinkReaderRecord] =
    JsonRecordFile.readLenient[SinkReaderRecord](fm, p, "reader")
}
