package io.batchlog.sql

import org.apache.spark.rdd.RDD
import org.apache.spark.sql.{Row, SparkSession, SQLContext}
import org.apache.spark.sql.catalyst.FunctionIdentifier
import org.apache.spark.sql.catalyst.expressions.{Expression, ExpressionInfo}
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan
import org.apache.spark.sql.sources.{BaseRelation, TableScan}
import org.apache.spark.sql.types.{LongType, StringType, StructField, StructType, TimestampType}

import io.batchlog.{BatchLog, BatchLogException}
import io.batchlog.source.{BatchRange, SinkRelations, SourceOptions}

/**
 * batchlog's table-valued functions: reads of a sink's log by batch, for SQL.
 *
 * {{{
 *   SELECT * FROM batchlog_files('/data/out', 7)       -- path, size, modificationTime, batchId
 *   SELECT * FROM batchlog_batches('/data/out')        -- batchId: batches with live files
 *   SELECT * FROM batchlog_batch_of('/data/out', 'part-...parquet')  -- batchId (-1: untagged)
 *   SELECT * FROM batchlog_latest_batch('/data/out')   -- batchId (-1: none yet)
 *   SELECT * FROM batchlog_entries('/data/out')        -- the log as a table
 *   SELECT * FROM batchlog_history('/data/out')        -- batches, compactions, operations
 * }}}
 *
 * Each resolves to a relation read when the query runs (not when it is analyzed).
 */
object TableFunctions {

  type Builder = Seq[Expression] => LogicalPlan

  private val BatchIdField = StructField(SourceOptions.BatchIdColumn, LongType, nullable = true)

  private case class Fn(
      name: String,
      usage: String,
      params: Seq[String],
      build: Seq[Any] => LogicalPlan
  )

  private def functions(spark: () => SparkSession): Seq[Fn] = Seq(
    Fn(
      "batchlog_files",
      "The live files batch `batch` of the sink wrote: path, size, modificationTime, batchId.",
      Seq("path", "batch"),
      { case Seq(path: String, batch: Long) =>
        rows(
          StructType(Seq(
            StructField("path", StringType, nullable = false),
            StructField("size", LongType, nullable = false),
            StructField("modificationTime", LongType, nullable = false),
            BatchIdField
          )),
          () => {
            if (batch < 0) throw BatchLogException.invalidArgument("batch", batch, "must be >= 0")
            // as `files(b)`: the entries tagged with the batch (untagged ones belong to none)
            new SinkRelations.Sink(spark(), path)
              .entries(BatchRange(Some(batch), Some(batch)), "batch", strict = false)
              .map(e => Row(e.path, e.size, e.modificationTime, e.batchId.getOrElse(batch)))
          }
        )
      }
    ),
    Fn(
      "batchlog_batches",
      "The batches of the sink that wrote live files, ascending: batchId.",
      Seq("path"),
      { case Seq(path: String) =>
        rows(StructType(Seq(BatchIdField)), () => sink(path).batches().toSeq.map(b => Row(b)))
      }
    ),
    Fn(
      "batchlog_batch_of",
      "The batch that wrote `file` (-1: live but untagged; no row: not in the log): batchId.",
      Seq("path", "file"),
      { case Seq(path: String, file: String) =>
        rows(
          StructType(Seq(BatchIdField)),
          () => Option(sink(path).batchOf(file)).map(b => Row(b.longValue)).toSeq
        )
      }
    ),
    Fn(
      "batchlog_latest_batch",
      "The latest committed batch of the sink (-1: none yet): batchId.",
      Seq("path"),
      { case Seq(path: String) =>
        rows(StructType(Seq(BatchIdField)), () => Seq(Row(sink(path).latestBatch())))
      }
    ),
    Fn(
      "batchlog_history",
      "What happened to the sink, oldest first: each live batch, live compaction and operation " +
        "(time, event, batchId, files, bytes, rows, durationMs, queryId, runId, user, host, " +
        "applicationId, outcome, details).",
      Seq("path"),
      { case Seq(path: String) =>
        rows(
          StructType(Seq(
            StructField("time", TimestampType, nullable = false),
            StructField("event", StringType, nullable = false),
            BatchIdField,
            StructField("files", LongType, nullable = true),
            StructField("bytes", LongType, nullable = true),
            StructField("rows", LongType, nullable = true),
            StructField("durationMs", LongType, nullable = true),
            StructField("queryId", StringType, nullable = true),
            StructField("runId", StringType, nullable = true),
            StructField("user", StringType, nullable = true),
            StructField("host", StringType, nullable = true),
            StructField("applicationId", StringType, nullable = true),
            StructField("outcome", StringType, nullable = true),
            StructField("details", StringType, nullable = true)
          )),
          () => historyRows(sink(path).history())
        )
      }
    ),
    Fn(
      "batchlog_entries",
      "Every live entry of the sink's log, with the batch that wrote it (null: untagged).",
      Seq("path"),
      { case Seq(path: String) =>
        SinkRelations.plan(new SinkRelations.LogRelation(
          new SinkRelations.Sink(spark(), path),
          BatchRange.All
        ))
      }
    )
  )

