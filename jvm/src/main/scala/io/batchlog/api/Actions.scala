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

  /** Carries out [[plan]] (unless a dry run) and reports. */
  def execute(): R

  protected def makePlan(): P
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

  def execute(): RewindReport = {
    val p = plan()
    RewindReport(p.summary, if (isDryRun) None else Some(Rewind.apply(spark, p, isQuiet)))
  }
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

  def execute(): CascadeReport = {
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

  def execute(): TakeoverReport = Takeover.apply(spark, sinkPath, plan(), isDryRun)
}

/** Tags the entries of a sink written by plain Spark whose batch can be proven ([[Adopt]]). */
final class AdoptAction private[batchlog] (spark: SparkSession, sinkPath: String)
    extends SinkAction[AdoptAction, AdoptReport, AdoptReport](spark, sinkPath) {

  protected def makePlan(): AdoptReport = Adopt.run(spark, sinkPath, dryRun = true, quiet = true)

  def summary(): AdoptReport = plan()

  def execute(): AdoptReport =
    if (isDryRun) plan() else Adopt.run(spark, sinkPath, dryRun = false, isQuiet)
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

  def execute(): RepairReport = Repair.apply(spark, plan(), isDryRun, isForced, isQuiet)
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

  def execute(): VacuumReport =
    if (isDryRun) plan().report else Vacuum.apply(spark, plan(), isQuiet)
}
