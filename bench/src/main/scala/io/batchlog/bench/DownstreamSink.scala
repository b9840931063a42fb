package io.batchlog.bench

import java.util.UUID

import org.apache.hadoop.fs.{FileSystem, Path => HPath}

import org.apache.spark.sql.SparkSession

import io.batchlog.log.{BatchTaggedFileStreamSinkLog, SinkLogEntry}

/**
 * The upstream sink of `bench/downstream.py`, in its own JVM (so that neither reader's driver pays
 * for it). Builds a parquet sink partitioned by `country` under `--dir`/sink whose
 * `_spark_metadata` is batchlog's log, written through [[BatchTaggedFileStreamSinkLog]]
 * (compactInterval 10, Spark's `minBatchesToRetain`): `--batches` batches of `--entries /
 * --batches` entries each, shaped as [[SinkLogBench.entry]]'s, under the sink and written one a
 * minute up to now, pointing at data files that do not exist; the last batch also logs 4 real
 * parquet files. `--stage` more small parquet files are written aside (`--rows` rows each) for the
 * batches appended later.
 *
 * Prints `BUILT <latest batch> <live entries>`, then reads commands from stdin: `append <count>
 * <intervalMs>` appends `count` batches, one every `intervalMs`, each moving one staged file into
 * the sink (a Hadoop rename) and logging it; prints `APPENDED <batch> <ms>` after each and `DONE
 * <latest batch>` at the end. `quit` (or the end of stdin) stops.
 *
 * Log files are deleted as soon as Spark's rule lets them (cleanupDelay 0): the log holds the last
 * 100 batches, as a sink that has run for a while does, not every compact file of the build.
 *
 * Usage: DownstreamSink --dir DIR [--entries N] [--batches B] [--stage K] [--rows R]
 */
object DownstreamSink {
  private val Real = 4 // real files in the last batch of the build

  /** A line to `bench/downstream.py`, which waits for it. */
  private def say(line: String): Unit = { println(line); Console.flush() }

  def main(args: Array[String]): Unit = {
    val opts = Opts(args)
    val root = new HPath(opts.get("--dir").getOrElse(sys.error("--dir is required")))
    val entries = opts.long("--entries", 1000000L)
    val batches = opts.int("--batches", 1000)
    val stage = opts.int("--stage", 40)
    val rows = opts.int("--rows", 100)
    val perBatch = (entries / batches).toInt
    val spark = SparkSession.builder().master("local[2]").appName("batchlog-downstream-sink")
      .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "2")
      .config("spark.sql.streaming.fileSink.log.compactInterval", "10")
      .config("spark.sql.streaming.fileSink.log.cleanupDelay", "0")
      .getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    val fs = root.getFileSystem(spark.sessionState.newHadoopConf())
    val sink = fs.makeQualified(new HPath(root, "sink"))
    val staging = new HPath(root, "staging")

    val t0 = System.nanoTime()
    spark.range(0L, (Real + stage).toLong * rows, 1L, Real + stage).selectExpr("id")
      .write.parquet(staging.toString)
    val staged = fs.listStatus(staging).map(_.getPath)
      .filter(_.getName.endsWith(".parquet")).sortBy(_.getName).iterator
    require(staged.hasNext, s"no parquet file written under $staging")

    /** Moves the next staged file into the sink as one of `batch`'s files, and logs it. */
    def real(batch: Long, i: Int): SinkLogEntry = {
      require(staged.hasNext, s"all staged files are used: give a larger --stage")
      val name = f"part-$i%05d-batch-$batch-${UUID.randomUUID()}.c000.snappy.parquet"
      val dest = new HPath(sink, f"country=c${(batch + i) % 50}%02d/$name")
      fs.mkdirs(dest.getParent)
      require(fs.rename(staged.next(), dest), s"could not move a staged file to $dest")
      val st = fs.getFileStatus(dest)
      SinkLogEntry(
        st.getPath.toUri.toString,
        st.getLen,
        isDir = false,
        st.getModificationTime,
        1,
        st.getBlockSize,
        "add",
        Some(batch)
      )
    }

    fs.mkdirs(sink)
    val log = new BatchTaggedFileStreamSinkLog(spark, new HPath(sink, "_spark_metadata").toString)
    val prefix = "file:///data/events" // SinkLogBench.entry's sink
    val sinkUri = sink.toUri.toString
    val now = System.currentTimeMillis()
    (0 until batches).foreach { b =>
      val written = now - (batches - b) * 60000L
      val fake = Array.tabulate(perBatch) { i =>
        val e = SinkLogBench.entry(b, i)
        SinkLogEntry(
          e.copy(path = sinkUri + e.path.stripPrefix(prefix), modificationTime = written),
          b.toLong
        )
      }
      val es = if (b == batches - 1) fake ++ (0 until Real).map(real(b.toLong, _)) else fake
      require(log.add(b.toLong, es), s"batch $b is already logged")
      if (b % 100 == 99) System.err.print(s" $b")
    }
    val live = perBatch.toLong * batches + Real
    System.err.println(
      f"\nsink $sink: $live%,d live entries in $batches batches built in " +
        f"${(System.nanoTime() - t0) / 1e9}%.1f s"
    )
    say(s"BUILT ${batches - 1} $live")

    var latest = batches - 1L
    Iterator.continually(scala.io.StdIn.readLine()).takeWhile(l => l != null && l != "quit")
      .map(_.trim.split("\\s+")).foreach {
        case Array("append", count, intervalMs) =>
          (1 to count.toInt).foreach { k =>
            val due = System.nanoTime() + intervalMs.toLong * 1000000L
            latest += 1
            val ms = SinkLogBench.time(require(log.add(latest, Array(real(latest, 0)))))
            say(f"APPENDED $latest $ms%.1f")
            if (k < count.toInt) Thread.sleep(math.max(0L, (due - System.nanoTime()) / 1000000L))
          }
          say(s"DONE $latest")
        case other => System.err.println(s"unknown command: ${other.mkString(" ")}")
      }
    spark.stop()
  }
}
