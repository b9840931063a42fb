package io.batchlog.bench

import java.nio.charset.StandardCharsets.UTF_8
import java.nio.file.{Files, Path => JPath, Paths}

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.streaming.{StreamingQuery, Trigger}

import io.batchlog.BatchLog
import io.batchlog.log.{BatchTaggedFileStreamSinkLog, SinkLogEntry}

/**
 * Lookups against the number of batches (issue 24, benchmark 2): sink logs of `--batches` batches
 * (`--per-batch` entries each, compactInterval `--interval`, no entry ever dropped, so the latest
 * compact file's index has one run per batch), written through the log class as a query's committer
 * writes them (expired log files deleted at once: the sink as it is 10 minutes after a compaction),
 * and in this JVM (run it with -Xmx256m). The interval is 100, not Spark's 10: at 10, writing
 * 100,000 batches would copy ~450 GB through compactions; the index (one run per batch) is the same
 * at any interval.
 *
 *   - `files(b)` and `batch_of(path)`, for the first, middle and last batch, cold (a new
 *     `BatchLog`, first call) and warm (the same `BatchLog`, called again); the slowest batch's
 *     figure;
 *   - a downstream trigger: a `batchlog` streaming source (`startingBatch` latest, `noop` sink)
 *     over the sink while `--triggers` new batches are committed one by one (one of them a
 *     compaction, in the middle): planning per micro-batch (`latestOffset` + `getBatch` +
 *     `queryPlanning`, from its progress), the median and the worst of them;
 *   - a rewind dry run (the plan) to 10 batches back, with a checkpoint written as a query's (its
 *     last 100 offsets and commits).
 *
 * Each figure is the best of `--repeat` (its spread shown). The logs stay under `--dir` (`b<N>/`)
 * and are reused by a later run (a 100,000-batch log takes minutes to write).
 *
 * Usage: LookupBench [--batches 1000,10000,100000] [--per-batch 3] [--interval 10] [--repeat 3]
 * [--triggers 10] [--dir DIR] [--json FILE]
 */
object LookupBench {

