package io.batchlog.source

import scala.collection.mutable

import org.apache.hadoop.fs.Path

import org.apache.spark.rdd.RDD
import org.apache.spark.sql.{DataFrame, Row, SparkSession, SQLContext}
import org.apache.spark.sql.execution.datasources.{HadoopFsRelation, LogicalRelation}
import org.apache.spark.sql.functions.col
import org.apache.spark.sql.sources.{BaseRelation, TableScan}
import org.apache.spark.sql.types.StructType

import io.batchlog.BatchLogException
import io.batchlog.log.{BatchTaggedFileStreamSinkLog, SinkLogEntry}
import io.batchlog.ops.SinkReader

/**
 * What the `batchlog` source reads, as Spark relations: the files of chosen batches (a
 * `HadoopFsRelation`: Spark's own file scan) and the log itself (one row per live entry).
 */
object SinkRelations {

  /** A sink opened for reading: its output directory and its log. */
  final class Sink(val spark: SparkSession, path: String) {
    val metadataPath: Path = BatchTaggedFileStreamSinkLog.metadataPathOf(spark, path)
    val root: Path = metadataPath.getParent
    @volatile private var opened = false
    lazy val log: BatchTaggedFileStreamSinkLog = {
      val l = new BatchTaggedFileStreamSinkLog(spark, metadataPath.toString)
      opened = true
      l
    }

    /** The compact ids whose index or index head the log holds (none if it was never opened). */
    private[batchlog] def cachedIndexIds: Seq[Long] =
      if (opened) (log.cachedIndexIds ++ log.cachedHeadIds).distinct else Nil

    /**
     * Drops what the log cached (its compact indexes), without opening a log never opened (that
     * would create `_spark_metadata`). The sink stays usable: a later read reads them again.
     */
    def release(): Unit = if (opened) log.dropCachedIndexes()

    /**
     * The live entries of the batches in `range`, read through the log's index (only their runs of
     * the compact file and their batch files). A restricted range refuses untagged entries: which
     * batch wrote them is unknown, so they could be in or out of it; unless not `strict`, where
     * they are left out (a stream starts at or above the sink's horizon, below which they are).
     */
    def entries(range: BatchRange, what: String, strict: Boolean = true): Seq[SinkLogEntry] = {
      val out = mutable.ArrayBuffer.empty[SinkLogEntry]
      var untagged = 0L
      val (from, to) = (range.from.getOrElse(0L), range.to.getOrElse(Long.MaxValue))
      log.foreachLiveEntryWithin(from, to)(_.forall(range.contains)) { e =>
        if (e.batchId.isEmpty) untagged += 1
        if (e.batchId.isDefined || range.isAll) out += e
      }
      if (untagged > 0 && !range.isAll && strict) {
        throw BatchLogException.invalidArgument(
          what,
          range.toString,
          s"$untagged live files of $root have no provable batch (written by plain Spark); run " +
            s"`python -m batchlog adopt $root` to tag what can be proven, or read every batch"
        )
      }
      out.toSeq
    }

    /** The sink's retention watermark ([[BatchTaggedFileStreamSinkLog.retainedFrom]]). */
    def retainedFrom(): Long = log.retainedFrom()

    /** Some live file of the sink (to read a schema and format from), if it has any. */
    def sampleEntry(): Option[SinkLogEntry] = log.firstLiveEntry()

    /**
     * The files of the newest batch of `range` that wrote any (the sink's current schema), looked
     * for in its newest [[SchemaLookBack]] batches, read without loading the log; Nil if none.
     */
    def newestFiles(range: BatchRange): Seq[SinkLogEntry] = {
      val latest = log.getLatestBatchId().getOrElse(-1L)
      val top = range.to.fold(latest)(math.min(_, latest))
      val bottom = math.max(range.from.getOrElse(0L), top - SchemaLookBack + 1)
      (top to bottom by -1L).iterator
        .map(b => entries(BatchRange(Some(b), Some(b)), SourceOptions.Batches, strict = false))
        .find(_.nonEmpty).getOrElse(Nil)
    }
  }

  /** How many batches back [[Sink.newestFiles]] looks for one that wrote files. */
  val SchemaLookBack = 10

  /** Formats whose schema Spark infers by reading every file (parquet, orc: one footer). */
  private val ScannedForSchema = Set("json", "csv")

  /**
   * The schema and format of a batch read of `range` (`chosen`: its entries, read only if needed):
   * the user's schema, or inferred as Spark infers a plain read's. Parquet and orc read one file's
   * footer: here one of the newest batch of the range that wrote files, the sink's current schema,
   * with no full log load. Json and csv read every chosen file, as they must: a column null in
   * every row of a batch is absent from its json files.
   */
  def batchSchema(
      sink: Sink,
      range: BatchRange,
      chosen: => Seq[SinkLogEntry],
      opts: SourceOptions.Parsed,
      userSchema: Option[StructType]
  ): (StructType, String) = {
    val newest = sink.newestFiles(range)
    val format = formatOf(sink, newest, opts)
    val sample = if (userSchema.isEmpty && ScannedForSchema(format)) chosen else newest
    schemaOf(sink, sample, opts, userSchema)
  }

