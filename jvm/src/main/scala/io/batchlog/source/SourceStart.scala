package io.batchlog.source

import java.nio.charset.StandardCharsets.UTF_8

import scala.util.control.NonFatal

import org.apache.hadoop.fs.Path
import org.json4s.JsonAST.{JInt, JObject, JString, JValue}
import org.json4s.jackson.JsonMethods

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.types.{DataType, StructType}

import io.batchlog.{BatchLogException, Compat}
import io.batchlog.log.LogFiles
import io.batchlog.shim.CheckpointFileManager

/**
 * What a `batchlog` source fixes at its query's first start and keeps in the query's checkpoint, as
 * Kafka's source keeps its initial offsets: the first upstream batch to read (option
 * `startingBatch` resolved: `latest` is the batch after the sink's latest one at that start) and
 * the stream's schema (the sink's columns, without the `batchId` column of option `withBatchId`,
 * which a restart may add or drop) and format. Every later start of the query reads them back, so a
 * restart (also one that re-runs a micro-batch planned before a crash) reads exactly the batches
 * and columns the first start chose, whatever the sink became meanwhile. A changed `startingBatch`
 * option is ignored on a restart, as Kafka ignores `startingOffsets` once its checkpoint has them.
 *
 * On disk: `<checkpoint>/sources/<i>/batchlog-source.json` (the directory Spark hands the source as
 * `metadataPath`), one JSON object written once, atomically:
 * `{"version":1,"startingBatch":3,"format":"parquet","schema":{<StructType JSON>}}`. Its name is
 * not a number, so Spark's and batchlog's source-log readers (and a rewind) never take it for a log
 * file.
 */
final case class SourceStart(startingBatch: Long, schema: StructType, format: String) {

  def toJson: String = {
    val obj = JObject(
      "version" -> JInt(SourceStart.Version),
      "startingBatch" -> JInt(startingBatch),
      "format" -> JString(format),
      "schema" -> JsonMethods.parse(schema.json)
    )
    JsonMethods.compact(JsonMethods.render(obj))
  }
}

object SourceStart {
  val FileName = "batchlog-source.json"
  val Version = 1

  /** The record kept in `metadataPath` (a query's `sources/<i>`), if the query has one. */
  def read(spark: SparkSession, metadataPath: String): Option[SourceStart] = {
    val (fm, file) = locate(spark, metadataPath)
    if (!fm.exists(file)) None
    else {
      val in = fm.open(file)
      val text =
        try new String(Compat.readAllBytes(in), UTF_8)
        finally in.close()
      Some(parse(file, text))
    }
  }

  /**
   * Keeps `start` in `metadataPath`, unless a record is there already (a second start racing this
   * one): the record on disk is the one that holds.
   */
  def write(spark: SparkSession, metadataPath: String, start: SourceStart): SourceStart = {
    val (fm, file) = locate(spark, metadataPath)
    try {
      fm.mkdirs(file.getParent)
      LogFiles.publish(fm, file, overwrite = false)(_.write(start.toJson.getBytes(UTF_8)))
      start
    } catch {
      case _: org.apache.hadoop.fs.FileAlreadyExistsException =>
        read(spark, metadataPath).getOrElse(start)
    }
  }

  private def locate(spark: SparkSession, metadataPath: String): (CheckpointFileManager, Path) = {
    val dir = new Path(metadataPath)
    val fm = CheckpointFileManager.create(dir, spark.sessionState.newHadoopConf())
    (fm, new Path(dir, FileName))
  }

  private def parse(file: Path, text: String): SourceStart = {
    def bad(why: String): Nothing =
      throw BatchLogException.invalidArgument(
        "checkpointLocation",
        file.getParent.getParent.getParent,
        s"its batchlog source record $file $why; restore it from a backup, or start the query " +
          "from a new checkpoint (with option startingBatch set to the first upstream batch to read)"
      )
    val json =
      try JsonMethods.parse(text)
      catch { case NonFatal(e) => bad(s"is not JSON (${e.getMessage})") }
    def field(name: String): JValue = json \ name
    (field("version"), field("startingBatch"), field("format"), field("schema")) match {
      case (JInt(v), JInt(b), JString(f), s: JObject) if v == Version =>
        val schema =
          try DataType.fromJson(JsonMethods.compact(JsonMethods.render(s)))
          catch { case NonFatal(e) => bad(s"has no valid schema (${e.getMessage})") }
        schema match {
          case st: StructType => SourceStart(b.toLong, st, f)
          case _ => bad("has no valid schema")
        }
      case (JInt(v), _, _, _) if v != Version =>
        bad(s"is of version $v; this batchlog reads $Version")
      case _ => bad("lacks version, startingBatch, format or schema")
    }
  }
}
