package io.batchlog.ops

import scala.collection.mutable

import org.apache.hadoop.fs.FileSystem

import org.apache.spark.network.util.JavaUtils
import org.apache.spark.sql.SparkSession

import io.batchlog.{BatchLogConf, BatchLogException}
import io.batchlog.log.{BatchTaggedFileStreamSinkLog, OpenUploads}

/**
 * Deletes orphan data files: files in a sink's output directory that its log does not list (left by
 * failed or crashed batch attempts), once older than `olderThan`; and aborts the multipart uploads
 * left open under the sink's `_spark_metadata/` and `_batchlog/` (a killed server-side compaction
 * on S3) started before then ([[io.batchlog.log.OpenUploads]]). Never a live logged file, and,
 * while a writer's lease is live, never a file whose batch-tagged name says it belongs to a batch
 * after the latest logged one (that batch may be running now); with no live writer those are what a
 * killed or refused writer left. Files whose names carry no batch are protected by their age only.
 *
 * The log is read first; if it cannot be read, nothing is deleted. Only files inside the output and
 * named as data files (`part-<digits>-...`, see [[io.batchlog.log.DataFileNaming]]) are ever
 * candidates; links are not followed nor deleted, other files are counted and left. Vacuum refuses
 * (deleting nothing) while the log names a file outside the output ([[SinkBoundary]]: FOREIGN_PATH)
 * and while the output holds a streaming query checkpoint (CHECKPOINT_IN_OUTPUT).
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

  /** What a vacuum will delete: the candidates, and the report a dry run gives. */
  final case class Plan(
      report: VacuumReport,
      toDelete: Seq[Verify.Orphan],
      toAbort: Seq[OpenUploads.Open],
      fs: FileSystem
  )

  /** Plans a vacuum of the orphans older than `olderThan`, changing nothing. */
  def plan(spark: SparkSession, sinkPath: String, olderThan: String): Plan = {
    val olderThanMs = parseDuration(olderThan)
    val hadoopConf = spark.sessionState.newHadoopConf()
    // the log read as one listing saw it (the lease below is read fresh, through Spark's manager)
    val log = BatchTaggedFileStreamSinkLog.listedOnce(spark, sinkPath)
    val meta = log.metadataPath
    val sink = meta.getParent
    val fs = sink.getFileSystem(hadoopConf)
    val latest = log.getLatestBatchId().getOrElse(-1L)
    val logged = mutable.HashSet.empty[String]
    val foreign = mutable.ArrayBuffer.empty[ForeignEntry]
    val boundary = new SinkBoundary(fs, sink)
    log.foreachLiveEntry { e =>
      logged += Verify.key(Verify.entryPath(e))
      foreign ++= boundary.foreignEntry(e)
    }
    // A log naming files elsewhere does not describe this output: what looks unlogged here may be
    // a live file it names by another path (through a link), so nothing is judged orphaned.
    Verify.refuseForeign("Vacuum", sink, foreign.toSeq)
    val cutoff = System.currentTimeMillis() - olderThanMs

    val (orphans, extras) = Verify.orphans(fs, sink, logged)
    val checkpoints = extras.checkpoints
    if (checkpoints.nonEmpty) {
      throw BatchLogException.checkpointInOutput(
        "Vacuum",
        sink.toString,
        checkpoints.map(_.toString)
      )
    }
    // Files of a batch after the latest may belong to a batch running now, unless no writer is
    // live: then they are what a killed or refused writer left.
    val writerLive = WriterFence
      .liveWriter(log.checkpointFileManager, meta, BatchLogConf.fenceWaitMs(spark)).isDefined
    val (running, settled) = orphans.partition(o => writerLive && o.batchId.exists(_ > latest))
    val (toDelete, recent) = settled.partition(_.modificationTime <= cutoff)
    // Uploads a killed compaction left open; one younger than the threshold may be running now.
    val (toAbort, recentUploads) = Verify.openUploads(fs, meta).partition(_.initiated <= cutoff)
    def bytes(fs: Seq[Verify.Orphan]) = fs.map(_.size).sum
    def paths(fs: Seq[Verify.Orphan]) = fs.take(Reports.ListLimit).map(_.path.toString)
    val report = VacuumReport(
      sink.toString,
      dryRun = true,
      latest,
      olderThanMs,
      cutoff,
      logged.size.toLong,
      orphans.length,
      bytes(orphans),
      toDelete.length,
      bytes(toDelete),
      deletedFiles = 0L,
      recent.length,
      bytes(recent),
      writerLive,
      running.length,
      bytes(running),
      toDelete.take(Reports.ListLimit).map(_.report),
      paths(running),
      paths(recent),
      extras.links.take(Reports.ListLimit).map(_.toString).toSeq,
      extras.otherCount,
      toAbort.map(OpenUpload(_)),
      recentUploads.length,
      abortedUploads = 0L
    )
    Plan(report, toDelete, toAbort, fs)
  }

  /** Deletes the candidates of `plan` (in parallel); the report says how many went. */
  def apply(spark: SparkSession, plan: Plan, quiet: Boolean): VacuumReport = {
    val deleted = ParallelDelete(
      plan.toDelete.map(_.path),
      spark.sessionState.newHadoopConf(),
      BatchLogConf.deleteParallelism(spark),
      new Progress("vacuum: deleting orphan files", quiet)
    )
    val aborted = plan.toAbort.count(OpenUploads.abort(plan.fs, _)).toLong
    plan.report.copy(dryRun = false, deletedFiles = deleted, abortedUploads = aborted)
  }
}