  def main(args: Array[String]): Unit = {
    val opts = Opts(args)
    val sizes = opts.longs("--batches", "1000,10000,100000")
    val perBatch = opts.int("--per-batch", 3)
    val interval = opts.int("--interval", 100)
    val repeat = opts.int("--repeat", 3)
    val triggers = opts.int("--triggers", 10)
    val root =
      Paths.get(opts.get("--dir").getOrElse(Files.createTempDirectory("bl-lookup").toString))
    val spark = SparkSession.builder().master("local[1]").appName("batchlog-lookup-bench")
      .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "1")
      .config("spark.testing.memory", (512L << 20).toString) // accept a heap below 450 MiB
      .config("spark.sql.streaming.fileSink.log.compactInterval", interval.toString)
      .config("spark.sql.files.ignoreMissingFiles", "true")
      // a sink as it is 10 minutes (Spark's default delay) after each compaction: only the latest
      // compact file and the batch files after it are left
      .config("spark.sql.streaming.fileSink.log.cleanupDelay", "0")
      .getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    val heapMiB = Runtime.getRuntime.maxMemory() >> 20
    println(s"lookups in a $heapMiB MiB driver; compactInterval $interval, $perBatch entries a " +
      s"batch; best of $repeat")
    val figures = sizes.flatMap { n =>
      new SizeRun(spark, root.resolve(s"b$n"), n, perBatch, interval, repeat, triggers)
        .run(warmUp = n == sizes.head)
    }
    spark.stop()
    opts.get("--json").foreach(f => Figures.write(Paths.get(f), "lookup", heapMiB, figures))
  }

  final class SizeRun(
      spark: SparkSession,
      dir: JPath,
      batches: Long,
      perBatch: Int,
      interval: Int,
      repeat: Int,
      triggers: Int
  ) {
    private val sink = dir.resolve("sink")
    private val meta = sink.resolve("_spark_metadata")
    private val figures = Seq.newBuilder[Figure]

    private def entry(b: Long, i: Int): SinkLogEntry = SinkLogEntry(
      sink.toUri.toString.stripSuffix("/") + f"/part-$i%05d-batch-$b-$b%08x-$i%04x-4b1e-9c3a-" +
        f"${b * 1000003 + i}%012x.c000.snappy.parquet",
      1000L + i,
      isDir = false,
      1700000000000L + b * 1000L,
      1,
      134217728L,
      "add",
      Some(b)
    )

    private def record(measure: String, values: Seq[Double], note: String = ""): Unit = {
      figures += Figure(batches, measure, "batchlog", "ms", values)
      println(
        f"  $batches%,9d batches  $measure%-34s best ${SinkLogBench.fmt(values.min)}%9s ms" +
          s"  spread ${SinkLogBench.spread(values)}$note"
      )
    }

    private def build(): BatchTaggedFileStreamSinkLog = {
      val log = new BatchTaggedFileStreamSinkLog(spark, meta.toString)
      val from = log.getLatestBatchId().map(_ + 1).getOrElse(0L)
      if (from < batches) {
        System.err.print(s"[writing batches $from..${batches - 1}]")
        val t0 = System.nanoTime()
        (from until batches).foreach { b =>
          require(log.add(b, Array.tabulate(perBatch)(entry(b, _))))
          if (b % 10000 == 9999) System.err.print(s" $b")
        }
        System.err.println(f" ${(System.nanoTime() - t0) / 1e9}%.0f s")
      }
      log
    }

    /** `warmUp`: the lookups once before they are measured (the JVM's first, JIT-cold calls). */
    def run(warmUp: Boolean): Seq[Figure] = {
      println(f"\n=== $batches%,d batches x $perBatch entries ===")
      val log = build()
      // first: its new batches make the latest compact file one written by this build of the log
      measureTriggers(log)
      val latest = log.getLatestBatchId().get
      val wanted = Seq(0L, latest / 2, latest)
      val fileOf = wanted.map(b => b -> BatchLog.forPath(spark, sink.toString).files(b).last).toMap
      def lookups(what: String, call: (BatchLog, Long) => Unit): Unit = {
        if (warmUp) wanted.foreach(b => call(BatchLog.forPath(spark, sink.toString), b))
        def slowest(warm: Boolean) = wanted.map { b =>
          (1 to repeat).map { _ =>
            val api = BatchLog.forPath(spark, sink.toString)
            if (warm) call(api, b)
            SinkLogBench.time(call(api, b))
          }
        }.maxBy(_.min)
        record(s"$what cold", slowest(warm = false))
        record(s"$what warm", slowest(warm = true))
      }
      lookups("files(b)", (api, b) => require(api.files(b).length == perBatch))
      lookups("batch_of(path)", (api, b) => require(api.batchOf(fileOf(b)) == b))

      val cp = writeCheckpoint(latest)
      val rewinds = (1 to repeat).map { _ =>
        SinkLogBench.time {
          val plan = BatchLog.forPath(spark, sink.toString).rewind(cp, latest - 9).plan()
          require(plan.dataFiles.length == 10 * perBatch, plan.dataFiles.length)
        }
      }
      record("rewind dry run", rewinds)
      figures.result()
    }

    /** A checkpoint as a query's that wrote the sink up to `latest`: its last 100 batches. */
    private def writeCheckpoint(latest: Long): String = {
      val cp = dir.resolve("checkpoint")
      Tree.delete(cp)
      def write(p: JPath, s: String): Unit = {
        Files.createDirectories(p.getParent); Files.write(p, s.getBytes(UTF_8))
      }
      write(cp.resolve("metadata"), """{"id":"8f1c0000-0000-0000-0000-0000000000b1"}""")
      (math.max(0L, latest - 99) to latest).foreach { b =>
        write(
          cp.resolve(s"offsets/$b"),
          "v1\n{\"batchWatermarkMs\":0,\"batchTimestampMs\":0,\"conf\":{}}\n{\"offset\":" + b + "}"
        )
        write(cp.resolve(s"commits/$b"), "v1\n{\"nextBatchWatermarkMs\":0}")
      }
      cp.toString
    }

    /**
     * `repeat` times: a downstream query over the sink from its next batch, `triggers` new batches
     * committed one by one, each read by one micro-batch; its planning per micro-batch.
     */
    private def measureTriggers(log: BatchTaggedFileStreamSinkLog): Unit = {
      val runs = (1 to repeat).map { rep =>
        // a compaction in the middle of the triggers
        def add(): Long = {
          val b = log.getLatestBatchId().get + 1
          require(log.add(b, Array.tabulate(perBatch)(entry(b, _))))
          b
        }
        while ((log.getLatestBatchId().get + 1 + triggers / 2) % interval != 0) add()
        val cp = dir.resolve(s"downstream-$rep")
        Tree.delete(cp)
        val q: StreamingQuery = spark.readStream.format("batchlog").schema("id LONG")
          .option("format", "parquet").option("startingBatch", "latest").load(sink.toString)
          .writeStream.format("noop").option("checkpointLocation", cp.toString)
          .trigger(Trigger.ProcessingTime(0L)).start()
        try {
          q.processAllAvailable()
          (1 to triggers).map { _ =>
            val b = add()
            q.processAllAvailable()
            val p = q.recentProgress.filter(_.numInputRows >= 0).filter { p =>
              p.durationMs.containsKey("getBatch") && p.sources.head.endOffset.contains(
                s""""batchId":$b"""
              )
            }.last
            Seq("latestOffset", "getBatch", "queryPlanning").map { k =>
              Option(p.durationMs.get(k)).map(_.longValue.toDouble).getOrElse(0.0)
            }.sum
          }
        } finally { q.stop(); Tree.delete(cp) }
      }
      val medians = runs.map(r => r.sorted.apply(r.length / 2))
      record("trigger planning, median", medians)
      record(s"trigger planning, worst of $triggers", runs.map(_.max))
    }
  }
}
