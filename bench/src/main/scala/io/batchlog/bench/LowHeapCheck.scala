package io.batchlog.bench

import java.nio.file.{Files, Paths}

import org.apache.hadoop.fs.Path

import org.apache.spark.sql.SparkSession

import io.batchlog.BatchLog
import io.batchlog.log.{BatchTaggedFileStreamSinkLog, SinkLogEntry}

/**
 * batchlog in a driver with a small heap (run with -Xmx256m): builds a log of `--entries` (default
 * 10M) entries through every compaction, then calls `files(batch)` for the first, middle and last
 * batch, counts `entries()` through Spark, and reads the sink's rows of the last batch (whose
 * entries point at real parquet files) through `batchlog.read`. Prints each step's time and the
 * JVM's max heap; any OutOfMemoryError fails the run.
 */
object LowHeapCheck {
  def main(args: Array[String]): Unit = {
    val opts = args.sliding(2, 1).collect { case Array(k, v) if k.startsWith("--") => k -> v }.toMap
    val total = opts.getOrElse("--entries", "10000000").toLong
    val batches = opts.getOrElse("--batches", "200").toInt
    val perBatch = (total / batches).toInt
    val root = Files.createTempDirectory("batchlog-lowheap")
    val spark = SparkSession.builder().master("local[2]").appName("batchlog-lowheap")
      .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
      .config("spark.testing.memory", (512L << 20).toString) // accept a heap below 450 MiB
      .getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    println(
      f"max heap ${Runtime.getRuntime.maxMemory() >> 20} MiB; $batches batches x $perBatch%,d entries; dir $root"
    )
    def timed[A](what: String)(body: => A): A = {
      val t0 = System.nanoTime(); val r = body
      println(f"$what%-52s ${(System.nanoTime() - t0) / 1e6}%,10.1f ms  -> $r")
      r
    }

    // The last batch points at real parquet files, so its rows can be read back.
    val out = root.resolve("sink")
    val dataDir = root.resolve("data").toString
    spark.range(0, 1000, 1, 4).selectExpr("id", "id % 3 AS p").write.parquet(dataDir)
    val fs = new Path(dataDir).getFileSystem(spark.sessionState.newHadoopConf())
    val realFiles = fs.listStatus(new Path(dataDir)).filter(_.getPath.getName.endsWith(".parquet"))
    val last = batches - 1
    val realEntries = realFiles.zipWithIndex.map { case (st, i) =>
      val dest =
        new Path(out.toString, f"part-$i%05d-batch-$last-00000000-0000-0000-0000-${i}%012d.parquet")
      fs.mkdirs(dest.getParent); fs.rename(st.getPath, dest)
      val s = fs.getFileStatus(dest)
      SinkLogEntry(
        dest.toUri.toString,
        s.getLen,
        isDir = false,
        s.getModificationTime,
        1,
        s.getBlockSize,
        "add",
        Some(last.toLong)
      )
    }

    val log = new BatchTaggedFileStreamSinkLog(spark, out.resolve("_spark_metadata").toString)
    timed(s"build the log: $batches adds, ${batches / 10} compactions") {
      (0 until batches).foreach { b =>
        val es =
          if (b == last) realEntries
          else Array.tabulate(perBatch)(i => SinkLogEntry(SinkLogBench.entry(b, i), b.toLong))
        require(log.add(b, es))
      }
      s"latest batch ${log.getLatestBatchId().get}"
    }
    val api = BatchLog.forPath(spark, out.toString)
    Seq(0, batches / 2, last).foreach(b =>
      timed(s"files(batch $b)")(s"${api.files(b).length} files")
    )
    timed("entries().count() (read by Spark)")(api.entries().count())
    timed(s"read(from_batch=$last, to_batch=$last).count()") {
      api.read("parquet", Long.box(last.toLong), Long.box(last.toLong)).count()
    }
    println("low-heap check: all steps completed")
    spark.stop()
  }
}
