package io.batchlog.api

import org.apache.spark.sql.SparkSession

import io.batchlog.BatchLogException
import io.batchlog.ops._

/**
 * A maintenance operation on a sink, configured fluently and run by [[execute]] (the shape of
 * Iceberg's `Action`): `plan()` computes what it will do and changes nothing; `execute()` carries
 * that plan out unless `dryRun`, and returns an immutable report that includes the plan. Plans and
 * reports are values (`io.batchlog.ops.Reports`): printed, compared and tested before anything
 * acts. An action plans once: `execute()` after `plan()` carries out the plan that was shown.
 */
sealed abstract class SinkAction[Self <: SinkAction[Self, P, R], P, R](
    protected val spark: SparkSession,
    protected val sinkPath: String
) {
  protected var isDryRun = false
  protected var isQuiet = false
  protected var isForced = false
  private var planned: Option[P] = None

  private def self: Self = this.asInstanceOf[Self]

  /** Plan and report only; change nothing. */
  def dryRun(enabled: Boolean): Self = { isDryRun = enabled; self }

  /** No progress lines on stderr. */
  def quiet(enabled: Boolean): Self = { isQuiet = enabled; self }

  /**
   * Go ahead although a writer lease is live: for a writer known to be dead (its driver was killed
   * less than the lease timeout ago). Each action says what else it overrides.
   */
  def force(enabled: Boolean): Self = { isForced = enabled; self }

  /** What the action will do, computed once; changes nothing. */
  final def plan(): P = synchronized {
    if (planned.isEmpty) planned = Some(makePlan())
    planned.get
  }

  /** The plan as a report (a case class of `io.batchlog.ops.Reports`): what a dry run prints. */
  def summary(): AnyRef

  /**
   * Carries out [[plan]] (unless a dry run) and reports. An operation that ran (not a dry run) is
   * recorded in the sink's history ([[OperationHistory]]), failed or not.
   */
  final def execute(): R =
    if (isDryRun) run()
    else {
      val start = System.currentTimeMillis()
      val report =
        try run()
        catch {
          case e: Throwable =>
            OperationHistory.failed(spark, sinkPath, operation, arguments, start, e)
            throw e
        }
      OperationHistory.done(spark, operation, arguments, start, changes(report))
      report
    }

  protected def makePlan(): P

  /** Carries out [[plan]] (unless a dry run) and reports: what [[execute]] returns. */
  protected def run(): R

  /** The operation's name in the sink's history. */
  protected def operation: String

  /** What the operation was asked, as its history shows it. */
  protected def arguments: Map[String, String] = Map("force" -> isForced.toString)

  /** What `report` says the operation changed, per sink: a sink with nothing to say is left out. */
  protected def changes(report: R): Seq[(String, Map[String, Long])]
}

/** Rewinds a sink and its query's checkpoint to `toBatch` ([[io.batchlog.ops.Rewind]]). */
final class RewindAction private[batchlog] (
    spark: SparkSession,
    sinkPath: String,
    checkpointPath: String,
    toBatch: Long
) extends SinkAction[RewindAction, RewindPlan, RewindReport](spark, sinkPath) {

  protected def makePlan(): RewindPlan =
    Rewind.plan(spark, sinkPath, checkpointPath, toBatch, isForced)

  def summary(): RewindPlanSummary = plan().summary

  protected def run(): RewindReport = {
    val p = plan()
    RewindReport(p.summary, if (isDryRun) None else Some(Rewind.apply(spark, p, isQuiet)))
  }

  protected def operation = "rewind"

  override protected def arguments: Map[String, String] =
    super.arguments ++ Map("checkpoint" -> checkpointPath, "toBatch" -> toBatch.toString)

  protected def changes(r: RewindReport): Seq[(String, Map[String, Long])] =
    r.result.toSeq.map(res => sinkPath -> OperationHistory.rewound(r.plan, res))
}

/**
 * Rewinds a sink, its query's checkpoint and every query downstream of it, transitively
 * ([[io.batchlog.ops.Cascade]]); `downstream` adds a reader that never registered.
 */
final class CascadeAction private[batchlog] (
    spark: SparkSession,
    sinkPath: String,
    checkpointPath: String,
    toBatch: Long
) extends SinkAction[CascadeAction, CascadePlan, CascadeReport](spark, sinkPath) {
  private val named = scala.collection.mutable.ArrayBuffer.empty[Downstream]

  /** A downstream query that never registered with the sink it reads: `<sink>=<checkpoint>`. */
  def downstream(arg: String): CascadeAction = { named += Downstream.parse(arg); this }

  protected def makePlan(): CascadePlan =
    Cascade.plan(spark, sinkPath, checkpointPath, toBatch, named.toSeq, isForced)

  def summary(): CascadePlanSummary = plan().summary

  protected def operation = "cascade"

  override protected def arguments: Map[String, String] =
    super.arguments ++ Map("checkpoint" -> checkpointPath, "toBatch" -> toBatch.toString) ++
      (if (named.isEmpty) Map.empty
       else
         Map(
           "downstream" -> named.map(d => s"${d.sink.getOrElse("")}=${d.checkpoint}").mkString(",")
         ))

  /** Each hop that rewound a file sink, in that sink's history. */
  protected def changes(r: CascadeReport): Seq[(String, Map[String, Long])] =
    for {
      results <- r.results.toSeq
      (hop, Some(res)) <- r.plan.hops.zip(results)
      sink <- hop.sink.toSeq
      plan <- hop.plan.toSeq
    } yield sink -> (OperationHistory.rewound(plan, res) ++
      Map("depth" -> hop.depth.toLong, "toBatch" -> res.toBatch))

  protected def run(): CascadeReport = {
    val p = plan()
    val start = System.nanoTime()
    val results = if (isDryRun) None else Some(Cascade.apply(spark, p, isQuiet))
    CascadeReport(p.summary, results, (System.nanoTime() - start) / 1000000)
  }
}

