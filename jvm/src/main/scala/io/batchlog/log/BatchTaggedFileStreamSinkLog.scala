package io.batchlog.log

import java.io.{BufferedReader, InputStream, InputStreamReader, OutputStream}
import java.nio.charset.StandardCharsets.UTF_8

import scala.collection.mutable

import org.apache.hadoop.fs.{FileStatus, Path}

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager
import org.apache.spark.sql.execution.streaming.runtime.CompactibleFileStreamLog
import org.apache.spark.sql.execution.streaming.runtime.CompactibleFileStreamLog._
import org.apache.spark.sql.execution.streaming.sinks.FileStreamSinkLog

import io.batchlog.{BatchLogConf, BatchLogException}

/**
 * A file-sink metadata log whose every line, in batch files and compact files, carries the
 * micro-batch that committed the file ([[LogFormat]] defines the lines).
 *
 * It is laid out exactly like Spark's `FileStreamSinkLog` under `<output>/_spark_metadata/`: one
 * file `N` per batch, and every `compactInterval` batches a `N.compact` file holding all live
 * entries; it honours the same settings (`compactInterval`, `cleanupDelay`, `deletion`,
 * `minBatchesToRetain`, the sink's `retention` option) with the same semantics. So plain Spark
 * reads it, and either can continue a log the other started. What differs:
 *
 *   - compaction keeps each entry's `batchId`: that is what lets a sink be rewound to any batch
 *     whose files are still live, long after Spark deleted the per-batch files;
 *   - compaction streams: it copies tagged lines of the previous compact file as text instead of
 *     parsing and re-serialising them (Spark's own compaction does both), parsing only the lines it
 *     must change (untagged ones) or filter (under a retention period);
 *   - a line without `batchId` (written or compacted by plain Spark) gets its batch back when it
 *     can be proven ([[LogFormat.resolveBatch]]) and stays untagged otherwise.
 *
 * @param retentionMs
 *   the sink's `retention` option: entries older than this are dropped at compaction and hidden
 *   from readers, as `FileStreamSinkLog` does
 */