  /**
   * A sink's history as rows, one per event, by time (a batch before an operation of its time). A
   * batch's rows and commit are what its commit recorded (null: not recorded).
   */
  private def historyRows(h: io.batchlog.ops.SinkHistory): Seq[Row] = {
    def ts(ms: Long) = new java.sql.Timestamp(ms)
    def orNull[T](o: Option[T]): Any = o.getOrElse(null)
    val batches = h.batches.map(b =>
      (
        b.timeMs,
        0,
        Row.fromSeq(
          Seq(ts(b.timeMs), "batch", b.batchId, b.files, b.bytes) ++
            Seq(b.rows, b.durationMs, b.queryId, b.runId).map(orNull) ++ Seq.fill(5)(null)
        )
      )
    )
    val compactions = h.compactions.map(c =>
      (
        c.timeMs,
        1,
        Row.fromSeq(
          Seq(ts(c.timeMs), "compaction", c.batchId, null, c.bytes) ++ Seq.fill(8)(null) :+ c.file
        )
      )
    )
    val operations = h.operations.map { o =>
      val details =
        io.batchlog.api.ReportJson.toJson(Map("arguments" -> o.arguments, "changed" -> o.changed))
      (
        o.timeMs,
        2,
        Row(
          ts(o.timeMs),
          o.operation,
          null,
          null,
          null,
          null,
          null,
          null,
          null,
          o.user,
          o.host,
          o.applicationId,
          o.outcome,
          details
        )
      )
    }
    (batches ++ compactions ++ operations).sortBy(e => (e._1, e._2)).map(_._3)
  }

  private def sink(path: String): BatchLog = BatchLog.forPath(SparkSession.active, path)

  private def rows(schema: StructType, compute: () => Seq[Row]): LogicalPlan =
    SinkRelations.plan(new RowsRelation(SparkSession.active, schema, compute))

  /** The functions as `SparkSessionExtensions.injectTableFunction` takes them. */
  def all(spark: () => SparkSession): Seq[(FunctionIdentifier, ExpressionInfo, Builder)] =
    functions(spark).map { fn =>
      val builder: Builder = args =>
        SqlErrors.tagged(BatchLogException.unchanged {
          if (args.length != fn.params.length) {
            throw BatchLogException.invalidArgument(
              fn.name,
              s"${args.length} arguments",
              s"it takes ${fn.params.length}: ${fn.name}(${fn.params.mkString(", ")})"
            )
          }
          val values = fn.params.zip(args).map { case (p, e) => literal(fn.name, p, e) }
          fn.build(values)
        })
      val info =
        new ExpressionInfo(getClass.getName, null, fn.name, fn.usage, "", "", "", "", "", "", "")
      (FunctionIdentifier(fn.name), info, builder)
    }

  /** A constant argument: a string, or a whole number for `batch`. */
  private def literal(fn: String, param: String, e: Expression): Any = {
    if (!e.foldable) {
      throw BatchLogException.invalidArgument(s"$fn($param)", e.sql, "it must be a constant")
    }
    (param, e.eval()) match {
      case (_, null) =>
        throw BatchLogException.invalidArgument(s"$fn($param)", "NULL", "it is required")
      case ("batch", n: java.lang.Number) => n.longValue
      case ("batch", other) =>
        throw BatchLogException.invalidArgument(s"$fn($param)", other, "it must be a whole number")
      case (_, s) => s.toString
    }
  }
}

/** Rows computed on the driver when the scan runs, as a relation. */
final private class RowsRelation(
    spark: SparkSession,
    val schema: StructType,
    compute: () => Seq[Row]
) extends BaseRelation
    with TableScan {
  override def sqlContext: SQLContext = spark.sqlContext
  override def buildScan(): RDD[Row] =
    spark.sparkContext.parallelize(SqlErrors.tagged(BatchLogException.unchanged(compute())), 1)
}
