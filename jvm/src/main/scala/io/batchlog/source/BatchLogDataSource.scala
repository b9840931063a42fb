package io.batchlog.source

import org.apache.spark.sql.{SparkSession, SQLContext}
import org.apache.spark.sql.connector.catalog.{Table, TableProvider}
import org.apache.spark.sql.connector.expressions.Transform
import org.apache.spark.sql.execution.streaming.Source
import org.apache.spark.sql.sources.{
  BaseRelation,
  DataSourceRegister,
  RelationProvider,
  SchemaRelationProvider,
  StreamSourceProvider
}
import org.apache.spark.sql.types.StructType
import org.apache.spark.sql.util.CaseInsensitiveStringMap

import io.batchlog.{BatchLogConf, BatchLogException, BuildInfo}
import io.batchlog.sql.SqlErrors

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
 * It is a DataSource V2 `TableProvider`: `spark.read.format("batchlog")` resolves to a
 * [[BatchLogTable]], whose rows are scanned by Spark's own V2 file scan of the sink's format over
 * [[SinkFileIndex]]: column pruning, filter pushdown, partition pruning and vectorized readers work
 * as for the plain path, over the files of the chosen batches only. The format and schema come from
 * the sink's files; options are in [[SourceOptions]].
 *
 * Where Spark plans through V1 it is a V1 provider too, on the same file index: SQL's `CREATE
 * TEMPORARY VIEW ... USING batchlog` (a `HadoopFsRelation`: Spark's V1 file scan), `readStream` (a
 * V1 [[BatchLogSource]]: Spark's file sources stream through V1, and a V2 table without streaming
 * capabilities falls back to it), and any read with `batchlog` in
 * `spark.sql.sources.useV1SourceList`.
 */
class BatchLogDataSource
    extends TableProvider
    with DataSourceRegister
    with RelationProvider
    with SchemaRelationProvider
    with StreamSourceProvider
    with org.apache.spark.internal.Logging {

  override def shortName(): String = BatchLogDataSource.Name

  override def inferSchema(options: CaseInsensitiveStringMap): StructType =
    BatchLogDataSource.refusing {
      BuildInfo.requireMatchingSpark()
      val opts = new SourceOptions.Parsed(BatchLogDataSource.toScala(options))
      val sink = new SinkRelations.Sink(SparkSession.active, opts.path)
      if (opts.flag(SourceOptions.Log)) new SinkRelations.LogRelation(sink, opts.range).schema
      else {
        val (columns, _) =
          SinkRelations.batchSchema(
            sink,
            opts.range,
            sink.entries(opts.range, opts.rangeKey),
            opts,
            None
          )
        SinkRelations.withBatchIdIfAsked(columns, opts, sink.root)
      }
    }

  override def supportsExternalMetadata(): Boolean = true

  override def getTable(
      schema: StructType,
      partitioning: Array[Transform],
      properties: java.util.Map[String, String]
  ): Table = BatchLogDataSource.refusing {
    BuildInfo.requireMatchingSpark()
    val options = BatchLogDataSource.toScala(properties)
    val opts = new SourceOptions.Parsed(options)
    val spark = SparkSession.active
    // a path that is no sink and a bad range are refused here, at load(); the log is read when a
    // scan is built (the format with it); the schema is the one given or inferred
    val sink = new SinkRelations.Sink(spark, opts.path)
    val range = opts.range
    val tableSchema =
      if (opts.flag(SourceOptions.Log)) new SinkRelations.LogRelation(sink, range).schema
      else SinkRelations.withBatchIdIfAsked(
        SinkRelations.withoutBatchId(schema, opts),
        opts,
        sink.root
      )
    new BatchLogTable(spark, options, tableSchema)
  }

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
  ): BaseRelation = BatchLogDataSource.refusing {
    BuildInfo.requireMatchingSpark()
    val opts = new SourceOptions.Parsed(parameters)
    val sink = new SinkRelations.Sink(sqlContext.sparkSession, opts.path)
    val range = opts.range
    if (opts.flag(SourceOptions.Log)) new SinkRelations.LogRelation(sink, range)
    else {
      lazy val entries = sink.entries(range, opts.rangeKey) // once, for the schema and the files
      val (schema, format) = SinkRelations.batchSchema(
        sink,
        range,
        entries,
        opts,
        userSchema.map(SinkRelations.withoutBatchId(_, opts))
      )
      SinkRelations.files(sink, entries, schema, format, opts, opts.flag(SourceOptions.WithBatchId))
    }
  }

  override def sourceSchema(
      sqlContext: SQLContext,
      schema: Option[StructType],
      providerName: String,
      parameters: Map[String, String]
  ): (String, StructType) = {
    val (s, _) = streamSchema(sqlContext, schema, parameters, inferenceRule = true)
    (shortName(), s)
  }

  /**
   * The source of a query's start. Its first start fixes the first batch and the schema in the
   * checkpoint ([[SourceStart]]); later starts read them back. The plan was analysed with
   * [[sourceSchema]] (Spark asks it before it knows the checkpoint), so a schema the sink has
   * changed to since the first start is refused here, naming the one kept and the way out.
   */
  override def createSource(
      sqlContext: SQLContext,
      metadataPath: String,
      schema: Option[StructType],
      providerName: String,
      parameters: Map[String, String]
  ): Source = BatchLogException.unchanged {
    // the plan was analysed with sourceSchema, under the inference rule: not applied again here
    val (s, format) = streamSchema(sqlContext, schema, parameters, inferenceRule = false)
    val opts = new SourceOptions.Parsed(parameters)
    val spark = sqlContext.sparkSession
    val sink = new SinkRelations.Sink(spark, opts.path)
    // the sink's columns are kept; the batchId column of withBatchId may come and go
    val columns = SinkRelations.withoutBatchId(s, opts)
    val kept = SourceStart.read(spark, metadataPath)
    val start = kept.getOrElse {
      SourceStart.write(
        spark,
        metadataPath,
        SourceStart(BatchLogSource.firstBatch(sink, opts), columns, format)
      )
    }
    if (schema.isEmpty && start.schema != columns) {
      throw BatchLogException.invalidArgument(
        "schema",
        "(inferred)",
        s"the schema of ${sink.root} is now ${columns.toDDL}, but this query's checkpoint " +
          s"(${new org.apache.hadoop.fs.Path(metadataPath).getParent.getParent}) started reading " +
          s"it with ${start.schema.toDDL}, which its rows and state were made with; give that " +
          s".schema(${BatchLogDataSource.quoted(start.schema.toDDL)}) to go on with it, or start the query from a new " +
          "checkpoint (with option startingBatch set to the first upstream batch to read)"
      )
    }
    kept.flatMap(_ => opts.get(SourceOptions.StartingBatch)).foreach { option =>
      logInfo(s"option startingBatch=$option is not used: this query's checkpoint started at " +
        s"upstream batch ${start.startingBatch} (${SourceStart.FileName} in $metadataPath)")
    }
    new BatchLogSource(spark, sink, opts, s, start.format, start.startingBatch, metadataPath)
  }

  /**
   * The stream's schema: the user's, or the one of the latest batch that wrote files (the sink's
   * current schema), read without loading the log; `batchId` last with `withBatchId`. As for
   * Spark's file sources (`DataSource.sourceSchema`), a schema is inferred only where
   * `spark.sql.streaming.schemaInference` is true, or the format is text (whose schema is fixed);
   * else the user must give it.
   */
  private def streamSchema(
      sqlContext: SQLContext,
      userSchema: Option[StructType],
      parameters: Map[String, String],
      inferenceRule: Boolean
  ): (StructType, String) = BatchLogDataSource.refusing {
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
    val spark = sqlContext.sparkSession
    val sink = new SinkRelations.Sink(spark, opts.path)
    val newest = sink.newestFiles(BatchRange.All)
    val user = userSchema.map(SinkRelations.withoutBatchId(_, opts))
    val (schema, format) = SinkRelations.schemaOf(sink, newest, opts, user)
    val inferenceOff = !spark.sessionState.conf.streamingSchemaInference
    if (inferenceRule && user.isEmpty && inferenceOff && format != "text") {
      throw BatchLogException.invalidArgument(
        BatchLogConf.StreamingSchemaInferenceKey,
        "false",
        s"a stream of ${sink.root} needs its schema, as Spark's file sources do: give it, " +
          s".schema(${BatchLogDataSource.quoted(schema.toDDL)}) (the sink's current one), or set " +
          s"${BatchLogConf.StreamingSchemaInferenceKey}=true to infer it at the query's first " +
          "start (its checkpoint keeps it)"
      )
    }
    (SinkRelations.withBatchIdIfAsked(schema, opts, sink.root), format)
  }
}

object BatchLogDataSource {

  /**
   * Runs a resolution step that changes nothing: its errors say so, and carry their code in the
   * message (`[BATCHLOG.<CODE>]`, as SQL's do), the one part of a JVM error a Spark Connect client
   * receives.
   */
  private def refusing[T](body: => T): T = SqlErrors.tagged(BatchLogException.unchanged(body))

  /** The name of the data source: `format("batchlog")`, `USING batchlog`. */
  val Name = "batchlog"

  /** `s` in double quotes (Scala 2.12 has no escaped quote inside an interpolated string). */
  private def quoted(s: String): String = "\"" + s + "\""

  private def toScala(m: java.util.Map[String, String]): Map[String, String] = {
    val out = Map.newBuilder[String, String]
    val it = m.entrySet().iterator()
    while (it.hasNext) { val e = it.next(); out += e.getKey -> e.getValue }
    out.result()
  }
}