class BatchTaggedFileStreamSinkLog(
    sparkSession: SparkSession,
    path: String,
    retentionMs: Long = Long.MaxValue
) extends CompactibleFileStreamLog[SinkLogEntry](LogFormat.Version, sparkSession, path) {

  private val settings = BatchLogConf.sinkLogSettings(sparkSession)

  override protected val fileCleanupDelayMs: Long = settings.cleanupDelayMs
  override protected val isDeletingExpiredLog: Boolean = settings.deletion
  override protected val defaultCompactInterval: Int = settings.compactInterval

  if (defaultCompactInterval <= 0) {
    throw BatchLogException.invalidArgument(
      BatchLogConf.CompactIntervalKey,
      defaultCompactInterval,
      "it must be a positive number"
    )
  }

  /** The compact interval in force (derived from existing compact files, as Spark does). */
  def interval: Int = compactInterval

  def isCompactFile(logBatchId: Long): Boolean = isCompactionBatch(logBatchId, compactInterval)

  def logFilePath(logBatchId: Long): Path = batchIdToPath(logBatchId)

  /** The file manager of the log's directory (for batchlog's own records beside the log). */
  def checkpointFileManager: CheckpointFileManager = fileManager

  override def shouldRetain(entry: SinkLogEntry, currentTime: Long): Boolean =
    retentionMs == Long.MaxValue || currentTime - entry.modificationTime <= retentionMs

  private def retentionActive: Boolean = retentionMs != Long.MaxValue

  // ---- writing -------------------------------------------------------------------------------

  override def serialize(entries: Array[SinkLogEntry], out: OutputStream): Unit = {
    val w = LogFiles.writer(out)
    entries.foreach(e => LogFiles.writeLine(w, LogFormat.encode(e)))
    w.flush()
  }

  override def deserialize(in: InputStream): Array[SinkLogEntry] = {
    val buf = mutable.ArrayBuffer.empty[SinkLogEntry]
    LogFiles.readLines(in, metadataPath.toString) { (line, lineNo) =>
      buf += decodeLine(line, metadataPath.toString, lineNo)
    }
    buf.toArray
  }

  /**
   * Writes batch `batchId`'s entries (each must carry `batchId`), compacting if it is a compaction
   * batch, then deletes expired log files as Spark does. Returns false if the batch is already
   * logged.
   */
  override def add(batchId: Long, entries: Array[SinkLogEntry]): Boolean = {
    val added =
      if (isCompactionBatch(batchId, compactInterval)) compact(batchId, entries)
      else addNewBatchByStream(batchId)(out => serialize(entries, out))
    if (added && isDeletingExpiredLog) deleteExpiredLog(batchId)
    added
  }

  /**
   * Writes `N.compact`: the live lines of the previous compact file and the batch files since, then
   * `newEntries`, in batch order. Lines already tagged are copied as text.
   */
  private def compact(batchId: Long, newEntries: Array[SinkLogEntry]): Boolean = {
    val startNs = System.nanoTime()
    val now = System.currentTimeMillis()
    val added = addNewBatchByStream(batchId) { out =>
      val w = LogFiles.writer(out)
      getValidBatchesBeforeCompactionBatch(batchId, compactInterval).foreach { id =>
        val inCompact = isCompactionBatch(id, compactInterval)
        val file = batchIdToPath(id).toString
        foreachLineIn(id) { (line, lineNo) =>
          if (!retentionActive && LogFormat.isTagged(line)) LogFiles.writeLine(w, line)
          else {
            val e = decodeLine(line, file, lineNo)
            if (shouldRetain(e, now)) {
              LogFiles.writeLine(
                w,
                LogFormat.encode(e.copy(batchId = LogFormat.resolveBatch(e, id, inCompact)))
              )
            }
          }
        }
      }
      newEntries.foreach { e =>
        if (shouldRetain(e, now)) LogFiles.writeLine(w, LogFormat.encode(e))
      }
      w.flush()
    }
    val ms = (System.nanoTime() - startNs) / 1000000
    if (ms >= COMPACT_LATENCY_WARN_THRESHOLD_MS) {
      logWarning(s"Compacting took $ms ms for compact batch $batchId")
    }
    added
  }

  /**
   * Deletes log files below the compaction that keeps `minBatchesToRetain` batches, once they are
   * older than `cleanupDelay`: the same rule as Spark's `CompactibleFileStreamLog` (whose method is
   * private), so a sink behaves the same with or without batchlog.
   *
   * Unlike Spark, oldest first: the compact interval of a log is derived from its two newest
   * compact files, so a crash in the middle of a deletion in listing order could delete the second
   * newest compact file and keep an older one (e.g. keep 5.compact and 11.compact of an interval-3
   * log), and the next start would derive interval 6, skip compaction batch 14 and fail at 17 for
   * lack of 14.compact. Deleting in batch order keeps the survivors a contiguous, newest range.
   */
  private def deleteExpiredLog(currentBatchId: Long): Unit = {
    if (compactInterval <= currentBatchId + 1 - minBatchesToRetain) {
      val minBatchId = currentBatchId + 1 - minBatchesToRetain
      val minCompactionBatchId = minBatchId - (minBatchId % compactInterval) - 1
      val expiredTime = System.currentTimeMillis() - fileCleanupDelayMs
      fileManager
        .list(metadataPath, (p: Path) => isBatchFile(p) && pathToBatchId(p) < minCompactionBatchId)
        .sortBy(f => pathToBatchId(f.getPath))
        .foreach { f => if (f.getModificationTime <= expiredTime) fileManager.delete(f.getPath) }
    }
  }

  // ---- reading -------------------------------------------------------------------------------

  /** The log files `N` / `N.compact` present, oldest first. */
  def listLogFiles(): Array[FileStatus] =
    if (!fileManager.exists(metadataPath)) Array.empty
    else fileManager.list(metadataPath, batchFilesFilter).sortBy(f => pathToBatchId(f.getPath))

  /** Fails with a clear error unless log file `logBatchId` starts with the `v1` header. */
  def checkHeader(logBatchId: Long): Unit = {
    val file = batchIdToPath(logBatchId)
    val in = LogFiles.open(fileManager, file, s"the log needs it to read batch $logBatchId")
    try {
      val header = new BufferedReader(new InputStreamReader(in, UTF_8)).readLine()
      if (header != LogFormat.Header) throw BatchLogException.badHeader(file.toString, header)
    } finally in.close()
  }

  /** Calls `fn(line, lineNo)` for each entry line of log file `logBatchId`, header checked. */
  def foreachLineIn(logBatchId: Long)(fn: (String, Long) => Unit): Unit =
    LogFiles.foreachLine(
      fileManager,
      batchIdToPath(logBatchId),
      s"the log needs it to read batch $logBatchId"
    )(fn)

  /** Calls `fn` for each entry of log file `logBatchId`, its batch resolved. */
  def foreachEntryIn(logBatchId: Long)(fn: SinkLogEntry => Unit): Unit = {
    val inCompact = isCompactionBatch(logBatchId, compactInterval)
    val file = batchIdToPath(logBatchId).toString
    foreachLineIn(logBatchId) { (line, lineNo) =>
      val e = decodeLine(line, file, lineNo)
      fn(if (e.batchId.isDefined) e
      else e.copy(batchId = LogFormat.resolveBatch(e, logBatchId, inCompact)))
    }
  }

  /** The log files that together hold every live entry: the latest compact file and the rest. */
  def liveLogBatchIds(): Seq[Long] =
    getLatestBatchId().map(latest => getAllValidBatches(latest, compactInterval)).getOrElse(Nil)

  /**
   * Calls `fn` for every live entry (what `allFiles()` returns), streaming: memory does not grow
   * with the number of entries. If a concurrent compaction deletes a file being read, it starts
   * over from the newer compaction, as Spark's `allFiles()` does.
   */
  def foreachLiveEntry(fn: SinkLogEntry => Unit): Unit = {
    val now = System.currentTimeMillis()
    liveLogBatchIds().foreach { id =>
      foreachEntryIn(id) { e => if (shouldRetain(e, now)) fn(e) }
    }
  }

  override def allFiles(): Array[SinkLogEntry] = {
    val buf = mutable.ArrayBuffer.empty[SinkLogEntry]
    foreachLiveEntry(buf += _)
    buf.toArray
  }

  private def decodeLine(line: String, file: String, lineNo: Long): SinkLogEntry =
    try LogFormat.decode(line)
    catch {
      case e: IllegalArgumentException =>
        throw BatchLogException.corruptLine(file, lineNo, e.getMessage)
    }
}

object BatchTaggedFileStreamSinkLog {

  /** Name of the metadata directory under a sink's output path (Spark's). */
  val MetadataDir = "_spark_metadata"

  private val bySink = new java.util.WeakHashMap[FileStreamSinkLog, BatchTaggedFileStreamSinkLog]()

  /**
   * The tagged log that commits for the sink owning `sinkLog`, one per sink (the commit protocol is
   * re-created each batch; the log, like Spark's, lives as long as the sink).
   */
  def forSink(spark: SparkSession, sinkLog: FileStreamSinkLog): BatchTaggedFileStreamSinkLog =
    bySink.synchronized {
      var log = bySink.get(sinkLog)
      if (log == null) {
        log = new BatchTaggedFileStreamSinkLog(
          spark,
          sinkLog.metadataPath.toString,
          sinkLog.retentionMs
        )
        bySink.put(sinkLog, log)
      }
      log
    }
}
