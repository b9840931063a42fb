package io.batchlog.source

import java.util.Locale

import org.apache.spark.sql.execution.datasources.FileFormat
import org.apache.spark.sql.execution.datasources.csv.CSVFileFormat
import org.apache.spark.sql.execution.datasources.json.JsonFileFormat
import org.apache.spark.sql.execution.datasources.orc.OrcFileFormat
import org.apache.spark.sql.execution.datasources.parquet.ParquetFileFormat
import org.apache.spark.sql.execution.datasources.text.TextFileFormat

import io.batchlog.BatchLogException

/**
 * The options of the `batchlog` data source, defined once. Every other option is passed to the
 * sink's file format as given (`mergeSchema`, `header`, ...), as `spark.read.format(f)` would.
 *
 * Batch reads: `batches` (`"41-45"`, `"41"`, `"41-"`, `"-45"`; inclusive) or `asOfBatch` (`"40"`:
 * the sink as it was after batch 40 committed, i.e. `"-40"`); `withBatchId` adds a `batchId` column
 * (a partition column: filters on it prune files; a sink column of that name, any case, is refused,
 * not hidden); `log` reads the log itself, one row per live entry. Streaming reads: `startingBatch`
 * (`earliest`, `latest` or a batch id; resolved at the query's first start and kept in its
 * checkpoint, [[SourceStart]]), and `maxBatchesPerTrigger` / `maxFilesPerTrigger` (whole upstream
 * batches are admitted until the next would pass the limit; at least one per trigger). `format`
 * overrides the format read from the data files' names.
 */
object SourceOptions {

  val Path = "path"
  val Batches = "batches"
  val AsOfBatch = "asOfBatch"
  val WithBatchId = "withBatchId"
  val Log = "log"
  val Format = "format"
  val StartingBatch = "startingBatch"
  val MaxBatchesPerTrigger = "maxBatchesPerTrigger"
  val MaxFilesPerTrigger = "maxFilesPerTrigger"

  /** The column `withBatchId` adds, and that the log table has: the log's own field name. */
  val BatchIdColumn: String = io.batchlog.log.LogFormat.BatchIdField

  /** batchlog's own options: not passed on to the file format. */
  val Own: Set[String] = Set(
    Path,
    Batches,
    AsOfBatch,
    WithBatchId,
    Log,
    Format,
    StartingBatch,
    MaxBatchesPerTrigger,
    MaxFilesPerTrigger
  ).map(_.toLowerCase(Locale.ROOT))

  /** A case-insensitive view of a data source's options, as Spark's own sources read them. */
  final class Parsed(raw: Map[String, String]) {
    private val lower = raw.map { case (k, v) => k.toLowerCase(Locale.ROOT) -> v }

    def get(key: String): Option[String] = lower.get(key.toLowerCase(Locale.ROOT))

    def path: String = get(Path).getOrElse(
      throw BatchLogException.invalidArgument(
        Path,
        "(none)",
        "give the sink's output directory: load(\"/data/out\") or OPTIONS (path '/data/out')"
      )
    )

    def flag(key: String): Boolean = get(key).exists { v =>
      v.toLowerCase(Locale.ROOT) match {
        case "true" => true
        case "false" => false
        case _ => throw BatchLogException.invalidArgument(key, v, "it must be true or false")
      }
    }

    def long(key: String, min: Long): Option[Long] = get(key).map { v =>
      val n =
        try v.trim.toLong
        catch {
          case _: NumberFormatException =>
            throw BatchLogException.invalidArgument(key, v, "it must be a whole number")
        }
      if (n < min) throw BatchLogException.invalidArgument(key, v, s"it must be >= $min")
      n
    }

    /** The batch range of a batch read: `batches` or `asOfBatch`, not both; none: every batch. */
    def range: BatchRange = (get(Batches), get(AsOfBatch)) match {
      case (Some(_), Some(_)) =>
        throw BatchLogException.invalidArgument(
          AsOfBatch,
          get(AsOfBatch).get,
          s"give either $Batches or $AsOfBatch, not both"
        )
      case (Some(b), None) => BatchRange.parse(Batches, b)
      case (None, Some(_)) => BatchRange(None, long(AsOfBatch, 0))
      case (None, None) => BatchRange.All
    }

    /** The option the batch range was given with, to name in errors. */
    def rangeKey: String = if (get(AsOfBatch).isDefined) AsOfBatch else Batches

    /** The options handed to the file format: everything but batchlog's own. */
    def formatOptions: Map[String, String] =
      raw.filter { case (k, _) => !Own(k.toLowerCase(Locale.ROOT)) }
  }

  /**
   * The file format of a sink, from the name of one of its data files (Spark names them
   * `part-...<ext>[.<codec>]`): `parquet`, `orc`, `json`, `csv`, `txt` (text).
   */
  def formatOf(fileName: String): Option[String] = {
    val parts = fileName.toLowerCase(Locale.ROOT).split('.').reverse.toList
    parts.dropWhile(Codecs).headOption.collect {
      case "parquet" => "parquet"
      case "orc" => "orc"
      case "json" => "json"
      case "csv" => "csv"
      case "txt" => "text"
    }
  }

  private val Codecs = Set("gz", "bz2", "deflate", "lz4", "snappy", "zst", "zstd", "br", "lzo")

  /** Spark's V1 file format for a format name: the one `spark.read.format(name)` plans with. */
  def fileFormat(name: String): FileFormat = name.toLowerCase(Locale.ROOT) match {
    case "parquet" => new ParquetFileFormat
    case "orc" => new OrcFileFormat
    case "json" => new JsonFileFormat
    case "csv" => new CSVFileFormat
    case "text" => new TextFileFormat
    case other => throw unknownFormat(other)
  }

  /** The error for a format batchlog does not read. */
  def unknownFormat(name: String): BatchLogException =
    BatchLogException.invalidArgument(
      Format,
      name,
      "batchlog reads the formats of Spark's file sink: parquet, orc, json, csv, text"
    )
}

/** Batches `from` to `to`, both inclusive; None: open. */
final case class BatchRange(from: Option[Long], to: Option[Long]) {
  def contains(b: Long): Boolean = from.forall(b >= _) && to.forall(b <= _)
  def isAll: Boolean = from.isEmpty && to.isEmpty
  override def toString: String = s"${from.getOrElse("")}-${to.getOrElse("")}"
}

object BatchRange {
  val All: BatchRange = BatchRange(None, None)

  private val Form = """\s*(\d*)\s*(-?)\s*(\d*)\s*""".r

  /** `"41-45"`, `"41"`, `"41-"`, `"-45"`. */
  def parse(key: String, s: String): BatchRange = s match {
    case Form(a, dash, b) if a.nonEmpty || b.nonEmpty =>
      def n(x: String) = if (x.isEmpty) None else Some(x.toLong)
      val r = if (dash.isEmpty) { if (b.nonEmpty) bad(key, s); BatchRange(n(a), n(a)) }
      else BatchRange(n(a), n(b))
      for (f <- r.from; t <- r.to if f > t) {
        throw BatchLogException.invalidArgument(key, s, s"its first batch $f is after its last $t")
      }
      r
    case _ => bad(key, s)
  }

  private def bad(key: String, s: String): Nothing =
    throw BatchLogException.invalidArgument(
      key,
      s,
      "write a batch range as 41-45 (inclusive), 41, 41- (from 41 on) or -45 (up to 45)"
    )
}
