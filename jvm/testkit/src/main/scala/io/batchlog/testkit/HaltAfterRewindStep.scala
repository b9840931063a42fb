package io.batchlog.testkit

import org.apache.spark.sql.SparkSession

import io.batchlog.ops.{Cascade, Rewind, RewindStepListener}

/**
 * A [[RewindStepListener]] that halts the JVM (exit status 137, as if SIGKILLed) right after the
 * rewind (or cascade) step named by `spark.batchlog.test.haltAfterRewindStep`
 * ([[TestkitConf.HaltAfterRewindStep]]), to test that a rewind cut short between two steps is
 * finished by re-running it. Select it with `spark.batchlog.rewind.stepListener` = this class.
 */
class HaltAfterRewindStep(spark: SparkSession) extends RewindStepListener {

  private val haltAfter: Option[String] =
    spark.conf.getOption(TestkitConf.HaltAfterRewindStep).map(_.trim).filter(_.nonEmpty)

  haltAfter.foreach { s =>
    require(
      Rewind.Steps.contains(s) || Cascade.isStep(s),
      s"${TestkitConf.HaltAfterRewindStep}=$s: expected one of ${Rewind.Steps.mkString("|")}, " +
        s"or of a cascade's: ${Cascade.Steps.mkString("|")}, <hop>:<a rewind step>"
    )
  }

  override def afterStep(step: String): Unit = if (haltAfter.contains(step)) {
    System.err.println(s"[batchlog-testkit] halting the JVM after rewind step '$step'")
    System.err.flush()
    Runtime.getRuntime.halt(TestkitConf.HaltStatus)
  }
}