  /**
   * The sink's format: the option's, or told from the names of `sample` (files of the sink; if
   * none, of its first live file).
   */
  def formatOf(sink: Sink, sample: Seq[SinkLogEntry], opts: SourceOptions.Parsed): String = {
    lazy val files = if (sample.nonEmpty) sample else sink.sampleEntry().toSeq
    opts.get(SourceOptions.Format).getOrElse(
      files.headOption.flatMap(e => SourceOptions.formatOf(fileName(e))).getOrElse(
        throw BatchLogException.invalidArgument(
          SourceOptions.Format,
          files.headOption.map(fileName).getOrElse("(no data file)"),
          s"the format of ${sink.root} cannot be told from its data files' names; give it: " +
            "option(\"format\", \"parquet\")"
        )
      )
    )
  }

  /**
   * The schema of the sink's rows (data columns, then partition columns) and its format, read from
   * `sample` (files of the sink) as `spark.read.format(f).load(files)` would infer them, or the
   * user's schema.
   */
  def schemaOf(
      sink: Sink,
      sample: Seq[SinkLogEntry],
      opts: SourceOptions.Parsed,
      userSchema: Option[StructType]
  ): (StructType, String) = {
    val files = if (sample.nonEmpty) sample else sink.sampleEntry().toSeq
    val format = formatOf(sink, files, opts)
    val schema = userSchema.getOrElse {
      if (files.isEmpty) {
        throw BatchLogException.invalidArgument(
          SourceOptions.Path,
          sink.root,
          "the sink has no data file to read a schema from yet; give one: .schema(...)"
        )
      }
      val index = new SinkFileIndex(
        sink.spark,
        sink.root,
        files,
        opts.formatOptions,
        None,
        withBatchId = false
      )
      val statuses = index.listFiles(Nil, Nil).flatMap(_.files.map(_.fileStatus))
      val data = SourceOptions.fileFormat(format)
        .inferSchema(sink.spark, opts.formatOptions, statuses).getOrElse(
          throw BatchLogException.invalidArgument(
            SourceOptions.Path,
            sink.root,
            s"Spark could not read a $format schema from its files; give one: .schema(...)"
          )
        )
      val partitions = index.partitionSchema.filterNot(p => data.fieldNames.contains(p.name))
      StructType(data.fields ++ partitions)
    }
    (schema, format)
  }

  /**
   * The files of `entries` as a relation planned by Spark's file scan. `schema` is the sink's (data
   * and partition columns, no `batchId`); with `withBatchId` a `batchId` partition column follows.
   */
  def files(
      sink: Sink,
      entries: Seq[SinkLogEntry],
      schema: StructType,
      format: String,
      opts: SourceOptions.Parsed,
      withBatchId: Boolean
  ): HadoopFsRelation = {
    val formatOptions = opts.formatOptions
    val index =
      new SinkFileIndex(sink.spark, sink.root, entries, formatOptions, Some(schema), withBatchId)
    val partitionNames = index.partitionSchema.fieldNames.toSet
    val data = StructType(schema.fields.filterNot(f => partitionNames(f.name)))
    HadoopFsRelation(
      index,
      index.partitionSchema,
      data,
      None,
      SourceOptions.fileFormat(format),
      formatOptions
    )(sink.spark)
  }

  /**
   * The sink's columns of a schema: without the `batchId` column the source adds itself with
   * `withBatchId` (any case: Spark resolves columns case-insensitively); without that option every
   * column is the sink's, `batchId` too.
   */
  def withoutBatchId(schema: StructType, opts: SourceOptions.Parsed): StructType =
    if (!opts.flag(SourceOptions.WithBatchId)) schema
    else StructType(schema.fields.filterNot(_.name.equalsIgnoreCase(SourceOptions.BatchIdColumn)))

  /**
   * The sink's columns, then `batchId` if the options ask for it. A sink column of that name (any
   * case: a data or partition column) would be hidden by it, so it is refused, naming the way out.
   */
  def withBatchIdIfAsked(
      sinkColumns: StructType,
      opts: SourceOptions.Parsed,
      root: Path
  ): StructType =
    if (!opts.flag(SourceOptions.WithBatchId)) sinkColumns
    else {
      sinkColumns.fields.find(_.name.equalsIgnoreCase(SourceOptions.BatchIdColumn)).foreach { f =>
        throw BatchLogException.invalidArgument(
          SourceOptions.WithBatchId,
          "true",
          s"the rows of $root have a column named '${f.name}', which the ${SourceOptions.BatchIdColumn} " +
            s"column this option adds would hide; read without ${SourceOptions.WithBatchId} (the " +
            "log as a table, option log=true, tells each file's batch), or rename the column " +
            "upstream"
        )
      }
      sinkColumns.add(SourceOptions.BatchIdColumn, "long")
    }

  private def fileName(e: SinkLogEntry): String = e.path.substring(e.path.lastIndexOf('/') + 1)

  /** The log as a table: one row per live entry of `range`, with its `batchId` (null: untagged). */
  final class LogRelation(sink: Sink, range: BatchRange) extends BaseRelation with TableScan {
    private lazy val frame: DataFrame = {
      val all = new SinkReader(sink.spark, sink.root.toString).entries()
      val b = col(SourceOptions.BatchIdColumn)
      (range.from.map(b >= _).toSeq ++ range.to.map(b <= _)).foldLeft(all)(_ where _)
    }
    override def sqlContext: SQLContext = sink.spark.sqlContext
    override def schema: StructType = frame.schema
    override def buildScan(): RDD[Row] = frame.rdd
  }

  /** A plan over `relation`, for the table functions and the streaming source. */
  def plan(relation: BaseRelation, isStreaming: Boolean = false): LogicalRelation =
    LogicalRelation(relation, isStreaming)
}
