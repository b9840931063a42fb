package io.batchlog.testkit

import java.nio.file.{Files, Paths}

import org.apache.spark.sql.SparkSession

import io.batchlog.ops.{Cascade, Rewind, RewindStepListener}

/**
 * A [[RewindStepListener]] that pauses a rewind (or cascade) right after the step named by
 * `spark.batchlog.test.pauseAfterRewindStep`: it creates `paused` in the directory
 * `spark.batchlog.test.pauseDir` and waits until a test creates `resume` there (at most two
 * minutes), so that the test can act between two steps: wake a zombie writer, say.
 */
class PauseAfterRewindStep(spark: SparkSession) extends RewindStepListener {

  private val pauseAfter: Option[String] =
    spark.conf.getOption(TestkitConf.PauseAfterRewindStep).map(_.trim).filter(_.nonEmpty)

  private val dir = Paths.get(spark.conf.get(TestkitConf.PauseDir))

  pauseAfter.foreach(s => require(Rewind.Steps.contains(s) || Cascade.isStep(s), s))

  override def afterStep(step: String): Unit = if (pauseAfter.contains(step)) {
    System.err.println(s"[batchlog-testkit] pausing after rewind step '$step'")
    Files.createFile(dir.resolve("paused"))
    val deadline = System.currentTimeMillis() + 120000L
    while (!Files.exists(dir.resolve("resume")) && System.currentTimeMillis() < deadline) {
      Thread.sleep(50)
    }
  }
}
