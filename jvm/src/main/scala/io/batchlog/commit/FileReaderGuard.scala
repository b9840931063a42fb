package io.batchlog.commit

import java.io.FileNotFoundException
import java.util.{Collections, LinkedHashMap => JLinkedHashMap}

import scala.collection.mutable
import scala.util.control.NonFatal

import org.apache.hadoop.fs.Path
import org.apache.spark.internal.Logging
import org.apache.spark.sql.SparkSession

import io.batchlog.BatchLogException
import io.batchlog.checkpoint.QueryCheckpoint
import io.batchlog.log.{
  BatchTaggedFileStreamSinkLog,
  DataFileNaming,
  RewindIntent,
  SinkReaders,
  SinkRecord
}
import io.batchlog.shim.CheckpointFileManager

/**
 * Stops a query that reads a batchlog sink through Spark's plain file source before it reads a
 * replayed batch. Spark's file source remembers the files it read by name; a rewind of the sink
 * deletes its batches' files and its query writes them again under new names, which the file source
 * takes for new data: the rows would be counted twice, without an error. The `batchlog` source
 * detects this by its offsets; this guard gives the file source the same answer,
 * `UPSTREAM_REWOUND`, naming the cascade rewind that fixes it.
 *
 * Called for each micro-batch's plan (an optimizer rule of batchlog's session extension), with the
 * files a streaming file relation of the batch reads. Which query runs is the thread's Spark local
 * property; its history, what its file source logged (`<checkpoint>/sources/<i>/`) under the sink,
 * is found through the reader records the query wrote as it started ([[ReaderRegistration]]). A
 * file of batch `u` in the micro-batch, when the query had already read files of batch `M >= u`, is
 * a replay if the files of `M` it read are no longer batch `M`'s in the sink's log: a rewind to any
 * batch at or below `M` deleted them. (A batch's files read over two triggers, with
 * `maxFilesPerTrigger`, are still the log's: no error.) The history is read once per query run,
 * then kept up to date from the batches checked.
 */
object FileReaderGuard extends Logging {

  /** Spark's local property naming the streaming query (`StreamExecution.QUERY_ID_KEY`). */
  val QueryIdProperty = "sql.streaming.queryId"

  /** The job group: a query's run sets its run id as its thread's job group. */
  val RunIdProperty = "spark.jobGroup.id"

  /**
   * What a query run has read of one sink: the newest batch `newest` (-1: none yet) and its files,
   * and the files of the micro-batch checked last (the optimizer applies its rules more than once
   * to a plan). `tracked` is false for a run that registered no file-source read of the sink.
   */
  final private case class Read(
      tracked: Boolean,
      newest: Long,
      files: Set[String],
      last: Set[String]
  )

  /** (run id, sink) -> what that run has read, for the newest runs. */
  private val reads = Collections.synchronizedMap(
    new JLinkedHashMap[(String, String), Read](64, 0.75f, true) {
      override def removeEldestEntry(e: java.util.Map.Entry[(String, String), Read]): Boolean =
        size() > 256
    }
  )

  /** Directory -> the batchlog sink it lies in (None: none), for the newest directories. */
  private val sinkOfDir = Collections.synchronizedMap(
    new JLinkedHashMap[String, Option[Path]](64, 0.75f, true) {
      override def removeEldestEntry(e: java.util.Map.Entry[String, Option[Path]]): Boolean =
        size() > 4096
    }
  )

  /**
   * Checks the files `files` a streaming file relation of the running micro-batch reads; throws
   * `UPSTREAM_REWOUND` for a replayed batch of a batchlog sink. Outside a streaming query's thread,
   * or for files no batchlog sink wrote, nothing is checked.
   */
  def check(spark: SparkSession, files: Seq[Path]): Unit = {
    val queryId = spark.sparkContext.getLocalProperty(QueryIdProperty)
    if (queryId == null) return
    val runId = Option(spark.sparkContext.getLocalProperty(RunIdProperty)).getOrElse(queryId)
    val tagged = files.flatMap(f => DataFileNaming.batchIdOf(f.getName).map(f -> _))
    if (tagged.isEmpty) return
    tagged.groupBy { case (f, _) => sinkOf(spark, f.getParent) }.foreach {
      case (Some(sink), here) => checkSink(spark, queryId, runId, sink, here)
      case (None, _) =>
    }
  }

  private def checkSink(
      spark: SparkSession,
      queryId: String,
      runId: String,
      sink: Path,
      now: Seq[(Path, Long)]
  ): Unit = {
    val key = (runId, sink.toString)
    val names = now.map(_._1.toUri.getPath).toSet
    val before = Option(reads.get(key)).getOrElse(history(spark, queryId, sink, names))
    if (names.subsetOf(before.last)) return // this micro-batch, checked: the rules run again
    val meta = BatchTaggedFileStreamSinkLog.metadataPathOf(spark, sink.toString)
    RewindIntent.refuseReader(
      CheckpointFileManager.create(meta, spark.sessionState.newHadoopConf()),
      meta
    )
    if (!before.tracked) {
      reads.put(key, before.copy(last = names))
      return
    }
    if (now.exists(_._2 <= before.newest)) {
      val log = new BatchTaggedFileStreamSinkLog(spark, meta.toString)
      if (!stillLogged(log, before)) {
        throw BatchLogException.upstreamRewound(
          sink.toString,
          before.newest,
          log.getLatestBatchId().getOrElse(-1L),
          rewoundFix(spark, queryId, sink, meta, names)
        )
      }
    }
    val newest = math.max(before.newest, now.map(_._2).max)
    val files = now.filter(_._2 == newest).map(_._1.toUri.getPath).toSet ++
      (if (before.newest == newest) before.files else Set.empty[String])
    reads.put(key, Read(tracked = true, newest, files, names))
  }

