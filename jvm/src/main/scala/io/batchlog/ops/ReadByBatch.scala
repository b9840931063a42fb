package io.batchlog.ops

import scala.collection.mutable

import org.apache.spark.sql.{DataFrame, Row, SparkSession}

import io.batchlog.BatchLogException
import io.batchlog.log.BatchTaggedFileStreamSinkLog

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
    val meta = BatchTaggedFileStreamSinkLog.metadataPathOf(spark, sinkPath)
    val log = new BatchTaggedFileStreamSinkLog(spark, meta.toString)
    val sink = meta.getParent.toString
    val inRange = (b: Long) => from.forall(b >= _) && to.forall(b <= _)
    val unrestricted = from.isEmpty && to.isEmpty
    val paths = mutable.ArrayBuffer.empty[String]
    var untagged = 0L
    // Only the entries of the range are read (through the compact file's index).
    log.foreachLiveEntryWhere(_.forall(inRange)) { e =>
      if (e.batchId.isEmpty) untagged += 1
      if (e.batchId.isDefined || unrestricted) paths += e.path
    }
    if (untagged > 0 && !unrestricted) {
      throw BatchLogException.invalidArgument(
        "batch range",
        s"[${from.getOrElse("")}, ${to.getOrElse("")}]",
        s"$untagged live files of $sink have no provable batch (written by plain Spark); run " +
          s"`python -m batchlog adopt $sink` to tag what can be proven"
      )
    }
    // The schema comes from the files read (or, for an empty range, one live file), not from
    // loading the whole log: a driver with a small heap can read a range of a huge sink.
    val reader = spark.read.format(format).option("basePath", sink)
    if (paths.nonEmpty) reader.load(paths.toSeq: _*)
    else {
      val sample = log.firstLiveEntry().getOrElse(
        throw BatchLogException.invalidArgument(
          "path",
          sink,
          "the sink has no files to read a schema from"
        )
      )
      spark.createDataFrame(java.util.Collections.emptyList[Row](), reader.load(sample.path).schema)
    }
  }
}
