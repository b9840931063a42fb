package io.batchlog.bench

import java.nio.file.{Files, Path => JPath, Paths, StandardCopyOption}

import scala.jdk.CollectionConverters._

import org.apache.hadoop.fs.{Path => HPath}
import org.apache.hadoop.io.IOUtils

import org.apache.spark.sql.SparkSession
import io.batchlog.shim.{FileStreamSinkLog, SinkFileStatus}

import io.batchlog.log.{BatchTaggedFileStreamSinkLog, SinkLogEntry}

/**
 * Builds Spark's `FileStreamSinkLog` and batchlog's log side by side, in one JVM, from the same
 * entries (`batches` x `entries / batches`, compactInterval 10, Spark's defaults otherwise) and
 * measures, each `--repeat` times: all the adds of a build, the last compaction (time and peak live
 * heap) with a plain copy of the compact file it writes measured right beside it, and a listing of
 * every live file. Each compaction repeat starts from the same log (hard links of the log as it was
 * before the last batch), so every repeat does the same work.
 *
 * Prints a table (best of the repeats, and their spread) and writes every figure to `--json FILE`
 * for `bench/report.py`, which judges the targets. Keeps batchlog's logs under `--dir` for
 * [[FilesBench]].
 *
 * Usage: SinkLogBench [--entries N[,N...]] [--batches B] [--repeat R] [--vanilla-max N] [--dir DIR]
 * [--json FILE]
 */
object SinkLogBench {

  def main(args: Array[String]): Unit = {
    val opts = Opts(args)
    val sizes = opts.longs("--entries", "100000,1000000")
    val batches = opts.int("--batches", 200)
    val repeat = opts.int("--repeat", 3)
    val compactions = opts.int("--compactions", repeat) // more to profile the compaction alone
    val vanillaMax = opts.long("--vanilla-max", 1000000L)
    val root =
      Paths.get(opts.get("--dir").getOrElse(Files.createTempDirectory("bl-bench").toString))
    val spark = SparkSession.builder().master("local[1]").appName("batchlog-bench")
      .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "1")
      .getOrCreate() // Spark's defaults: old log files stay 10 minutes, so no add deletes any
    spark.sparkContext.setLogLevel("ERROR")
    val heapMiB = Runtime.getRuntime.maxMemory() >> 20
    println(s"JVM max heap $heapMiB MiB; work dir $root; best of $repeat")
    val figures = sizes.flatMap { n =>
      new SizeRun(spark, root.resolve(s"n$n"), n, batches, repeat, compactions, n <= vanillaMax).run()
    }
    spark.stop()
    opts.get("--json").foreach(f => Figures.write(Paths.get(f), "log", heapMiB, figures))
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

  /** One log implementation under test. */
  sealed trait Impl {
    def name: String
    def open(spark: SparkSession, dir: JPath): Log
  }

  trait Log {

    /** What `FileStreamSink.addBatch` asks its log before every batch. */
    def latest(): Option[Long]

    /**
     * Makes the log as a running query's is before a batch: it has used its file system (a query's
     * log does on every batch; the first use of a fresh one costs milliseconds, once per query).
     */
    def warm(): Unit
    def add(batch: Int, entries: Array[SinkFileStatus]): Boolean
    def countLive(): Long
  }

  object Vanilla extends Impl {
    val name = "vanilla"
    def open(spark: SparkSession, dir: JPath): Log = new Log {
      private val log = new FileStreamSinkLog(FileStreamSinkLog.VERSION, spark, dir.toString)
      def latest() = log.getLatestBatchId()
      def warm(): Unit = log.getLatestBatchId() // lists the log through its manager
      def add(b: Int, e: Array[SinkFileStatus]) = log.add(b, e)
      def countLive() = log.allFiles().length.toLong
    }
  }