  /** True if the files of batch `read.newest` the query read are still that batch's in `log`. */
  private def stillLogged(log: BatchTaggedFileStreamSinkLog, read: Read): Boolean = {
    val live = mutable.HashSet.empty[String]
    log.foreachLiveEntryWithin(read.newest, read.newest)(_.contains(read.newest)) { e =>
      live += new Path(e.path).toUri.getPath
    }
    read.files.forall(live.contains)
  }

  /**
   * The query's way out, if it writes a file sink (its reader records name it): that sink, its
   * checkpoint and its first batch that read a file the rewind deleted. Which upstream batches were
   * rewound is told by the files the query read before this batch (`current` excluded): one of each
   * batch, checked for existence from the newest down; the rewind deleted every batch from its
   * target on, so the first one gone is found by halving.
   */
  private def rewoundFix(
      spark: SparkSession,
      queryId: String,
      sink: Path,
      meta: Path,
      current: Set[String]
  ): Option[(String, String, Long)] =
    try {
      val hadoopConf = spark.sessionState.newHadoopConf()
      val fs = sink.getFileSystem(hadoopConf)
      val inside = sink.toUri.getPath.stripSuffix("/") + "/"
      val fixes = SinkReaders.list(CheckpointFileManager.create(meta, hadoopConf), meta)
        .filter(r => r.queryId == queryId && r.kind == SinkReaders.KindFile).flatMap { r =>
          val cp = new QueryCheckpoint(spark, r.checkpoint)
          val oneOf = mutable.HashMap.empty[Long, String]
          cp.foreachSourceFile(r.sourceIndex, skipVanished = true) { (logged, _) =>
            val p = new Path(logged)
            if (p.toUri.getPath.startsWith(inside) && !current.contains(p.toUri.getPath)) {
              DataFileNaming.batchIdOf(p.getName).foreach(b => oneOf.getOrElseUpdate(b, logged))
            }
          }
          val batches = oneOf.keys.toIndexedSeq.sorted
          val rewound = firstGone(batches.length, k => !fs.exists(new Path(oneOf(batches(k)))))
          for {
            s <- r.sink
            k <- rewound
            b <- cp.firstBatchReading(r.sourceIndex, r.kind, sink, batches(k))
          } yield (s, cp.root.toString, b)
        }
      fixes.sortBy(_._3).headOption
    } catch {
      case NonFatal(e) =>
        logWarning(s"batchlog could not tell where to rewind query $queryId, a reader of $sink", e)
        None
    }

  /**
   * The first index `k` of `0 until n` from which `gone` holds for every index, if the last one is
   * gone: steps down from the last by doubling strides to one that is not gone, then halves.
   */
  private[batchlog] def firstGone(n: Int, gone: Int => Boolean): Option[Int] =
    if (n == 0 || !gone(n - 1)) None
    else {
      var top = n - 1 // gone
      var stride = 1
      var below = top - stride
      while (below >= 0 && gone(below)) { top = below; stride *= 2; below = top - stride }
      var (lo, hi) = (math.max(below, -1) + 1, top) // the first gone index is in [lo, hi]
      while (lo < hi) {
        val mid = (lo + hi) >>> 1
        if (gone(mid)) hi = mid else lo = mid + 1
      }
      Some(lo)
    }

  /**
   * What the query `queryId` read of `sink` before this batch: from the file-source logs of its
   * checkpoint named by its reader records with the sink (the files of this batch, `current`,
   * excluded: the source logged them before the batch runs). Not tracked if it registered no
   * file-source read of the sink (it started without batchlog's jar).
   */
  private def history(
      spark: SparkSession,
      queryId: String,
      sink: Path,
      current: Set[String]
  ): Read = {
    val hadoopConf = spark.sessionState.newHadoopConf()
    val meta = BatchTaggedFileStreamSinkLog.metadataPathOf(spark, sink.toString)
    val fm = CheckpointFileManager.create(meta, hadoopConf)
    val mine = SinkReaders.list(fm, meta)
      .filter(r => r.queryId == queryId && r.kind == SinkReaders.KindFile)
    val inside = sink.toUri.getPath.stripSuffix("/") + "/"
    var newest = -1L
    val files = mutable.HashSet.empty[String]
    mine.foreach { r =>
      val cp = new QueryCheckpoint(spark, r.checkpoint)
      cp.foreachSourceFile(r.sourceIndex, skipVanished = true) { (logged, _) =>
        val p = new Path(logged).toUri.getPath
        if (p.startsWith(inside) && !current.contains(p)) {
          DataFileNaming.batchIdOf(p).foreach { b =>
            if (b > newest) { newest = b; files.clear() }
            if (b == newest) files += p
          }
        }
      }
    }
    Read(mine.nonEmpty, newest, files.toSet, Set.empty)
  }

  /** The batchlog sink directory `dir` lies in (a sink record above it), if any. */
  private def sinkOf(spark: SparkSession, dir: Path): Option[Path] = {
    val key = dir.toString
    Option(sinkOfDir.get(key)).getOrElse {
      val found =
        try {
          val hadoopConf = spark.sessionState.newHadoopConf()
          val fs = dir.getFileSystem(hadoopConf)
          Iterator.iterate(fs.makeQualified(dir))(_.getParent).takeWhile(_ != null).take(16)
            .find { d =>
              val meta = new Path(d, "_spark_metadata")
              fs.exists(meta) &&
              SinkRecord.read(CheckpointFileManager.create(meta, hadoopConf), meta).isDefined
            }
        } catch {
          case _: FileNotFoundException => None
          case NonFatal(e) =>
            logDebug(s"batchlog cannot tell which sink $dir lies in", e)
            None
        }
      sinkOfDir.put(key, found)
      found
    }
  }
}
