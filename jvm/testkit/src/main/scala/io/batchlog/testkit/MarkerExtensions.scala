package io.batchlog.testkit

import org.apache.spark.sql.SparkSessionExtensions
import org.apache.spark.sql.catalyst.FunctionIdentifier
import org.apache.spark.sql.catalyst.expressions.{Expression, ExpressionInfo, Literal}

/**
 * Another library's session extensions, for the tests that check batchlog is a good neighbour in
 * `spark.sql.extensions` (it appends itself, keeps the others and their order): adds the SQL
 * function `testkit_marker()`, which answers [[MarkerExtensions.Answer]].
 */
class MarkerExtensions extends (SparkSessionExtensions => Unit) {
  override def apply(extensions: SparkSessionExtensions): Unit =
    extensions.injectFunction(
      (
        FunctionIdentifier(MarkerExtensions.Function),
        new ExpressionInfo(classOf[MarkerExtensions].getName, MarkerExtensions.Function),
        (_: Seq[Expression]) => Literal(MarkerExtensions.Answer)
      )
    )
}

object MarkerExtensions {
  val Function = "testkit_marker"
  val Answer = "testkit-extensions-loaded"
}
