package io.batchlog.ops

import scala.collection.mutable

import org.apache.spark.sql.{DataFrame, Row, SparkSession}

import io.batchlog.{BatchLogException, SinkLogApi}

/**
 * The sink's rows written by a range of batches, as a DataFrame over exactly those batches' live
 * files, with the sink's schema (partition columns included): time travel "as of batch N" (`to`
 * only) and incremental reads for downstream jobs (`from`, `to`).
 */
object ReadByBatch {

  def apply(
      spark: SparkSession,
      sinkPath: String,
      format: String,
      from: Option[Long],
      to: Option[Long]
  ): DataFrame = {
    from.filter(_ < 0).foreach(b =>
      throw BatchLogException.invalidArgument("from_batch", b, "it must be >= 0")
    )
    to.filter(_ < 0).foreach(b =>
      throw BatchLogException.invalidArgument("to_batch", b, "it must be >= 0")
    )
    for (f <- from; t <- to if f > t) {
      throw BatchLogException.invalidArgument("from_batch", f, s"it must be <= to_batch ($t)")
    }
    val api = new SinkLogApi(spark, sinkPath)
    val sink = api.metadataPath.getParent.toString
    val inRange = (b: Long) => from.forall(b >= _) && to.forall(b <= _)
    val paths = mutable.ArrayBuffer.empty[String]
    var untagged = 0L
    api.log.foreachLiveEntry { e =>
      e.batchId match {
        case Some(b) => if (inRange(b)) paths += e.path
        case None => untagged += 1; if (from.isEmpty && to.isEmpty) paths += e.path
      }
    }
    if (untagged > 0 && (from.isDefined || to.isDefined)) {
      throw BatchLogException.invalidArgument(
        "batch range",
        s"[${from.getOrElse("")}, ${to.getOrElse("")}]",
        s"$untagged live files of $sink have no provable batch (written by plain Spark); run " +
          s"`python -m batchlog adopt $sink` to tag what can be proven"
      )
    }
    val schema = spark.read.format(format).load(sink).schema
    if (paths.isEmpty) spark.createDataFrame(java.util.Collections.emptyList[Row](), schema)
    else spark.read.format(format).schema(schema).option("basePath", sink).load(paths.toSeq: _*)
  }
}
