package io.batchlog

import org.apache.spark.sql.{Encoders, SparkSession}

/** Spark's test-helper sources, where Spark 3.5's layout keeps them (see `io.batchlog.shim`). */
package object testshim {
  type MemoryStream[A] = org.apache.spark.sql.execution.streaming.MemoryStream[A]
  val MemoryStream: org.apache.spark.sql.execution.streaming.MemoryStream.type = org.apache.spark.sql.execution.streaming.MemoryStream

  /** A stream of ints for tests (its factory's signature differs by line). */
  def intStream(spark: SparkSession, numPartitions: Int): MemoryStream[Int] =
    MemoryStream[Int](numPartitions)(Encoders.scalaInt, spark.sqlContext)
}
