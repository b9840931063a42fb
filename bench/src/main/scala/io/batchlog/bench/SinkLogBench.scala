package io.batchlog.bench

import java.nio.file.{Files, Paths, StandardCopyOption}

import org.apache.hadoop.fs.Path

import org.apache.spark.sql.SparkSession
import io.batchlog.shim.{FileStreamSinkLog, SinkFileStatus}

import io.batchlog.BatchLog
import io.batchlog.log.{BatchTaggedFileStreamSinkLog, SinkLogEntry}

/**
 * Builds Spark 4.3's `FileStreamSinkLog` and batchlog's log side by side, in one JVM, from the same
 * entries (`batches` x `perBatch`, compactInterval 10, Spark's defaults otherwise), and prints for
 * each: the last compaction's time and peak live heap, the total time of all `add` calls, the time
 * and peak live heap of listing every live file, `files(batch)` for the first, middle and last
 * batch, and a plain copy of the final compact file; with their ratios.
 *
 * Usage: SinkLogBench [--entries N[,N...]] [--batches B] [--skip-vanilla] [--dir DIR]
 */
object SinkLogBench {

  def main(args: Array[String]): Unit = {
    val opts = args.sliding(2, 1).collect { case Array(k, v) if k.startsWith("--") => k -> v }.toMap
    val sizes = opts.getOrElse("--entries", "100000,1000000").split(',').map(_.trim.toLong)
    val batches = opts.getOrElse("--batches", "200").toInt
    val skipVanilla = args.contains("--skip-vanilla")
    val root =
      Paths.get(opts.getOrElse("--dir", Files.createTempDirectory("batchlog-bench").toString))
    val spark = SparkSession.builder().master("local[1]").appName("batchlog-bench")
      .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "1")
      .getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    println(s"JVM max heap ${Runtime.getRuntime.maxMemory() >> 20} MiB; work dir $root")
    sizes.foreach(n => runSize(spark, root.resolve(s"n$n"), n, batches, skipVanilla))
    spark.stop()
  }

  /** A deterministic entry: a realistic partitioned parquet path (~130 bytes). */
  def entry(batch: Int, i: Int): SinkFileStatus = SinkFileStatus(
    f"file:///data/events/country=c${i % 50}%02d/part-${i % 1000}%05d-batch-$batch-" +
      f"${batch}%08x-${i}%04x-4b1e-9c3a-${(batch.toLong * 1000003 + i)}%012x.c000.snappy.parquet",
    1000L + i,
    isDir = false,
    1700000000000L + batch * 1000L,
    1,
    134217728L,
    "add"
  )

  final case class Row(name: String, vanilla: Option[Double], batchlog: Double, unit: String)

  def runSize(
      spark: SparkSession,
      dir: java.nio.file.Path,
      entries: Long,
      batches: Int,
      skipVanilla: Boolean
  ): Unit = {
    val perBatch = (entries / batches).toInt
    val total = perBatch.toLong * batches
    println(f"\n=== $total%,d entries: $batches batches x $perBatch%,d, compactInterval 10 ===")
    val vDir = dir.resolve("vanilla/_spark_metadata").toString
    val oDir = dir.resolve("batchlog/_spark_metadata").toString
    val lastBatch = batches - 1
    def batchOf(b: Int) = Array.tabulate(perBatch)(i => entry(b, i))

    def build(add: (Int, Array[SinkFileStatus]) => Unit): (Double, HeapMeter.Measured[Unit]) = {
      var addMs = 0.0
      var last: HeapMeter.Measured[Unit] = null
      (0 until batches).foreach { b =>
        val e = batchOf(b)
        if (b == lastBatch) { last = HeapMeter.measure(add(b, e)); addMs += last.ms }
        else { val t0 = System.nanoTime(); add(b, e); addMs += (System.nanoTime() - t0) / 1e6 }
        if ((b + 1) % 50 == 0) System.err.print(s"  $b")
      }
      System.err.println()
      (addMs, last)
    }

    val vanilla = if (skipVanilla) None
    else {
      System.err.println("building vanilla FileStreamSinkLog ...")
      val log = new FileStreamSinkLog(FileStreamSinkLog.VERSION, spark, vDir)
      val (addMs, lastCompaction) = build((b, e) => log.add(b, e))
      val list = HeapMeter.measure(log.allFiles().length)
      require(list.result == total, s"vanilla lists ${list.result}")
      Some((addMs, lastCompaction, list))
    }

    System.err.println("building batchlog BatchTaggedFileStreamSinkLog ...")
    val ours = new BatchTaggedFileStreamSinkLog(spark, oDir)
    val (oAddMs, oLast) = build((b, e) => ours.add(b, e.map(SinkLogEntry(_, b.toLong))))
    val oList = HeapMeter.measure { var n = 0L; ours.foreachLiveEntry(_ => n += 1); n }
    require(oList.result == total, s"batchlog lists ${oList.result}")

    val api = BatchLog.forPath(spark, dir.resolve("batchlog").toString)
    val filesMs = Seq(0, batches / 2, lastBatch).map { b =>
      api.files(b) // warm-up (the first call may build nothing: the index is written at compaction)
      val m = HeapMeter.measure(api.files(b).length)
      require(m.result == perBatch, s"files($b) = ${m.result}")
      b -> m.ms
    }
    val compactName = s"$lastBatch.compact"
    def copyMs(from: String): Double = {
      val src = Paths.get(new Path(from).toUri.getPath, compactName)
      val dst = src.resolveSibling("copy-of-" + compactName)
      val t0 = System.nanoTime()
      Files.copy(src, dst, StandardCopyOption.REPLACE_EXISTING)
      val ms = (System.nanoTime() - t0) / 1e6
      Files.delete(dst)
      ms
    }
    val oCopy = copyMs(oDir)
    val oSize = Files.size(Paths.get(oDir, compactName))

    val rows = Seq(
      Row("last compaction (time)", vanilla.map(_._2.ms), oLast.ms, "ms"),
      Row(
        "last compaction (peak live heap)",
        vanilla.map(_._2.peakBytes / 1048576.0),
        oLast.peakBytes / 1048576.0,
        "MiB"
      ),
      Row(s"all $batches adds (time)", vanilla.map(_._1), oAddMs, "ms"),
      Row("list all live files (time)", vanilla.map(_._3.ms), oList.ms, "ms"),
      Row(
        "list all live files (peak live heap)",
        vanilla.map(_._3.peakBytes / 1048576.0),
        oList.peakBytes / 1048576.0,
        "MiB"
      )
    ) ++
      filesMs.map { case (b, ms) => Row(s"files(batch $b)", None, ms, "ms") } ++
      Seq(Row(s"copy of $compactName (${oSize >> 20} MiB)", None, oCopy, "ms"))
    println(f"${"measure"}%-40s ${"vanilla"}%14s ${"batchlog"}%14s ${"batchlog/vanilla"}%17s")
    rows.foreach { r =>
      val v = r.vanilla.map(x => f"$x%,.1f ${r.unit}").getOrElse("n/a")
      val ratio = r.vanilla.filter(_ > 0).map(x => f"${r.batchlog / x}%.3f").getOrElse("")
      println(f"${r.name}%-40s $v%14s ${f"${r.batchlog}%,.1f ${r.unit}"}%14s $ratio%17s")
    }
    println(f"target: last compaction <= 1/10 of vanilla: ${vanilla
        .map(v => if (oLast.ms * 10 <= v._2.ms) "MET" else "NOT MET").getOrElse("n/a")}" +
      f" (ratio ${vanilla.map(v => oLast.ms / v._2.ms).getOrElse(Double.NaN)}%.3f)")
    println(f"target: last compaction <= 2x a plain copy of the compact file: " +
      f"${if (oLast.ms <= 2 * oCopy) "MET" else "NOT MET"} (${oLast.ms / oCopy}%.2fx the copy)")
    println(f"target: files(batch) < 100 ms for any batch: ${if (filesMs.forall(_._2 < 100)) "MET"
      else "NOT MET"}" +
      f" (max ${filesMs.map(_._2).max}%.1f ms)")
    println(
      "files(batch): vanilla n/a — Spark's compacted log does not record which batch wrote a file"
    )
  }
}
