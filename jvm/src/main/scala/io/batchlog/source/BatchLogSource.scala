package io.batchlog.source

import java.util.Locale

import scala.collection.mutable

import org.apache.spark.internal.Logging
import org.apache.spark.sql.{DataFrame, SparkSession}
import org.apache.spark.sql.connector.read.streaming.{
  Offset => OffsetV2,
  ReadLimit,
  SupportsAdmissionControl,
  SupportsTriggerAvailableNow
}
import org.apache.spark.sql.execution.streaming.{Offset, Source}
import org.apache.spark.sql.types.StructType

import io.batchlog.BatchLogException
import io.batchlog.checkpoint.BatchLogOffset
import io.batchlog.log.SinkLogEntry
import io.batchlog.ops.Horizon

/**
 * `spark.readStream.format("batchlog").load(sink)`: each upstream batch's files once, in batch
 * order, as they are committed. Each trigger reads the log entries of the new batches only (the
 * compact file through its index, batch files by name), never the whole log, unlike Spark's file
 * source, which loads every live entry on every micro-batch. An offset is an upstream batch id and
 * its fingerprint ([[BatchLogOffset]]); whole batches are admitted (`maxBatchesPerTrigger`,
 * `maxFilesPerTrigger`: at least one batch a trigger).
 *
 * An upstream rewound below what this query consumed fails the query, naming the batch and the way
 * out ([[BatchLogException.upstreamRewound]]).
 */
final class BatchLogSource(
    spark: SparkSession,
    sink: SinkRelations.Sink,
    opts: SourceOptions.Parsed,
    override val schema: StructType,
    format: String
) extends Source
    with SupportsAdmissionControl
    with SupportsTriggerAvailableNow
    with Logging {

  private val withBatchId = opts.flag(SourceOptions.WithBatchId)
  private val sinkSchema = SinkRelations.withoutBatchId(schema)
  private val maxBatches = opts.long(SourceOptions.MaxBatchesPerTrigger, 1)
  private val maxFiles = opts.long(SourceOptions.MaxFilesPerTrigger, 1)

  /** The first batch to emit when the checkpoint has no offset yet; resolved at first use. */
  private lazy val firstBatch: Long = {
    val latest = sink.log.getLatestBatchId().getOrElse(-1L)
    val first = opts.get(SourceOptions.StartingBatch).map(_.trim.toLowerCase(Locale.ROOT)) match {
      case None | Some("earliest") => 0L
      case Some("latest") => latest + 1
      case Some(_) => opts.long(SourceOptions.StartingBatch, 0).get
    }
    val horizon = Horizon.ofSink(sink.log)
    if (first < horizon) {
      throw BatchLogException.invalidArgument(
        SourceOptions.StartingBatch,
        opts.get(SourceOptions.StartingBatch).getOrElse("earliest"),
        s"batches of ${sink.root} below $horizon have files with no provable batch (written by " +
          s"plain Spark): start at $horizon or later (option startingBatch), or run " +
          s"`python -m batchlog adopt ${sink.root}` first"
      )
    }
    first
  }

  /** Set by `prepareForTriggerAvailableNow`: the last upstream batch this run reads. */
  @volatile private var availableNowEnd: Option[Long] = None

  /** Entries of recently looked-up batches, so a trigger reads each batch's entries once. */
  private val recent = mutable.LinkedHashMap.empty[Long, Seq[SinkLogEntry]]

  private def entriesOf(from: Long, to: Long): Map[Long, Seq[SinkLogEntry]] = {
    val missing = (from to to).filterNot(recent.contains)
    if (missing.nonEmpty) {
      val found = sink
        .entries(BatchRange(Some(missing.head), Some(missing.last)), "batches", strict = false)
        .groupBy(_.batchId.get)
      missing.foreach(b => recent(b) = found.getOrElse(b, Nil))
      while (recent.size > 1024) recent.remove(recent.head._1)
    }
    (from to to).map(b => b -> recent(b)).toMap
  }

  private def offsetOf(b: Long): BatchLogOffset =
    BatchLogOffset(b, BatchLogOffset.fingerprint(entriesOf(b, b)(b).map(_.path)))

  /** Fails if the upstream no longer holds batch `consumed` as this query read it. */
  private def checkConsumed(consumed: BatchLogOffset, latest: Long): Unit =
    if (consumed.batchId >= 0) {
      val now = if (consumed.batchId > latest) None else Some(offsetOf(consumed.batchId))
      if (!now.contains(consumed)) {
        recent.clear()
        throw BatchLogException.upstreamRewound(sink.root.toString, consumed.batchId, latest)
      }
    }

  override def getDefaultReadLimit: ReadLimit = ReadLimit.allAvailable()

  override def prepareForTriggerAvailableNow(): Unit =
    availableNowEnd = Some(sink.log.getLatestBatchId().getOrElse(-1L))

  override def latestOffset(startOffset: OffsetV2, limit: ReadLimit): OffsetV2 = {
    val latest = sink.log.getLatestBatchId().getOrElse(-1L)
    val start = Option(startOffset).map(BatchLogOffset.of)
    start.foreach(checkConsumed(_, latest))
    val from = start.map(_.batchId + 1).getOrElse(firstBatch)
    val until = math.min(latest, availableNowEnd.getOrElse(Long.MaxValue))
    if (from > until) return startOffset
    var end = maxBatches.fold(until)(n => math.min(until, from + n - 1))
    maxFiles.foreach { limitFiles =>
      val counts = entriesOf(from, end)
      var files = 0L
      var b = from
      while (b <= end && (b == from || files + counts(b).length <= limitFiles)) {
        files += counts(b).length; b += 1
      }
      end = b - 1
    }
    offsetOf(end)
  }

  override def getOffset: Option[Offset] =
    throw new UnsupportedOperationException("latestOffset(Offset, ReadLimit) is called instead")

  override def getBatch(start: Option[Offset], end: Offset): DataFrame = {
    val to = BatchLogOffset.of(end)
    val from = start.map(BatchLogOffset.of).map(_.batchId + 1).getOrElse(firstBatch)
    val byBatch = if (from > to.batchId) Map.empty[Long, Seq[SinkLogEntry]]
    else entriesOf(from, to.batchId)
    // The end batch must still be the one the offset was planned with (it may come from a
    // checkpoint written before an upstream rewind).
    if (
      to.batchId >= 0 && byBatch.contains(to.batchId) &&
      BatchLogOffset.fingerprint(byBatch(to.batchId).map(_.path)) != to.fingerprint
    ) {
      recent.clear()
      throw BatchLogException.upstreamRewound(
        sink.root.toString,
        to.batchId,
        sink.log.getLatestBatchId().getOrElse(-1L)
      )
    }
    val entries = byBatch.toSeq.sortBy(_._1).flatMap(_._2)
    logInfo(s"batches $from..${to.batchId} of ${sink.root}: ${entries.length} files")
    val relation = SinkRelations.files(sink, entries, sinkSchema, format, opts, withBatchId)
    (from until to.batchId).foreach(recent.remove)
    SparkFrames.ofPlan(spark, SinkRelations.plan(relation, isStreaming = true))
  }

  override def stop(): Unit = ()

  override def toString: String = s"batchlog[${sink.root}]"
}
