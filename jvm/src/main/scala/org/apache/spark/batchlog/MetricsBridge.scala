package org.apache.spark.batchlog

import com.codahale.metrics.MetricRegistry

import org.apache.spark.SparkEnv
import org.apache.spark.metrics.source.Source

/**
 * batchlog's one way into Spark's metrics system. Spark's `Source` trait is private to Spark's
 * packages, so a batchlog metrics source is declared here; everything else about batchlog's metrics
 * lives in `io.batchlog.log.SinkMetrics`. A source registered after the SparkContext started is
 * reported at once by every sink Spark's metrics system runs (JMX, `PrometheusServlet`, ...), on
 * every Spark line batchlog builds for.
 */
object MetricsBridge {

  final private class NamedSource(val sourceName: String, val metricRegistry: MetricRegistry)
      extends Source

  /**
   * Registers `registry` as the source `name` of the driver's (or executor's) running metrics
   * system; returns that system's `SparkEnv`, or None if no Spark is running in this JVM.
   */
  def register(name: String, registry: MetricRegistry): Option[AnyRef] =
    Option(SparkEnv.get).map { env =>
      env.metricsSystem.registerSource(new NamedSource(name, registry))
      env
    }

  /** The running `SparkEnv` (None if none): a source registered with another one is gone. */
  def currentEnv: Option[AnyRef] = Option(SparkEnv.get)
}
