package io.batchlog.ops

import scala.collection.mutable

import org.json4s.JsonDSL._
import org.json4s.jackson.JsonMethods.{compact, render}

import org.apache.spark.network.util.JavaUtils
import org.apache.spark.sql.SparkSession

import io.batchlog.{BatchLogConf, BatchLogException}
import io.batchlog.log.BatchTaggedFileStreamSinkLog

/**
 * Deletes orphan data files: files in a sink's output directory that its log does not list (left by
 * failed or crashed batch attempts), once older than `olderThan`. Never a live logged file, and,
 * while a writer's lease is live, never a file whose batch-tagged name says it belongs to a batch
 * after the latest logged one (that batch may be running now); with no live writer those are what a
 * killed or refused writer left. Files whose names carry no batch are protected by their age only.
 *
 * The log is read first; if it cannot be read, nothing is deleted.
 */
object Vacuum {

  def parseDuration(s: String): Long = {
    val ms =
      try JavaUtils.timeStringAsMs(s.trim)
      catch {
        case _: NumberFormatException | _: IllegalArgumentException =>
          throw BatchLogException.invalidArgument(
            "older_than",
            s"'$s'",
            "give a duration such as 30s, 15m, 1h or 7d"
          )
      }
    if (ms < 0) throw BatchLogException.invalidArgument("older_than", s"'$s'", "must be >= 0")
    ms
  }

  def run(
      spark: SparkSession,
      sinkPath: String,
      olderThan: String,
      dryRun: Boolean,
      quiet: Boolean
  ): String = {
    val olderThanMs = parseDuration(olderThan)
    val hadoopConf = spark.sessionState.newHadoopConf()
    val meta = BatchTaggedFileStreamSinkLog.metadataPathOf(spark, sinkPath)
    val sink = meta.getParent
    val fs = sink.getFileSystem(hadoopConf)
    val log = new BatchTaggedFileStreamSinkLog(spark, meta.toString)
    val latest = log.getLatestBatchId().getOrElse(-1L)
    val logged = mutable.HashSet.empty[String]
    log.foreachLiveEntry(e => logged += Verify.key(Verify.entryPath(e)))
    val now = System.currentTimeMillis()
    val cutoff = now - olderThanMs

    val orphans = Verify.orphans(fs, sink, logged)
    // Files of a batch after the latest may belong to a batch running now, unless no writer is
    // live: then they are what a killed or refused writer left.
    val writerLive = WriterFence.liveWriter(log.checkpointFileManager, meta).isDefined
    val (running, settled) = orphans.partition(o => writerLive && o.batchId.exists(_ > latest))
    val (toDelete, recent) = settled.partition(_.modificationTime <= cutoff)
    val deleted =
      if (dryRun) 0L
      else {
        ParallelDelete(
          toDelete.map(_.path),
          hadoopConf,
          BatchLogConf.deleteParallelism(spark),
          new Progress("vacuum: deleting orphan files", quiet)
        )
      }
    def bytes(fs: Seq[OrphanFile]) = fs.map(_.size).sum
    compact(render(
      ("sink" -> sink.toString) ~ ("dryRun" -> dryRun) ~ ("latestBatch" -> latest) ~
        ("olderThanMs" -> olderThanMs) ~ ("cutoffTime" -> cutoff) ~
        ("liveFiles" -> logged.size) ~
        ("orphanFiles" -> orphans.length) ~ ("orphanBytes" -> bytes(orphans)) ~
        ("candidateFiles" -> toDelete.length) ~ ("candidateBytes" -> bytes(toDelete)) ~
        ("deletedFiles" -> deleted) ~
        ("skippedRecentFiles" -> recent.length) ~ ("skippedRecentBytes" -> bytes(recent)) ~
        ("writerLive" -> writerLive) ~ ("skippedRunningFiles" -> running
          .length) ~ ("skippedRunningBytes" -> bytes(running)) ~
        ("candidates" -> toDelete.take(Verify.ListLimit).toList.map { o =>
          ("path" -> o.path.toString) ~ ("size" -> o.size) ~ ("batchId" -> o.batchId) ~
            ("modificationTime" -> o.modificationTime)
        }) ~
        ("skippedRunning" -> running.take(Verify.ListLimit).map(_.path.toString).toList) ~
        ("skippedRecent" -> recent.take(Verify.ListLimit).map(_.path.toString).toList)
    ))
  }
}
