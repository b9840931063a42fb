package io.batchlog

import org.apache.hadoop.fs.Path

import org.apache.spark.sql.{DataFrame, SparkSession}

import io.batchlog.api._
import io.batchlog.ops._
import io.batchlog.source.{BatchLogDataSource, BatchRange, SourceOptions}

/**
 * A file sink and its batch-tagged log: the public entry point, for Scala, Java and (through py4j)
 * Python.
 *
 * {{{
 *   val sink = BatchLog.forPath(spark, "/data/out")
 *   sink.files(7)                                    // the live files batch 7 wrote
 *   sink.verify().healthy
 *   sink.rewind("/chk/out", 7).dryRun(true).execute() // the plan, changing nothing
 * }}}
 *
 * Reads (`latestBatch`, `batches`, `files`, `batchOf`, `entries`, `inspect`, `history`, `verify`,
 * `read`) never write and work on logs written with or without batchlog. Maintenance operations are
 * actions ([[io.batchlog.api.SinkAction]]): configured fluently, planned before they act, and
 * reporting immutable values (`io.batchlog.ops.Reports`). Errors are [[BatchLogException]]s that
 * name the file or argument, what to do, and what was (not) changed.
 */
final class BatchLog private (spark: SparkSession, val path: String) {

  private lazy val reader = new SinkReader(spark, path)

  /** `<path>/_spark_metadata`; fails with `NOT_A_SINK` if `path` is not a file sink's output. */
  def metadataPath: Path = reader.metadataPath

  /** The latest committed batch id, or -1 if none. */
  def latestBatch(): Long = reader.latestBatch()

  /** Ids of the batches that wrote at least one live file, ascending. */
  def batches(): Array[Long] = reader.batches()

  /** Paths (as logged: URI strings) of the live files written by `batchId`. */
  def files(batchId: Long): Array[String] = reader.files(batchId)

  /**
   * The batch that wrote `file` (a logged URI or a plain path): -1 if it is live in the log but
   * untagged, null if the log does not hold it.
   */
  def batchOf(file: String): java.lang.Long = reader.batchOf(file)

  /** Every live entry with its `batchId` (null when untagged), read by Spark, not collected. */
  def entries(): DataFrame = reader.entries()

  /** Compaction state, log files, per-batch totals and the rewind horizon of the sink. */
  def inspect(): SinkSummary = reader.summary(None)

  /** [[inspect]] with the horizon of the query's checkpoint too. */
  def inspect(checkpointPath: String): SinkSummary = reader.summary(Option(checkpointPath))

  /**
   * What happened to the sink: its live batches (files, bytes, time), its live compactions and the
   * maintenance operations run on it, who ran them and what they changed ([[History]]).
   */
  def history(): SinkHistory = History.of(spark, path)

  /**
   * [[history]], with the rows of every batch when `withRows`: a batch whose commit did not record
   * them (committed before batchlog recorded rows, or its count lost) has them counted by Spark
   * from its live files, read through the `batchlog` data source (Parquet and ORC from their
   * footers only; JSON, CSV and text are read whole). So this works on every sink, at a read's cost
   * only where the log does not know.
   */
  def history(withRows: Boolean): SinkHistory = {
    val h = history()
    if (!withRows || h.batches.forall(_.rows.isDefined)) h
    else
      BatchLogException.unchanged {
        val all =
          spark.read.format(BatchLogDataSource.Name).option(SourceOptions.WithBatchId, "true")
            .load(path)
        val counted = all.groupBy(SourceOptions.BatchIdColumn).count().collect()
          .collect { case r if !r.isNullAt(0) => r.getLong(0) -> r.getLong(1) }.toMap
        h.copy(batches =
          h.batches.map(b =>
            if (b.rows.isDefined) b else b.copy(rows = Some(counted.getOrElse(b.batchId, 0L)))
          )
        )
      }
  }

  /** The log checked against the output directory; changes nothing ([[Verify]]). */
  def verify(): VerifyReport = BatchLogException.unchanged(Verify.run(spark, path))

  /**
   * The rows written by batches `fromBatch` to `toBatch` (both inclusive; null: open), read in
   * `format`: the `batchlog` data source ([[io.batchlog.source.BatchLogDataSource]]) with option
   * `batches`, over exactly those batches' live files, with the sink's schema (partition columns
   * included). Time travel "as of batch N" (`toBatch` only) and incremental reads (`fromBatch`).
   */
  def read(format: String, fromBatch: java.lang.Long, toBatch: java.lang.Long): DataFrame =
    BatchLogException.unchanged {
      val from = Option(fromBatch).map(_.longValue)
      val to = Option(toBatch).map(_.longValue)
      from.filter(_ < 0).foreach(b =>
        throw BatchLogException.invalidArgument("from_batch", b, "it must be >= 0")
      )
      to.filter(_ < 0).foreach(b =>
        throw BatchLogException.invalidArgument("to_batch", b, "it must be >= 0")
      )
      for (f <- from; t <- to if f > t) {
        throw BatchLogException.invalidArgument("from_batch", f, s"it must be <= to_batch ($t)")
      }
      val reader = spark.read.format(BatchLogDataSource.Name).option(SourceOptions.Format, format)
      val range = BatchRange(from, to)
      (if (range.isAll) reader else reader.option(SourceOptions.Batches, range.toString)).load(path)
    }

  /** Rewinds the sink and the query checkpoint at `checkpointPath` so that `toBatch` runs again. */
  def rewind(checkpointPath: String, toBatch: Long): RewindAction =
    new RewindAction(spark, path, checkpointPath, toBatch)

  /**
   * Rewinds the sink, its query's checkpoint at `checkpointPath`, and every query downstream of the
   * sink, each to its first batch that read a rewound batch ([[io.batchlog.ops.Cascade]]).
   */
  def cascade(checkpointPath: String, toBatch: Long): CascadeAction =
    new CascadeAction(spark, path, checkpointPath, toBatch)

  /** Makes the query of `checkpointPath` the sink's one writer from the batch after its latest. */
  def takeover(checkpointPath: String): TakeoverAction =
    new TakeoverAction(spark, path, checkpointPath)

  /** Tags the entries of a sink written by plain Spark whose batch can be proven. */
  def adopt(): AdoptAction = new AdoptAction(spark, path)

  /** Rebuilds a lost or damaged `_spark_metadata` from the data files' batch-tagged names. */
  def repair(): RepairAction = new RepairAction(spark, path)

  /** Deletes orphan data files (not in the log); a dry run unless `dryRun(false)`. */
  def vacuum(): VacuumAction = new VacuumAction(spark, path)

  /** The underlying log, for batchlog's own tests and benchmarks. */
  private[batchlog] def log = reader.log
}

object BatchLog {

  /**
   * The sink whose output directory is `path` (the one holding `_spark_metadata`). Nothing is read
   * until a method is called: `repair` works where `_spark_metadata` is gone.
   */
  def forPath(spark: SparkSession, path: String): BatchLog = {
    BuildInfo.requireMatchingSpark()
    new BatchLog(spark, path)
  }
}
