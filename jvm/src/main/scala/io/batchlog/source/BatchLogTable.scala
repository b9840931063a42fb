package io.batchlog.source

import org.apache.spark.sql.{SparkSession, SQLContext}
import org.apache.spark.sql.connector.catalog.{SupportsRead, Table, TableCapability}
import org.apache.spark.sql.connector.read.{ScanBuilder, V1Scan}
import org.apache.spark.sql.execution.datasources.PartitioningAwareFileIndex
import org.apache.spark.sql.execution.datasources.v2.csv.CSVScanBuilder
import org.apache.spark.sql.execution.datasources.v2.json.JsonScanBuilder
import org.apache.spark.sql.execution.datasources.v2.orc.OrcScanBuilder
import org.apache.spark.sql.execution.datasources.v2.parquet.ParquetScanBuilder
import org.apache.spark.sql.execution.datasources.v2.text.TextScanBuilder
import org.apache.spark.sql.sources.{BaseRelation, TableScan}
import org.apache.spark.sql.types.StructType
import org.apache.spark.sql.util.CaseInsensitiveStringMap

import io.batchlog.BatchLogException

/**
 * A sink read by batch, as a DataSource V2 table: what `spark.read.format("batchlog")` resolves to.
 *
 * The sink's rows are scanned by Spark's own V2 file scan of the sink's format (`ParquetScan`,
 * `OrcScan`, `JsonScan`, `CSVScan`, `TextScan`) over a [[SinkFileIndex]] of the chosen batches'
 * files: column pruning, filter pushdown (to the reader and, on partition columns and `batchId`, to
 * the file listing) and vectorized readers are Spark's. The log itself (`log=true`) is a small V1
 * scan of its entries.
 *
 * The log is read when the scan is built, not when the table is made: each query that reads the
 * table plans with the log as it is then (as `spark.read.parquet(sink)` lists the sink anew).
 *
 * Streams are not served here (`BATCH_READ` only): `readStream.format("batchlog")` falls back to
 * the V1 [[BatchLogSource]], as Spark's own file sources stream through V1.
 *
 * @param tableSchema
 *   the sink's columns (data, then partition columns), then `batchId` with `withBatchId`; or the
 *   log's columns with `log=true`
 */
final class BatchLogTable(
    spark: SparkSession,
    options: Map[String, String],
    tableSchema: StructType
) extends Table
    with SupportsRead {

  private val opts = new SourceOptions.Parsed(options)

  override def name(): String = s"${BatchLogDataSource.Name}.`${opts.path}`"

  override def schema(): StructType = tableSchema

  override def capabilities(): java.util.Set[TableCapability] =
    java.util.EnumSet.of(TableCapability.BATCH_READ)

  override def newScanBuilder(scanOptions: CaseInsensitiveStringMap): ScanBuilder =
    BatchLogException.unchanged {
      val sink = new SinkRelations.Sink(spark, opts.path)
      if (opts.flag(SourceOptions.Log)) {
        val relation = new SinkRelations.LogRelation(sink, opts.range)
        () => new BatchLogTable.LogScan(relation)
      } else {
        val entries = sink.entries(opts.range, opts.rangeKey)
        val format = SinkRelations.formatOf(sink, entries, opts)
        val columns = SinkRelations.withoutBatchId(tableSchema, opts)
        val index = new SinkFileIndex(
          spark,
          sink.root,
          entries,
          opts.formatOptions,
          Some(columns),
          opts.flag(SourceOptions.WithBatchId)
        )
        val partitionNames = index.partitionSchema.fieldNames.toSet
        val data = StructType(columns.fields.filterNot(f => partitionNames(f.name)))
        BatchLogTable.fileScanBuilder(format, spark, index, tableSchema, data, opts.formatOptions)
      }
    }
}

object BatchLogTable {

  /** Spark's V2 scan builder of `format` over `index`: the scan of a plain path's V2 read. */
  def fileScanBuilder(
      format: String,
      spark: SparkSession,
      index: PartitioningAwareFileIndex,
      schema: StructType,
      dataSchema: StructType,
      formatOptions: Map[String, String]
  ): ScanBuilder = {
    val options = new java.util.HashMap[String, String]()
    formatOptions.foreach { case (k, v) => options.put(k, v) }
    val o = new CaseInsensitiveStringMap(options)
    format.toLowerCase(java.util.Locale.ROOT) match {
      case "parquet" => ParquetScanBuilder(spark, index, schema, dataSchema, o)
      case "orc" => OrcScanBuilder(spark, index, schema, dataSchema, o)
      case "json" => JsonScanBuilder(spark, index, schema, dataSchema, o)
      case "csv" => CSVScanBuilder(spark, index, schema, dataSchema, o)
      case "text" => TextScanBuilder(spark, index, schema, dataSchema, o)
      case other => throw SourceOptions.unknownFormat(other)
    }
  }

  /** The log as a table: a V1 scan of its entries inside the V2 plan. */
  final private class LogScan(relation: SinkRelations.LogRelation) extends V1Scan {
    override def readSchema(): StructType = relation.schema
    override def toV1TableScan[T <: BaseRelation with TableScan](context: SQLContext): T =
      relation.asInstanceOf[T]
  }
}
