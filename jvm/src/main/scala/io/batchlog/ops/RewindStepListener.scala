package io.batchlog.ops

import java.lang.reflect.InvocationTargetException

import scala.util.control.NonFatal

import org.apache.spark.sql.SparkSession

import io.batchlog.{BatchLogConf, BatchLogException}

/**
 * Observes a rewind: [[afterStep]] is called with the name of each step (one of [[Rewind.Steps]])
 * once it is done, in the process that runs the rewind. Named by
 * `spark.batchlog.rewind.stepListener` ([[BatchLogConf.RewindStepListenerKey]]); none by default.
 * An exception it throws stops the rewind as a failed step would: re-running the rewind finishes
 * it.
 */
trait RewindStepListener {
  def afterStep(step: String): Unit
}

object RewindStepListener {

  /**
   * The listener the session names, built with its public constructor taking the `SparkSession`,
   * else its public no-argument one; `None` when the key is unset.
   */
  def fromConf(spark: SparkSession): Option[RewindStepListener] =
    spark.conf.getOption(BatchLogConf.RewindStepListenerKey).map(_.trim).filter(_.nonEmpty).map {
      name =>
        def invalid(why: String) =
          BatchLogException.invalidArgument(BatchLogConf.RewindStepListenerKey, name, why)
        val loader = Option(Thread.currentThread.getContextClassLoader)
          .getOrElse(getClass.getClassLoader)
        val cls =
          try Class.forName(name, true, loader)
          catch { case NonFatal(e) => throw invalid(s"the class cannot be loaded ($e)") }
        if (!classOf[RewindStepListener].isAssignableFrom(cls)) {
          throw invalid(s"it must implement ${classOf[RewindStepListener].getName}")
        }
        val instance =
          try {
            scala.util.Try(cls.getConstructor(classOf[SparkSession])).toOption match {
              case Some(c) => c.newInstance(spark)
              case None => cls.getConstructor().newInstance()
            }
          } catch {
            case e: NoSuchMethodException =>
              throw invalid(s"it needs a public constructor taking a SparkSession, or none ($e)")
            case e: InvocationTargetException =>
              throw invalid(s"its constructor failed: ${e.getCause}")
          }
        instance.asInstanceOf[RewindStepListener]
    }
}
