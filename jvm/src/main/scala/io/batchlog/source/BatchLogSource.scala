package io.batchlog.source

import java.util.Locale

import scala.util.control.NonFatal

import org.apache.hadoop.fs.Path

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
import io.batchlog.checkpoint.{BatchLogOffset, QueryCheckpoint}
import io.batchlog.log.{RewindIntent, SinkLogEntry, SinkReaders}
import io.batchlog.shim.CheckpointFileManager
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
 * out ([[BatchLogException.upstreamRewound]]); so do batches it has still to read that the sink's
 * retention dropped ([[BatchLogException.batchesExpired]]), instead of reading them as empty.
 *
 * @param firstBatch
 *   the first upstream batch to read, fixed at the query's first start ([[SourceStart]])
 * @param metadataPath
 *   the source's directory in the query's checkpoint (`<checkpoint>/sources/<i>`)
 */
final class BatchLogSource(
    spark: SparkSession,
    private[batchlog] val sink: SinkRelations.Sink,
    opts: SourceOptions.Parsed,
    override val schema: StructType,
    format: String,
    firstBatch: Long,
    metadataPath: String
) extends Source
    with SupportsAdmissionControl
    with SupportsTriggerAvailableNow
    with Logging {

  private val withBatchId = opts.flag(SourceOptions.WithBatchId)
  private val sinkSchema = SinkRelations.withoutBatchId(schema, opts)
  private val maxBatches = opts.long(SourceOptions.MaxBatchesPerTrigger, 1)
  private val maxFiles = opts.long(SourceOptions.MaxFilesPerTrigger, 1)

  /** The upstream's records beside its log (its rewind intent, its readers). */
  private lazy val sinkFm =
    CheckpointFileManager.create(sink.metadataPath, spark.sessionState.newHadoopConf())

  /** Set by `prepareForTriggerAvailableNow`: the last upstream batch this run reads. */
  @volatile private var availableNowEnd: Option[Long] = None

  /**
   * True if every batch the query planned is committed: a `getBatch` then is the call Spark makes
   * at a restart for the last committed batch (so a V1 source can restore itself), whose rows are
   * never read; so it does not fail for batches retention dropped since.
   */
  private def allPlannedCommitted(): Boolean =
    scala.util.Try {
      val cp = new QueryCheckpoint(spark, new Path(metadataPath).getParent.getParent.toString)
      cp.offsetIds.lastOption.forall(o => cp.commitIds.lastOption.exists(_ >= o))
    }.getOrElse(false)

  /** An offset of this source, as Spark hands it back (from the checkpoint after a restart). */
  private def offsetOf(o: OffsetV2): BatchLogOffset =
    BatchLogOffset.of(o, new Path(metadataPath).getParent.getParent.toString)

  /** Fails unless batches `from` to `to`, which this query is to read, are above retention's. */
  private def requireRetained(from: Long, to: Long): Unit = {
    val retained = sink.retainedFrom()
    if (from < retained && from <= to) {
      throw BatchLogException.batchesExpired(
        sink.root.toString,
        from,
        math.min(to, retained - 1),
        retained
      )
    }
  }

  /**
   * The live entries of batches `from` to `to` (inclusive), by batch, read from the log now: one
   * read through the compact file's index and the batch files by name. Never cached across calls,
   * so a check always sees the upstream as it is.
   */
  private def entriesOf(from: Long, to: Long): Map[Long, Seq[SinkLogEntry]] =
    if (from > to) Map.empty
    else {
      val found = sink.entries(BatchRange(Some(from), Some(to)), "batches", strict = false)
        .groupBy(_.batchId.get)
      (from to to).map(b => b -> found.getOrElse(b, Nil)).toMap
    }

  private def fingerprintOf(batch: Seq[SinkLogEntry]): String =
    BatchLogOffset.fingerprint(batch.map(_.path))

  /**
   * The offset after emitting batches `from` to `end`: the last of them that wrote files (or, if
   * none did, the previous offset's, or the batch before `from`), with its fingerprint.
   */
  private def offsetAfter(
      prev: Option[BatchLogOffset],
      from: Long,
      end: Long,
      byBatch: Map[Long, Seq[SinkLogEntry]]
  ): BatchLogOffset =
    (end to from by -1L).find(b => byBatch(b).nonEmpty) match {
      case Some(f) => BatchLogOffset(end, f, fingerprintOf(byBatch(f)))
      case None =>
        prev.map(_.copy(batchId = end)).getOrElse {
          val before = from - 1
          val fp =
            if (before < 0) fingerprintOf(Nil) else fingerprintOf(entriesOf(before, before)(before))
          BatchLogOffset(end, before, fp)
        }
    }

  /**
   * Fails unless the upstream still holds what this query read up to `o` ([[intact]]), naming the
   * query's first batch that read a rewound batch and the cascade that rewinds it ([[rewoundFix]]).
   */
  private def requireIntact(o: BatchLogOffset, known: Map[Long, Seq[SinkLogEntry]]): Unit =
    if (!intact(o, known)) {
      val latest = sink.log.getLatestBatchId().getOrElse(-1L)
      throw BatchLogException.upstreamRewound(sink.root.toString, o.batchId, latest, rewoundFix())
    }

  /**
   * True if the upstream still holds what this query read up to `o`: batch `o.filesBatch` with the
   * same files, and no files in the batches after it up to `o.batchId`. A rewind deletes and
   * rewrites batches under new file names, so any rewind of a batch this query read changes one of
   * these (a rewound batch that had no files and has none again changes nothing read). `known`:
   * entries already read now.
   */
  private def intact(o: BatchLogOffset, known: Map[Long, Seq[SinkLogEntry]]): Boolean =
    o.batchId < 0 || {
      val latest = sink.log.getLatestBatchId().getOrElse(-1L)
      // batches below the retention watermark were dropped after this query read them: what
      // is left above it is checked
      val retained = sink.retainedFrom()
      val lo = math.max(math.max(o.filesBatch, 0L), retained)
      val now = if (o.batchId > latest) None else Some(known ++ entriesOf(lo, o.batchId))
      now.exists { byBatch =>
        val f = if (o.filesBatch < 0) Nil else byBatch.getOrElse(o.filesBatch, Nil)
        (o.filesBatch < retained || fingerprintOf(f) == o.fingerprint) &&
        (lo to o.batchId).forall(b => b == o.filesBatch || byBatch(b).isEmpty)
      }
    }

  /**
   * This query's way out of an upstream rewind, if it writes a file sink: that sink (from its
   * reader record), its checkpoint and its first batch whose offset the upstream no longer holds as
   * read. Once one batch's read is rewound every later one's is (a rewind rewrites every batch from
   * its target on), so the search halves the retained `offsets/`.
   */
  private def rewoundFix(): Option[(String, String, Long)] =
    try {
      val cp = new QueryCheckpoint(spark, new Path(metadataPath).getParent.getParent.toString)
      val i = new Path(metadataPath).getName.toInt
      val own = SinkReaders.list(sinkFm, sink.metadataPath)
        .find(r => r.queryId == cp.queryId && r.sourceIndex == i).flatMap(_.sink)
      val first = own.flatMap { _ =>
        cp.firstBatchWhere(n => cp.batchLogOffset(n, i).exists(o => !intact(o, Map.empty)))
      }
      for (s <- own; b <- first) yield (s, cp.root.toString, b)
    } catch {
      case NonFatal(e) =>
        logWarning(s"batchlog could not tell where to rewind the query of $metadataPath", e)
        None
    }

  override def getDefaultReadLimit: ReadLimit = ReadLimit.allAvailable()

  override def prepareForTriggerAvailableNow(): Unit =
    availableNowEnd = Some(sink.log.getLatestBatchId().getOrElse(-1L))

  override def latestOffset(startOffset: OffsetV2, limit: ReadLimit): OffsetV2 = {
    // A sink under an unfinished rewind (a cascade's hop, this query's own included when it
    // writes no file sink, which no lease guards) is read by no one until the rewind is finished.
    RewindIntent.refuseReader(sinkFm, sink.metadataPath)
    val start = Option(startOffset).map(offsetOf)
    start.foreach(requireIntact(_, Map.empty))
    val latest = sink.log.getLatestBatchId().getOrElse(-1L)
    val from = start.map(_.batchId + 1).getOrElse(firstBatch)
    val until = math.min(latest, availableNowEnd.getOrElse(Long.MaxValue))
    if (from > until) return startOffset
    requireRetained(from, until)
    var end = maxBatches.fold(until)(n => math.min(until, from + n - 1))
    val byBatch = entriesOf(from, end)
    maxFiles.foreach { limitFiles =>
      var files = 0L
      var b = from
      while (b <= end && (b == from || files + byBatch(b).length <= limitFiles)) {
        files += byBatch(b).length; b += 1
      }
      end = b - 1
    }
    offsetAfter(start, from, end, byBatch)
  }

  override def getOffset: Option[Offset] =
    throw new UnsupportedOperationException("latestOffset(Offset, ReadLimit) is called instead")

  override def getBatch(start: Option[Offset], end: Offset): DataFrame = {
    val to = offsetOf(end)
    val from = start.map(offsetOf).map(_.batchId + 1).getOrElse(firstBatch)
    val retained = sink.retainedFrom()
    val expired = from < retained && from <= to.batchId
    if (expired && !allPlannedCommitted()) requireRetained(from, to.batchId)
    val byBatch = entriesOf(if (expired) retained else from, to.batchId)
    // The batches must still be the ones the offset was planned with: it may come from a
    // checkpoint written before an upstream rewind, or the upstream may have been rewound since.
    requireIntact(to, byBatch)
    val entries = byBatch.toSeq.sortBy(_._1).flatMap(_._2)
    logInfo(s"batches $from..${to.batchId} of ${sink.root}: ${entries.length} files")
    val relation = SinkRelations.files(sink, entries, sinkSchema, format, opts, withBatchId)
    SparkFrames.ofPlan(spark, SinkRelations.plan(relation, isStreaming = true))
  }

  /**
   * Drops the sink log's cached compact indexes. A stopped query can stay reachable for long (a
   * Spark Connect server keeps each for an hour), and with it this source.
   */
  override def stop(): Unit = sink.release()

  override def toString: String = s"batchlog[${sink.root}]"
}

object BatchLogSource {

  /**
   * The first upstream batch a new query reads, from option `startingBatch`: `earliest` (the
   * default) is the oldest batch the sink still holds (0, or the first above what its retention
   * dropped), `latest` the batch after the sink's latest one now, a number that batch. Resolved
   * once, at the query's first start ([[SourceStart]] keeps it).
   */
  def firstBatch(sink: SinkRelations.Sink, opts: SourceOptions.Parsed): Long = {
    val option = opts.get(SourceOptions.StartingBatch).map(_.trim.toLowerCase(Locale.ROOT))
    val first = option match {
      case None | Some("earliest") => sink.retainedFrom()
      case Some("latest") => sink.log.getLatestBatchId().getOrElse(-1L) + 1
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
}