  object Batchlog extends Impl {
    val name = "batchlog"
    def open(spark: SparkSession, dir: JPath): Log = new Log {
      private val log = new BatchTaggedFileStreamSinkLog(spark, dir.toString)
      def latest() = log.getLatestBatchId()
      // getLatestBatchId lists the local disk directly: the manager is first used by the probe
      // every add makes for the previous batch's file
      def warm(): Unit = { log.getLatestBatchId(); log.isLogged(0L) }
      def add(b: Int, e: Array[SinkFileStatus]) = log.add(b, e.map(SinkLogEntry(_, b.toLong)))
      def countLive() = { var n = 0L; log.foreachLiveEntry(_ => n += 1); n }
    }
  }

  final class SizeRun(
      spark: SparkSession,
      dir: JPath,
      entries: Long,
      batches: Int,
      repeat: Int,
      compactions: Int,
      withVanilla: Boolean
  ) {
    private val perBatch = (entries / batches).toInt
    private val total = perBatch.toLong * batches
    private val last = batches - 1
    private val compactName = s"$last.compact"
    private def batch(b: Int) = Array.tabulate(perBatch)(i => entry(b, i))
    private val figures = Seq.newBuilder[Figure]
    private def record(measure: String, impl: String, unit: String, values: Seq[Double]): Unit = {
      figures += Figure(total, measure, impl, unit, values)
      val best = values.min
      println(
        f"  $measure%-34s $impl%-9s best ${fmt(best)}%12s $unit%-3s  spread ${spread(values)}"
      )
    }

    def run(): Seq[Figure] = {
      println(f"\n=== $total%,d entries: $batches batches x $perBatch%,d, compactInterval 10 ===")
      val impls = (if (withVanilla) Seq(Vanilla) else Nil) :+ Batchlog
      impls.foreach(measureImpl)
      figures.result()
    }

    /**
     * Builds the log `repeat` times (all adds), then repeats its last compaction from hard links.
     */
    private def measureImpl(impl: Impl): Unit = {
      val base = dir.resolve(impl.name)
      val before = dir.resolve(s"${impl.name}-before-last")
      val logDir = base.resolve("_spark_metadata")
      val adds = (1 to repeat).map { rep =>
        System.err.print(s"[${impl.name} $total build ${rep}/$repeat]")
        Tree.delete(base); Tree.delete(before)
        val log = impl.open(spark, logDir)
        var ms = 0.0
        (0 until last).foreach { b =>
          val e = batch(b)
          ms += time(require(log.add(b, e)))
          if (b % 50 == 49) System.err.print(s" $b")
        }
        Tree.link(logDir, before) // the log before its last batch, for the compaction repeats
        val e = batch(last)
        ms += time(require(log.add(last, e)))
        System.err.println()
        ms
      }
      record(s"all $batches adds", impl.name, "ms", adds)

      val lastEntries = batch(last)
      val compacted = (1 to compactions).map { rep =>
        val d = dir.resolve(s"${impl.name}-rep$rep")
        Tree.delete(d); Tree.link(before, d)
        val log = impl.open(spark, d)
        // As in a running query: the sink asked its log for the latest batch first, and the log
        // has used its file system (whose first use costs milliseconds, once per log).
        require(log.latest().contains(last - 1L))
        log.warm()
        val m = HeapMeter.measure(require(log.add(last, lastEntries)))
        val copies = (copyKernel(d.resolve(compactName)), copyHadoop(d.resolve(compactName)))
        Tree.delete(d)
        (m.ms, m.peakBytes / 1048576.0, copies)
      }
      record("last compaction", impl.name, "ms", compacted.map(_._1))
      record("last compaction (peak live heap)", impl.name, "MiB", compacted.map(_._2))
      if (impl == Batchlog) {
        val size = Files.size(logDir.resolve(compactName)).toDouble
        record("copy of the compact file", "kernel", "ms", compacted.map(_._3._1))
        record("copy of the compact file", "hadoop-fs", "ms", compacted.map(_._3._2))
        record("compact file size", impl.name, "MiB", Seq(size / 1048576))
      }
      val lists = (1 to repeat).map { _ =>
        val log = impl.open(spark, logDir)
        val m = HeapMeter.measure(log.countLive())
        require(m.result == total, s"${impl.name} lists ${m.result}, not $total")
        (m.ms, m.peakBytes / 1048576.0)
      }
      record("list all live files", impl.name, "ms", lists.map(_._1))
      record("list all live files (peak live heap)", impl.name, "MiB", lists.map(_._2))
      Tree.delete(before)
      if (impl == Vanilla) Tree.delete(base) // batchlog's stays, for FilesBench
    }

    /** A plain copy by the OS (`Files.copy`): the floor for writing the same bytes. */
    private def copyKernel(src: JPath): Double = {
      val dst = src.resolveSibling("copy-kernel")
      val ms = time(Files.copy(src, dst, StandardCopyOption.REPLACE_EXISTING))
      Files.delete(dst)
      ms
    }

    /**
     * A plain copy through Hadoop's file system (checksummed on local disk, as every log write).
     */
    private def copyHadoop(src: JPath): Double = {
      val from = new HPath(src.toUri)
      val fs = from.getFileSystem(spark.sessionState.newHadoopConf())
      val to = new HPath(from.getParent, "copy-hadoop")
      val ms = time {
        val in = fs.open(from, 1 << 20)
        val out = fs.create(to, true, 1 << 20)
        try IOUtils.copyBytes(in, out, 1 << 20)
        finally { in.close(); out.close() }
      }
      fs.delete(to, false)
      ms
    }
  }

