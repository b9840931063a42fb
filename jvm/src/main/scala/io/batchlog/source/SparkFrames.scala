package io.batchlog.source

import java.lang.reflect.Method

import org.apache.spark.sql.{DataFrame, SparkSession}
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan

/**
 * A DataFrame over a logical plan. A streaming source's micro-batch must be a DataFrame whose plan
 * is marked streaming (`LogicalRelation(relation, isStreaming = true)`), and Spark builds one only
 * with `Dataset.ofRows`, which is `private[sql]` and lives in `org.apache.spark.sql` up to 3.5 and
 * in `org.apache.spark.sql.classic` from 4.0 (the same public bytecode on every line). It is found
 * once by reflection: one source for every Spark line, no copy per line.
 */
private[batchlog] object SparkFrames {

  private lazy val ofRows: (AnyRef, Method) = Seq(
    "org.apache.spark.sql.classic.Dataset$",
    "org.apache.spark.sql.Dataset$"
  ).iterator.flatMap { name =>
    try {
      val module = Class.forName(name)
      module.getMethods.find { m =>
        m.getName == "ofRows" && m.getParameterCount == 2 &&
        classOf[LogicalPlan].isAssignableFrom(m.getParameterTypes()(1))
      }.map(m => module.getField("MODULE$").get(null) -> m)
    } catch { case _: ClassNotFoundException => None }
  }.toSeq.headOption.getOrElse(
    throw new IllegalStateException("Spark's Dataset.ofRows(SparkSession, LogicalPlan) not found")
  )

  def ofPlan(spark: SparkSession, plan: LogicalPlan): DataFrame = {
    val (module, method) = ofRows
    try method.invoke(module, spark, plan).asInstanceOf[DataFrame]
    catch { case e: java.lang.reflect.InvocationTargetException => throw e.getCause }
  }
}
