package io.batchlog.log

import java.io.{
  BufferedReader,
  BufferedWriter,
  FileNotFoundException,
  InputStream,
  InputStreamReader,
  OutputStream,
  OutputStreamWriter
}
import java.nio.charset.StandardCharsets.UTF_8

import scala.collection.mutable

import org.apache.hadoop.fs.{FileStatus, Path}

import org.apache.spark.sql.SparkSession
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

  override def shouldRetain(entry: SinkLogEntry, currentTime: Long): Boolean =
    retentionMs == Long.MaxValue || currentTime - entry.modificationTime <= retentionMs

  private def retentionActive: Boolean = retentionMs != Long.MaxValue

  // ---- writing -------------------------------------------------------------------------------

  override def serialize(entries: Array[SinkLogEntry], out: OutputStream): Unit = {
    val w = writer(out)
    w.write(LogFormat.Header)
    entries.foreach { e => w.write('\n'); w.write(LogFormat.encode(e)) }
    w.flush()
  }

  /**
   * Spark's `get` (also behind `getLatest`/`getRange`), reading through [[foreachLineIn]] so that
   * an error names the log file: `deserialize` only sees a stream. Missing file: `None`, as Spark.
   */
  override def get(batchId: Long): Option[Array[SinkLogEntry]] = {
    val file = batchIdToPath(batchId)
    if (!fileManager.exists(file)) None
    else {
      val buf = mutable.ArrayBuffer.empty[SinkLogEntry]
      foreachLineIn(batchId)((line, lineNo) => buf += decodeLine(line, file.toString, lineNo))
      Some(buf.toArray)
    }
  }

  override def deserialize(in: InputStream): Array[SinkLogEntry] = {
    val buf = mutable.ArrayBuffer.empty[SinkLogEntry]
    readLines(in, metadataPath.toString) { (line, lineNo) =>
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
   * `newEntries`, in batch order. Tagged lines of the previous compact file are copied as text: a
   * compact file is only written here, from lines this method validated. Lines of batch files (at
   * most `compactInterval - 1` files) are parsed first, as Spark's compaction does, so a corrupt
   * entry fails the compaction, naming its file and line, instead of being copied into the compact
   * file and outliving its batch file.
   */
  private def compact(batchId: Long, newEntries: Array[SinkLogEntry]): Boolean = {
    val startNs = System.nanoTime()
    val now = System.currentTimeMillis()
    val added = addNewBatchByStream(batchId) { out =>
      val w = writer(out)
      w.write(LogFormat.Header)
      getValidBatchesBeforeCompactionBatch(batchId, compactInterval).foreach { id =>
        val inCompact = isCompactionBatch(id, compactInterval)
        val file = batchIdToPath(id).toString
        foreachLineIn(id) { (line, lineNo) =>
          if (inCompact && !retentionActive && LogFormat.isTagged(line)) {
            w.write('\n'); w.write(line)
          } else {
            val e = decodeLine(line, file, lineNo)
            if (shouldRetain(e, now)) {
              w.write('\n')
              w.write(LogFormat.encode(e.copy(batchId = LogFormat.resolveBatch(e, id, inCompact))))
            }
          }
        }
      }
      newEntries.foreach { e =>
        if (shouldRetain(e, now)) { w.write('\n'); w.write(LogFormat.encode(e)) }
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
   */
  private def deleteExpiredLog(currentBatchId: Long): Unit = {
    if (compactInterval <= currentBatchId + 1 - minBatchesToRetain) {
      val minBatchId = currentBatchId + 1 - minBatchesToRetain
      val minCompactionBatchId = minBatchId - (minBatchId % compactInterval) - 1
      val expiredTime = System.currentTimeMillis() - fileCleanupDelayMs
      fileManager
        .list(metadataPath, (p: Path) => isBatchFile(p) && pathToBatchId(p) < minCompactionBatchId)
        .foreach { f => if (f.getModificationTime <= expiredTime) fileManager.delete(f.getPath) }
    }
  }

  // ---- reading -------------------------------------------------------------------------------

  /** The log files `N` / `N.compact` present, oldest first. */
  def listLogFiles(): Array[FileStatus] =
    if (!fileManager.exists(metadataPath)) Array.empty
    else fileManager.list(metadataPath, batchFilesFilter).sortBy(f => pathToBatchId(f.getPath))

  /** Fails with a clear error unless log file `logBatchId` starts with the `v1` header. */
  def checkHeader(logBatchId: Long): Unit = withLogFile(logBatchId) { (in, file) =>
    val header = new BufferedReader(new InputStreamReader(in, UTF_8)).readLine()
    if (header != LogFormat.Header) throw BatchLogException.badHeader(file, header)
  }

  /** Calls `fn(line, lineNo)` for each entry line of log file `logBatchId`, header checked. */
  def foreachLineIn(logBatchId: Long)(fn: (String, Long) => Unit): Unit =
    withLogFile(logBatchId)((in, file) => readLines(in, file)(fn))

  private def withLogFile[A](logBatchId: Long)(fn: (InputStream, String) => A): A = {
    val file = batchIdToPath(logBatchId)
    val in =
      try fileManager.open(file)
      catch {
        case _: FileNotFoundException =>
          throw BatchLogException.missingLogFile(
            file.toString,
            s"the log needs it to read batch $logBatchId"
          )
      }
    try fn(in, file.toString)
    finally in.close()
  }

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
   * with the number of entries. If a concurrent compaction deletes a log file before the first
   * entry reached `fn`, it starts over from the newer compaction, as Spark's `allFiles()` does;
   * once entries have been passed on it cannot start over without repeating them, so it fails with
   * [[BatchLogException]] `MISSING_LOG_FILE` (use [[allFiles]], which always starts over).
   */
  def foreachLiveEntry(fn: SinkLogEntry => Unit): Unit = {
    var delivered = false
    readLive(() => !delivered) { e => delivered = true; fn(e) }
  }

  override def allFiles(): Array[SinkLogEntry] = {
    val buf = mutable.ArrayBuffer.empty[SinkLogEntry]
    readLive { () => buf.clear(); true }(buf += _)
    buf.toArray
  }

  /**
   * Reads the live entries from the latest batch; if a log file is gone (deleted by a concurrent
   * compaction's cleanup) and `canRestart()`, retries from the new latest batch provided a newer
   * compaction exists, exactly as Spark's `CompactibleFileStreamLog.allFiles()`.
   */
  private def readLive(canRestart: () => Boolean)(fn: SinkLogEntry => Unit): Unit = {
    var latest = getLatestBatchId().getOrElse(-1L)
    var done = false
    while (!done && latest >= 0) {
      val now = System.currentTimeMillis()
      try {
        getAllValidBatches(latest, compactInterval).foreach { id =>
          foreachEntryIn(id) { e => if (shouldRetain(e, now)) fn(e) }
        }
        done = true
      } catch {
        case e: BatchLogException if e.code == BatchLogException.MissingLogFile =>
          val expectedMinLatest = nextCompactionBatchId(latest, compactInterval)
          latest = getLatestBatchId().getOrElse(-1L)
          if (latest < expectedMinLatest || !canRestart()) throw e
      }
    }
  }

  private def decodeLine(line: String, file: String, lineNo: Long): SinkLogEntry =
    try LogFormat.decode(line)
    catch {
      case e: IllegalArgumentException =>
        throw BatchLogException.corruptLine(file, lineNo, e.getMessage)
    }

  private def readLines(in: InputStream, file: String)(fn: (String, Long) => Unit): Unit = {
    val r = new BufferedReader(new InputStreamReader(in, UTF_8), 1 << 16)
    val header = r.readLine()
    if (header != LogFormat.Header) throw BatchLogException.badHeader(file, header)
    var lineNo = 1L
    var line = r.readLine()
    while (line != null) {
      lineNo += 1
      fn(line, lineNo)
      line = r.readLine()
    }
  }

  private def writer(out: OutputStream) =
    new BufferedWriter(new OutputStreamWriter(out, UTF_8), 1 << 16)
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
