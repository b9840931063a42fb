package io.batchlog.source

import org.apache.spark.sql.SQLContext
import org.apache.spark.sql.execution.streaming.Source
import org.apache.spark.sql.sources.{
  BaseRelation,
  DataSourceRegister,
  RelationProvider,
  SchemaRelationProvider,
  StreamSourceProvider
}
import org.apache.spark.sql.types.StructType

import io.batchlog.{BatchLogException, BuildInfo}

/**
 * The `batchlog` data source, found by Spark's service loader when the jar is on the class path:
 *
 * {{{
 *   spark.read.format("batchlog").option("batches", "41-45").load("/data/out")
 *   spark.read.format("batchlog").option("asOfBatch", 40).load("/data/out")
 *   spark.read.format("batchlog").option("log", "true").load("/data/out")   // the log as a table
 *   spark.readStream.format("batchlog").option("maxBatchesPerTrigger", 5).load("/data/out")
 *   CREATE TEMPORARY VIEW v USING batchlog OPTIONS (path '/data/out', asOfBatch '40')
 * }}}
 *
 * Reads of the sink's rows are planned by Spark's own file scan (`HadoopFsRelation` over
 * [[SinkFileIndex]]), the scan `spark.read.parquet(sink)` plans: column pruning, filter pushdown,
 * partition pruning and vectorized readers work as for the plain path, over the files of the chosen
 * batches only. The format and schema come from the sink's files; options are in [[SourceOptions]].
 */
class BatchLogDataSource
    extends DataSourceRegister
    with RelationProvider
    with SchemaRelationProvider
    with StreamSourceProvider {

  override def shortName(): String = BatchLogDataSource.Name

  override def createRelation(
      sqlContext: SQLContext,
      parameters: Map[String, String]
  ): BaseRelation =
    relation(sqlContext, parameters, None)

  override def createRelation(
      sqlContext: SQLContext,
      parameters: Map[String, String],
      schema: StructType
  ): BaseRelation = relation(sqlContext, parameters, Some(schema))

  private def relation(
      sqlContext: SQLContext,
      parameters: Map[String, String],
      userSchema: Option[StructType]
  ): BaseRelation = BatchLogException.unchanged {
    BuildInfo.requireMatchingSpark()
    val opts = new SourceOptions.Parsed(parameters)
    val sink = new SinkRelations.Sink(sqlContext.sparkSession, opts.path)
    val range = opts.range
    if (opts.flag(SourceOptions.Log)) new SinkRelations.LogRelation(sink, range)
    else {
      val entries = sink.entries(
        range,
        if (opts.get(SourceOptions.AsOfBatch).isDefined) {
          SourceOptions.AsOfBatch
        } else SourceOptions.Batches
      )
      val (schema, format) =
        SinkRelations.schemaOf(sink, entries, opts, userSchema.map(SinkRelations.withoutBatchId))
      SinkRelations.files(sink, entries, schema, format, opts, opts.flag(SourceOptions.WithBatchId))
    }
  }

  override def sourceSchema(
      sqlContext: SQLContext,
      schema: Option[StructType],
      providerName: String,
      parameters: Map[String, String]
  ): (String, StructType) = {
    val (s, _) = streamSchema(sqlContext, schema, parameters)
    (shortName(), s)
  }

  override def createSource(
      sqlContext: SQLContext,
      metadataPath: String,
      schema: Option[StructType],
      providerName: String,
      parameters: Map[String, String]
  ): Source = {
    val (s, format) = streamSchema(sqlContext, schema, parameters)
    val opts = new SourceOptions.Parsed(parameters)
    val spark = sqlContext.sparkSession
    new BatchLogSource(spark, new SinkRelations.Sink(spark, opts.path), opts, s, format)
  }

  /**
   * The stream's schema: the user's, or the one of the latest batch that wrote files (the sink's
   * current schema), read without loading the log; `batchId` last with `withBatchId`.
   */
  private def streamSchema(
      sqlContext: SQLContext,
      userSchema: Option[StructType],
      parameters: Map[String, String]
  ): (StructType, String) = BatchLogException.unchanged {
    BuildInfo.requireMatchingSpark()
    val opts = new SourceOptions.Parsed(parameters)
    if (
      opts.get(SourceOptions.Batches).isDefined || opts.get(SourceOptions.AsOfBatch).isDefined ||
      opts.flag(SourceOptions.Log)
    ) {
      throw BatchLogException.invalidArgument(
        opts.get(SourceOptions.Batches).map(_ => SourceOptions.Batches)
          .orElse(opts.get(SourceOptions.AsOfBatch).map(_ => SourceOptions.AsOfBatch))
          .getOrElse(SourceOptions.Log),
        parameters.find(_._1.equalsIgnoreCase(SourceOptions.Log)).map(_._2).getOrElse("set"),
        "it is an option of batch reads; a stream reads every batch from startingBatch on"
      )
    }
    val sink = new SinkRelations.Sink(sqlContext.sparkSession, opts.path)
    val latest = sink.log.getLatestBatchId().getOrElse(-1L)
    val sample = (latest to math.max(0L, latest - 9) by -1L).iterator
      .map(b => sink.entries(BatchRange(Some(b), Some(b)), SourceOptions.Batches, strict = false))
      .find(_.nonEmpty).getOrElse(Nil)
    val (schema, format) =
      SinkRelations.schemaOf(sink, sample, opts, userSchema.map(SinkRelations.withoutBatchId))
    val full =
      if (!opts.flag(SourceOptions.WithBatchId)) schema
      else schema.add(SourceOptions.BatchIdColumn, "long")
    (full, format)
  }
}

object BatchLogDataSource {

  /** The name of the data source: `format("batchlog")`, `USING batchlog`. */
  val Name = "batchlog"
}
