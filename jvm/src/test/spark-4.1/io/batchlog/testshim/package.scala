package io.batchlog

import org.apache.spark.sql.{Encoders, SparkSession}

/** Spark's test-helper sources, where Spark 4.1's layout keeps them (see `io.batchlog.shim`). */
package object testshim {
  type MemoryStream[A] = org.apache.spark.sql.execution.streaming.runtime.MemoryStream[A]
  val MemoryStream: org.apache.spark.sql.execution.streaming.runtime.MemoryStream.type =
    org.apache.spark.sql.execution.streaming.runtime.MemoryStream

  /** A stream of ints for tests (its factory's signature differs by line). */
  def intStream(spark: SparkSession, numPartitions: Int): MemoryStream[Int] =
    MemoryStream[Int](spark, numPartitions)(Encoders.scalaInt)
}