  def time(body: => Unit): Double = {
    val t0 = System.nanoTime(); body; (System.nanoTime() - t0) / 1e6
  }

  def fmt(x: Double): String = if (x >= 100) f"$x%,.0f" else f"$x%.2f"

  /** How far the repeats are apart: (max - min) / min. */
  def spread(values: Seq[Double]): String =
    if (values.length < 2 || values.min <= 0) "-"
    else f"${(values.max / values.min - 1) * 100}%.0f%%"
}

/** One figure: every repeat of one measure of one implementation at one size. */
final case class Figure(
    entries: Long,
    measure: String,
    impl: String,
    unit: String,
    values: Seq[Double]
)

object Figures {
  private def str(s: String) = "\"" + s.replace("\\", "\\\\").replace("\"", "\\\"") + "\""

  /** `{"kind":…, "maxHeapMiB":…, "figures":[{entries, measure, impl, unit, values}]}` */
  def write(file: JPath, kind: String, heapMiB: Long, figures: Seq[Figure]): Unit = {
    val rows = figures.map { f =>
      s"""{"entries":${f.entries},"measure":${str(f.measure)},"impl":${str(f.impl)},""" +
        s""""unit":${str(f.unit)},"values":[${f.values.map(v => f"$v%.3f").mkString(",")}]}"""
    }
    Files.write(
      file,
      s"""{"kind":${str(kind)},"maxHeapMiB":$heapMiB,"figures":[\n${rows.mkString(",\n")}\n]}\n"""
        .getBytes("UTF-8")
    )
    println(s"figures written to $file")
  }
}

/** `--key value` options. */
final case class Opts(args: Array[String]) {
  private val map =
    args.sliding(2, 1).collect { case Array(k, v) if k.startsWith("--") => k -> v }.toMap
  def get(k: String): Option[String] = map.get(k)
  def int(k: String, d: Int): Int = map.get(k).map(_.toInt).getOrElse(d)
  def long(k: String, d: Long): Long = map.get(k).map(_.toLong).getOrElse(d)
  def longs(k: String, d: String): Seq[Long] =
    map.getOrElse(k, d).split(',').map(_.trim.toLong).toSeq
}

/** Flat directory trees of log files. */
object Tree {
  def delete(p: JPath): Unit = if (Files.exists(p)) {
    val s = Files.walk(p)
    try s.iterator().asScala.toSeq.reverse.foreach(Files.delete)
    finally s.close()
  }

  /** `to` gets a hard link to every file of `from` (log files are never changed in place). */
  def link(from: JPath, to: JPath): Unit = {
    Files.createDirectories(to)
    val s = Files.list(from)
    try s.iterator().asScala.foreach(f => Files.createLink(to.resolve(f.getFileName), f))
    finally s.close()
  }
}