/**
 * Makes the query of `checkpointPath` the sink's writer from the batch after its latest
 * ([[io.batchlog.ops.Takeover]]).
 */
final class TakeoverAction private[batchlog] (
    spark: SparkSession,
    sinkPath: String,
    checkpointPath: String
) extends SinkAction[TakeoverAction, Takeover.Plan, TakeoverReport](spark, sinkPath) {

  protected def makePlan(): Takeover.Plan = Takeover.plan(spark, sinkPath, checkpointPath, isForced)

  def summary(): TakeoverReport = plan().report(dryRun = true, done = false)

  protected def run(): TakeoverReport = Takeover.apply(spark, sinkPath, plan(), isDryRun)

  protected def operation = "takeover"

  override protected def arguments: Map[String, String] =
    super.arguments + ("checkpoint" -> checkpointPath)

  protected def changes(r: TakeoverReport): Seq[(String, Map[String, Long])] =
    Seq(sinkPath -> Map(
      "done" -> (if (r.done) 1L else 0L),
      "fromBatch" -> r.fromBatch,
      "skippedBatches" -> r.skippedBatches
    ))
}

/** Tags the entries of a sink written by plain Spark whose batch can be proven ([[Adopt]]). */
final class AdoptAction private[batchlog] (spark: SparkSession, sinkPath: String)
    extends SinkAction[AdoptAction, AdoptReport, AdoptReport](spark, sinkPath) {

  protected def makePlan(): AdoptReport = Adopt.run(spark, sinkPath, dryRun = true, quiet = true)

  def summary(): AdoptReport = plan()

  protected def run(): AdoptReport =
    if (isDryRun) plan() else Adopt.run(spark, sinkPath, dryRun = false, isQuiet)

  protected def operation = "adopt"

  protected def changes(r: AdoptReport): Seq[(String, Map[String, Long])] =
    Seq(sinkPath -> Map(
      "entriesTagged" -> r.entriesTagged,
      "entriesUntagged" -> r.entriesUntagged,
      "compactFilesRewritten" -> r.compactFilesRewritten
    ))
}

/**
 * Rebuilds a lost or damaged `_spark_metadata` from batch-tagged file names ([[Repair]]). `force`
 * also rebuilds a healthy log.
 */
final class RepairAction private[batchlog] (spark: SparkSession, sinkPath: String)
    extends SinkAction[RepairAction, Repair.Plan, RepairReport](spark, sinkPath) {
  private var interval: Option[Int] = None

  /** Lay the new log out for this compact interval (else the one the sink records). */
  def compactInterval(n: Int): RepairAction = { interval = Some(n); this }

  protected def makePlan(): Repair.Plan = Repair.plan(spark, sinkPath, interval)

  def summary(): RepairReport = plan().report(dryRun = true)

  protected def run(): RepairReport = Repair.apply(spark, plan(), isDryRun, isForced, isQuiet)

  protected def operation = "repair"

  override protected def arguments: Map[String, String] =
    super.arguments ++ interval.map(n => "compactInterval" -> n.toString)

  protected def changes(r: RepairReport): Seq[(String, Map[String, Long])] =
    Seq(sinkPath -> Map(
      "logWritten" -> (if (r.written) 1L else 0L),
      "batches" -> r.batches.length.toLong,
      "dataFiles" -> r.dataFiles,
      "indexesRewritten" -> r.indexesRewritten.length.toLong,
      "runsRestored" -> r.runsRestored.length.toLong
    ))
}

/** Deletes orphan data files older than `olderThan` ([[Vacuum]]); a dry run unless told. */
final class VacuumAction private[batchlog] (spark: SparkSession, sinkPath: String)
    extends SinkAction[VacuumAction, Vacuum.Plan, VacuumReport](spark, sinkPath) {
  private var age = "1h"
  isDryRun = true

  /** Only orphans older than this duration (`30s`, `15m`, `1h`, `7d`; default `1h`). */
  def olderThan(duration: String): VacuumAction = {
    Vacuum.parseDuration(duration)
    age = duration
    this
  }

  protected def makePlan(): Vacuum.Plan =
    BatchLogException.unchanged(Vacuum.plan(spark, sinkPath, age))

  def summary(): VacuumReport = plan().report

  protected def run(): VacuumReport =
    if (isDryRun) plan().report else Vacuum.apply(spark, plan(), isQuiet)

  protected def operation = "vacuum"

  override protected def arguments: Map[String, String] =
    super.arguments + ("olderThan" -> age)

  protected def changes(r: VacuumReport): Seq[(String, Map[String, Long])] =
    Seq(sinkPath -> Map("dataFilesDeleted" -> r.deletedFiles, "orphanFiles" -> r.orphanFiles))
}
