package io.batchlog.ops

import scala.collection.mutable
import scala.util.control.NonFatal

import org.apache.hadoop.fs.{FileStatus, Path}
import org.apache.hadoop.io.{LongWritable, Text}
import org.apache.hadoop.mapreduce.{Job, JobContext}
import org.apache.hadoop.mapreduce.lib.input.{FileInputFormat, TextInputFormat}

import org.apache.spark.internal.Logging
import org.apache.spark.paths.SparkPath
import org.apache.spark.rdd.RDD
import org.apache.spark.sql.{Column, DataFrame, Encoders, Row, SparkSession}
import io.batchlog.shim.CompactibleFileStreamLog
import org.apache.spark.sql.functions._

import io.batchlog.{BatchLogConf, BatchLogException}
import io.batchlog.log.{
  BatchTaggedFileStreamSinkLog,
  DataFileNaming,
  DirectLookup,
  LogFiles,
  LogFormat,
  LogLayout,
  ObjectStoreCopy,
  SinkLogEntry,
  SinkReaders,
  WriterLease
}

/**
 * Reads a file sink's log by batch: which batches, which files of a batch, which batch wrote a
 * file, every entry with its batch, and a summary. It reads any sink log (batch-tagged, vanilla or
 * mixed) and never writes: its errors say that nothing was changed.
 *
 * @param outputPath
 *   the sink's output directory, the one holding `_spark_metadata`
 */
class SinkReader(spark: SparkSession, outputPath: String) {
  import BatchLogException.unchanged

  val metadataPath: Path = unchanged(BatchTaggedFileStreamSinkLog.metadataPathOf(spark, outputPath))

  lazy val log: BatchTaggedFileStreamSinkLog =
    new BatchTaggedFileStreamSinkLog(spark, metadataPath.toString)

  /** The latest committed batch id, or -1 if none. */
  def latestBatch(): Long = unchanged(log.getLatestBatchId().getOrElse(-1L))

  /** Batch ids that wrote at least one live file, ascending. */
  def batches(): Array[Long] = unchanged {
    val ids = mutable.SortedSet.empty[Long]
    log.liveLogBatchIds().foreach { id =>
      if (log.isCompactFile(id)) ids ++= log.indexOf(id).runs.flatMap(_.batchId)
      else log.foreachEntryIn(id)(e => e.batchId.foreach(ids += _))
    }
    ids.toArray
  }

  /** Paths (as logged: URI strings) of the live files written by `batchId`. */
  def files(batchId: Long): Array[String] = unchanged {
    if (batchId < 0) throw BatchLogException.invalidArgument("batch", batchId, "must be >= 0")
    direct(batchId).getOrElse {
      val out = mutable.ArrayBuffer.empty[String]
      log.foreachLivePathWithin(batchId, batchId)(_.contains(batchId))(out += _)
      out.toSeq
    }.toArray
  }

  /**
   * The paths of one batch read from the one log file that holds them, without listing the log
   * ([[DirectLookup]]); None: read the log.
   */
  private def direct(batchId: Long): Option[Seq[String]] =
    if (BatchLogConf.retention(spark).ageMs.isDefined) None
    else DirectLookup.paths(
      metadataPath.getFileSystem(spark.sessionState.newHadoopConf()),
      metadataPath,
      BatchLogConf.sinkLogSettings(spark).compactInterval,
      batchId
    )

  /**
   * The batch that wrote `path`: -1 if `path` is live in the log but untagged; null if the log does
   * not hold it. `path` may be a logged URI or a plain path.
   */
  def batchOf(path: String): java.lang.Long = unchanged {
    val wanted = qualify(path)
    var found: Option[Option[Long]] = None
    // A batch-tagged name says where to look; otherwise (or if it lies) scan the whole log.
    val hint = DataFileNaming.batchIdOf(wanted.getName)
    // Equal paths end with the same raw (URI-encoded) name: only those are parsed and compared.
    val rawPath = wanted.toUri.getRawPath
    val rawName = rawPath.substring(rawPath.lastIndexOf('/'))
    def same(p: String) = p.endsWith(rawName) && SparkPath.fromUrlString(p).toPath == wanted
    hint.foreach { b =>
      if (direct(b).exists(_.exists(same))) found = Some(Some(b))
      else log.foreachLivePathWithin(b, b)(_.contains(b)) { p =>
        if (same(p)) found = Some(Some(b))
      }
    }
    if (found.isEmpty) log.foreachLiveEntry { e =>
      if (found.isEmpty && entryPath(e) == wanted) found = Some(e.batchId)
    }
    found.map(b => java.lang.Long.valueOf(b.getOrElse(-1L))).orNull
  }

  /**
   * Every live entry with its `batchId` (null when untagged), as a DataFrame read by Spark from the
   * log files: nothing is collected on the driver. Spark's file sources refuse paths under
   * `_spark_metadata`, so lines come through Hadoop's `TextInputFormat` (split like any text file)
   * and are parsed by Spark's JSON reader, failing fast on a corrupt line.
   */
  def entries(): DataFrame = unchanged {
    val fromName: Column =
      nullif(regexp_extract(col("path"), DataFileNaming.Pattern, 1), lit("")).cast("long")
    val perFile = log.liveLogBatchIds().map { id =>
      log.checkHeader(id)
      val lines = SinkReader.textLines(spark, log.logFilePath(id)).filter(_ != LogFormat.Header)
      val fromLogFile = if (log.isCompactFile(id)) lit(null).cast("long") else lit(id)
      // what surviving log files prove for lines plain Spark compacted (LineageProof)
      val proven = if (!log.isCompactFile(id)) Map.empty[String, Long] else log.provenPaths(id)
      val fromProof =
        if (proven.isEmpty) lit(null).cast("long") else element_at(typedLit(proven), col("path"))
      spark.read.schema(LogFormat.sparkSchema).option("mode", "FAILFAST")
        .json(spark.createDataset(lines)(Encoders.STRING))
        .withColumn(
          LogFormat.BatchIdField,
          coalesce(col(LogFormat.BatchIdField), fromLogFile, fromName, fromProof)
        )
    }
    perFile.reduceOption(_ unionByName _).getOrElse(
      spark.createDataFrame(java.util.Collections.emptyList[Row](), LogFormat.sparkSchema)
    )
  }

