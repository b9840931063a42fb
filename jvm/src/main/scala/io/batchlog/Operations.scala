package io.batchlog

import org.json4s.JNull
import org.json4s.jackson.JsonMethods.{compact, parse, render}
import org.json4s.JsonDSL._

import org.apache.spark.sql.{DataFrame, SparkSession}

import io.batchlog.ops.{Adopt, Horizon, ReadByBatch, Repair, Rewind, Takeover, Vacuum, Verify}

/**
 * The operations the Python facade and CLI call, in Java-friendly types (strings, longs, booleans,
 * DataFrames; boxed `Long`s where Python passes `None`). Reports are JSON strings.
 */
object Operations {
  import BatchLogException.unchanged

  /** Plans a rewind and, unless `dryRun`, carries it out. JSON: `{"plan": ..., "result": ...}`. */
  def rewind(
      spark: SparkSession,
      sinkPath: String,
      checkpointPath: String,
      toBatch: Long,
      dryRun: Boolean,
      quiet: Boolean,
      force: Boolean
  ): String = {
    val plan = Rewind.plan(spark, sinkPath, checkpointPath, toBatch, force)
    // A dry run reports `"result": null`: an absent value would drop the key from the JSON.
    val result = if (dryRun) JNull else parse(Rewind.apply(spark, plan, quiet))
    compact(render(("plan" -> parse(plan.toJson)) ~ ("result" -> result)))
  }

  /** The rewind horizon of a sink, and of its query's checkpoint when given (may be null). */
  def horizon(spark: SparkSession, sinkPath: String, checkpointPath: String): String =
    unchanged(Horizon.json(spark, sinkPath, Option(checkpointPath)))

  /**
   * Makes the query of `checkpointPath` the sink's writer from the batch after its latest
   * ([[Takeover]]). JSON: the plan, `dryRun` and `done`.
   */
  def takeover(
      spark: SparkSession,
      sinkPath: String,
      checkpointPath: String,
      dryRun: Boolean,
      force: Boolean
  ): String = Takeover.run(spark, sinkPath, checkpointPath, dryRun, force)

  def adopt(spark: SparkSession, sinkPath: String, dryRun: Boolean, quiet: Boolean): String =
    Adopt.run(spark, sinkPath, dryRun, quiet)

  def read(
      spark: SparkSession,
      sinkPath: String,
      format: String,
      fromBatch: java.lang.Long,
      toBatch: java.lang.Long
  ): DataFrame =
    unchanged(ReadByBatch(
      spark,
      sinkPath,
      format,
      Option(fromBatch).map(_.longValue),
      Option(toBatch).map(_.longValue)
    ))

  // ---- reliability: verify, repair, vacuum ----------------------------------------------------

  /** Checks the log against the output directory, changing nothing ([[Verify]]). */
  def verify(spark: SparkSession, sinkPath: String): String =
    unchanged(Verify.run(spark, sinkPath).toJson)

  /** Rebuilds a lost or damaged `_spark_metadata` from batch-tagged file names ([[Repair]]). */
  def repair(
      spark: SparkSession,
      sinkPath: String,
      dryRun: Boolean,
      force: Boolean,
      quiet: Boolean,
      compactInterval: java.lang.Integer
  ): String =
    Repair.run(spark, sinkPath, dryRun, force, quiet, Option(compactInterval).map(_.intValue))

  /** Deletes orphan data files older than `olderThan` ([[Vacuum]]). */
  def vacuum(
      spark: SparkSession,
      sinkPath: String,
      olderThan: String,
      dryRun: Boolean,
      quiet: Boolean
  ): String = unchanged(Vacuum.run(spark, sinkPath, olderThan, dryRun, quiet))
}
