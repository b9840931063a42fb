package io.batchlog.bench

import java.nio.file.{Files, Paths}

import scala.jdk.CollectionConverters._

import org.apache.spark.sql.SparkSession

import io.batchlog.BatchLog

/**
 * `files(batch)` and `batch_of(path)` on the logs [[SinkLogBench]] left under `--dir`
 * (`n<N>/batchlog`), in this JVM (run it with a small heap, e.g. -Xmx256m): for the first, middle
 * and last batch, each call repeated `--repeat` times on a fresh `BatchLog` (nothing cached between
 * calls). Records the slowest batch's best time per size, so that a flat curve means every batch is
 * fast at every size.
 *
 * Usage: FilesBench --dir DIR [--repeat R] [--json FILE]
 */
object FilesBench {
  def main(args: Array[String]): Unit = {
    val opts = Opts(args)
    val root = Paths.get(opts.get("--dir").getOrElse(sys.error("--dir is required")))
    val repeat = opts.int("--repeat", 3)
    val spark = SparkSession.builder().master("local[1]").appName("batchlog-files-bench")
      .config("spark.ui.enabled", "false")
      .config("spark.testing.memory", (512L << 20).toString) // accept a heap below 450 MiB
      .getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    val heapMiB = Runtime.getRuntime.maxMemory() >> 20
    println(s"files(batch) / batch_of(path) in a $heapMiB MiB driver; best of $repeat")
    val sizes = {
      val s = Files.list(root)
      try s.iterator().asScala.map(_.getFileName.toString).filter(_.matches("n\\d+")).toSeq
      finally s.close()
    }.map(_.drop(1).toLong).sorted
    val figures = sizes.flatMap { n =>
      val sink = root.resolve(s"n$n/batchlog").toString
      val latest = BatchLog.forPath(spark, sink).latestBatch()
      val perBatch = BatchLog.forPath(spark, sink).files(latest).length
      val total = (latest + 1) * perBatch
      val wanted = Seq(0L, latest / 2, latest)
      def slowest(what: String, call: (BatchLog, Long) => Unit): Figure = {
        val perBatchBest = wanted.map { b =>
          val times = (1 to repeat).map { _ =>
            val api = BatchLog.forPath(spark, sink)
            SinkLogBench.time(call(api, b))
          }
          println(
            f"  $total%,14d entries  $what%-16s batch $b%4d  best ${SinkLogBench.fmt(times.min)}%9s ms" +
              s"  spread ${SinkLogBench.spread(times)}"
          )
          times
        }
        Figure(total, what, "batchlog", "ms", perBatchBest.maxBy(_.min))
      }
      val fileOf = wanted.map(b => b -> BatchLog.forPath(spark, sink).files(b).last).toMap
      Seq(
        slowest("files(batch)", (api, b) => require(api.files(b).length == perBatch)),
        slowest("batch_of(path)", (api, b) => require(api.batchOf(fileOf(b)) == b))
      )
    }
    spark.stop()
    opts.get("--json").foreach(f => Figures.write(Paths.get(f), "files", heapMiB, figures))
  }
}