  /** A summary for `inspect`: compaction state, log files, per-batch totals and the horizon. */
  def summary(checkpointPath: Option[String]): SinkSummary = unchanged {
    val perBatch = mutable.TreeMap.empty[Long, (Long, Long)]
    var untagged = (0L, 0L)
    log.foreachLiveEntry { e =>
      e.batchId match {
        case Some(b) =>
          val (n, bytes) = perBatch.getOrElse(b, (0L, 0L)); perBatch(b) = (n + 1, bytes + e.size)
        case None => untagged = (untagged._1 + 1, untagged._2 + e.size)
      }
    }
    val logFiles = log.listLogFiles()
    val latest = latestBatch()
    // the writing query's interval: before its second compact file the log reads at this
    // session's
    val interval = log.recordedInterval.map(_._1).getOrElse(log.interval)
    SinkSummary(
      outputPath,
      metadataPath.toString,
      latest,
      interval,
      logFiles.map(_.getPath.getName).filter(LogLayout.isCompactName).lastOption,
      CompactibleFileStreamLog.nextCompactionBatchId(latest, interval),
      logFiles.length,
      logFiles.map(_.getLen).sum,
      untagged._1,
      untagged._2,
      perBatch.toSeq.map { case (b, (n, bytes)) => BatchFiles(b, n, bytes) },
      Horizon.report(spark, log, checkpointPath),
      LogFiles.describeWriteOnce(log.checkpointFileManager, log.logFilePath(latest + 1)),
      if (!BatchLogConf.serverSideCompaction(spark)) {
        s"client-side copy (${BatchLogConf.ServerSideCompactionKey} is false)"
      } else
        ObjectStoreCopy.describe(
          log.checkpointFileManager,
          log.logFilePath(CompactibleFileStreamLog.nextCompactionBatchId(latest, interval))
        ),
      readers(),
      leaseHolder(),
      log.retainedFrom()
    )
  }

  /** The writer's lease, read once; None if there is none (or it cannot be read: a warning). */
  private def leaseHolder(): Option[LeaseHolder] =
    try
      WriterLease.read(log.checkpointFileManager, metadataPath).map(l =>
        LeaseHolder(l.queryId, l.runId, l.host, l.pid, l.batchId, l.refreshedAtMs, l.timeoutMs)
      )
    catch {
      case NonFatal(e) =>
        SinkReader.warn(s"The writer's lease of $outputPath cannot be read: ${e.getMessage}")
        None
    }

  /** The sink's registered readers, each marked stale if unseen longer than the setting. */
  private def readers(): Seq[SinkReaderInfo] = {
    val staleBefore = System.currentTimeMillis() - BatchLogConf.readersStaleAfterMs(spark)
    SinkReaders.list(log.checkpointFileManager, metadataPath).map { r =>
      SinkReaderInfo(
        r.queryId,
        r.checkpoint,
        r.sourceIndex,
        r.kind,
        r.sink,
        r.sinceMs,
        r.seenMs,
        r.seenMs < staleBefore
      )
    }
  }

  private def qualify(p: String): Path = {
    val path = if (p.contains(":")) SparkPath.fromUrlString(p).toPath else new Path(p)
    val fs = path.getFileSystem(spark.sessionState.newHadoopConf())
    fs.makeQualified(path)
  }

  private def entryPath(e: SinkLogEntry): Path = SparkPath.fromUrlString(e.path).toPath
}

object SinkReader extends Logging {

  private def warn(message: String): Unit = logWarning(message)

  /**
   * The lines of the one file `file`, split like any text file. Not `sparkContext.textFile`: that
   * takes a comma-separated list of glob patterns, so an output directory whose name holds `,` `[`
   * `{` `*` `?` (legal in HDFS and object-store paths) would be split or globbed.
   */
  def textLines(spark: SparkSession, file: Path): RDD[String] = {
    val job = Job.getInstance(spark.sessionState.newHadoopConf())
    FileInputFormat.setInputPaths(job, file) // a Path: escaped, never split on commas
    spark.sparkContext
      .newAPIHadoopRDD(
        job.getConfiguration,
        classOf[ExactPathTextInputFormat],
        classOf[LongWritable],
        classOf[Text]
      )
      .map(_._2.toString)
  }
}

/**
 * Hadoop's `TextInputFormat` reading exactly its input paths, as given: no glob expansion (the
 * parent lists each input path with `globStatus`, so `[`, `{`, `*`, `?` in a path are patterns).
 */
class ExactPathTextInputFormat extends TextInputFormat {
  override protected def listStatus(job: JobContext): java.util.List[FileStatus] = {
    val out = new java.util.ArrayList[FileStatus]()
    FileInputFormat.getInputPaths(job).foreach { p =>
      out.add(p.getFileSystem(job.getConfiguration).getFileStatus(p))
    }
    out
  }
}
