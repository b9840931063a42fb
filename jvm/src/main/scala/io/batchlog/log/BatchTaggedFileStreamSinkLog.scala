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

  /** batchlog's retention (`spark.batchlog.retention.*`), on top of the sink's `retention`. */
  private val retention = BatchLogConf.retention(sparkSession)
  private val maxAgeMs = math.min(retentionMs, retention.ageMs.getOrElse(Long.MaxValue))

  /** Entries older than the sink's `retention` option or `spark.batchlog.retention.age`. */
  override def shouldRetain(entry: SinkLogEntry, currentTime: Long): Boolean =
    maxAgeMs == Long.MaxValue || currentTime - entry.modificationTime <= maxAgeMs

  private def ageRetentionActive: Boolean = maxAgeMs != Long.MaxValue

  private lazy val metadataFs =
    metadataPath.getFileSystem(sparkSession.sessionState.newHadoopConf())

  /** One file's status: a single stat, not a listing of the whole log directory. */
  private def statusOf(file: Path): Option[FileStatus] =
    try Some(metadataFs.getFileStatus(file))
    catch { case _: java.io.FileNotFoundException => None }

  // ---- writing -------------------------------------------------------------------------------

  override def serialize(entries: Array[SinkLogEntry], out: OutputStream): Unit = {
    val w = LogFiles.writer(out)
    entries.foreach(e => LogFiles.writeLine(w, LogFormat.encode(e)))
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
    LogFiles.readLines(in, metadataPath.toString) { (line, lineNo) =>
      buf += decodeLine(line, metadataPath.toString, lineNo)
    }
    buf.toArray
  }

  /**
   * Writes batch `batchId`'s entries (each must carry `batchId`), compacting if it is a compaction
   * batch, then deletes expired log files as Spark does. Returns false if the batch is already
   * logged. Refuses ([[BatchLogException]] `BATCH_OUT_OF_ORDER`) any id but the next one: a gap
   * means the log was cut back (rewound) under a running writer, and logging the batch would leave
   * a log no reader can follow. An empty log accepts any id, as Spark's does.
   */
  override def add(batchId: Long, entries: Array[SinkLogEntry]): Boolean = {
    requireNext(batchId)
    val added =
      if (isCompactionBatch(batchId, compactInterval)) compact(batchId, entries)
      else addNewBatchByStream(batchId)(out => serialize(entries, out))
    if (added && isDeletingExpiredLog) deleteExpiredLog(batchId)
    added
  }

  /** True if log file `batchId` (`N` or `N.compact`) exists. */
  def isLogged(batchId: Long): Boolean = fileManager.exists(batchIdToPath(batchId))

  /** One probe on the happy path (the previous batch's file); a listing only when it is absent. */
  private def requireNext(batchId: Long): Unit =
    if (batchId > 0 && !isLogged(batchId - 1)) {
      getLatestBatchId().filter(_ < batchId).foreach { latest =>
        throw BatchLogException.batchOutOfOrder(metadataPath.toString, batchId, latest)
      }
    }

  /**
   * Writes `N.compact`: the live lines of the previous compact file and the batch files since, then
   * `newEntries`, in batch order, and its [[CompactIndex]]. A tagged line is copied as text (its
   * batch read from its tail); only untagged lines and, under an age retention, every line are
   * parsed. Retention drops lines of batches older than `retention.batches` and entries older than
   * the age; what it drops is logged and recorded in the index.
   *
   * The previous compact file's runs are copied as bytes only through a proved index (or one just
   * built by scanning the file), each run's CRC32C checked as it is copied. A mismatch (the file
   * changed under its index) fails the attempt inside `addNewBatchByStream`, which cancels the temp
   * file so nothing is published; compaction then retries once from a fresh scan.
   */
  private def compact(batchId: Long, newEntries: Array[SinkLogEntry]): Boolean = {
    val startNs = System.nanoTime()
    val added =
      try compactOnce(batchId, newEntries, rescan = false)
      catch {
        case s: StaleRun =>
          logWarning(s"${s.file} does not match its index (${s.getMessage}); compacting batch " +
            s"$batchId again from a fresh scan of it")
          try compactOnce(batchId, newEntries, rescan = true)
          catch {
            case s2: StaleRun =>
              throw BatchLogException.corruptLine(
                s2.file.toString,
                -1,
                s"it changed while compaction $batchId copied it: ${s2.getMessage}"
              )
          }
      }
    val ms = (System.nanoTime() - startNs) / 1000000
    if (ms >= COMPACT_LATENCY_WARN_THRESHOLD_MS) {
      logWarning(s"Compacting took $ms ms for compact batch $batchId")
    }
    added
  }

  /** A run of a compact file whose bytes do not match the index compaction copies it by. */
  final private class StaleRun(val file: Path, detail: String) extends Exception(detail)

  private def compactOnce(
      batchId: Long,
      newEntries: Array[SinkLogEntry],
      rescan: Boolean
  ): Boolean = {
    val now = System.currentTimeMillis()
    val minBatch = retention.batches.map(n => batchId + 1 - n).getOrElse(Long.MinValue)
    val crc = new java.util.zip.CRC32C
    val index = new CompactIndex.Builder(crc)
    var endOffset = 0L
    val added = addNewBatchByStream(batchId) { out =>
      val counted = new CompactIndex.CountingStream(out, crc)
      val w = LogFiles.writer(counted)
      var run: Option[Option[Long]] = None // the batch of the current run of lines, if any
      def emit(line: String, batch: Option[Long]): Unit =
        if (batch.exists(_ < minBatch)) index.drop(batch)
        else {
          // A run's offset and CRC are exact only with the writer flushed at its start.
          if (!run.contains(batch)) { w.flush(); run = Some(batch) }
          index.line(batch, counted.count)
          LogFiles.writeLine(w, line)
        }
      getValidBatchesBeforeCompactionBatch(batchId, compactInterval).foreach { id =>
        val inCompact = isCompactionBatch(id, compactInterval)
        // Byte copy only keeps tags that are in the lines: a batch resolved from elsewhere
        // (a surviving batch file) must be written into the line while the proof still exists.
        val copyable = if (inCompact && !ageRetentionActive)
          Some(indexOf(id, rebuild = rescan)).filter(_.runs.forall(_.batchId.isDefined))
            .filterNot(_ => hasUntaggedLines.contains(id))
        else None
        copyable match {
          case Some(prev) =>
            // The previous compact file is all tagged: copy its runs as bytes, dropping whole
            // runs of batches below the retention, and shift their offsets into the new index.
            w.flush(); run = None
            copyRuns(id, prev, counted, index, minBatch)
          case None =>
            val file = batchIdToPath(id).toString
            foreachLineIn(id) { (line, lineNo) =>
              // Lines of batch files (at most compactInterval - 1 files) are parsed, as Spark's
              // compaction does: a corrupt entry fails here, naming its file and line, instead
              // of outliving its batch file inside the compact file.
              val tagged = LogFormat.taggedBatch(line)
              if (inCompact && tagged.isDefined && !ageRetentionActive) emit(line, tagged)
              else {
                val e = decodeLine(line, file, lineNo)
                val b = batchOf(e, id)
                if (!shouldRetain(e, now)) index.drop(b)
                else emit(if (tagged.isDefined) line else LogFormat.encode(e.copy(batchId = b)), b)
              }
            }
        }
      }
      newEntries.foreach { e =>
        if (shouldRetain(e, now)) emit(LogFormat.encode(e), e.batchId) else index.drop(e.batchId)
      }
      w.flush()
      endOffset = counted.count
    }
    if (added) {
      val compactFile = batchIdToPath(batchId)
      statusOf(compactFile).foreach { st =>
        CompactIndex.write(
          fileManager,
          CompactIndex.pathOf(compactFile),
          index.result(endOffset, st)
        )
      }
      if (index.dropped > 0) {
        logInfo(s"Retention dropped ${index.dropped} entries (batches up to " +
          s"${index.droppedMaxBatch}) from compact batch $batchId")
      }
    }
    added
  }

  /**
   * Copies the runs of compact file `compactId` (as bytes) that retention keeps, checking each
   * run's CRC32C as it goes (no line is parsed); a mismatch is a [[StaleRun]].
   */
  private def copyRuns(
      compactId: Long,
      prev: CompactIndex,
      out: CompactIndex.CountingStream,
      index: CompactIndex.Builder,
      minBatch: Long
  ): Unit = {
    val file = batchIdToPath(compactId)
    val in = LogFiles.open(fileManager, file, s"compaction needs it")
    val buf = new Array[Byte](1 << 20)
    val crc = new java.util.zip.CRC32C
    try {
      prev.runs.foreach { run =>
        if (run.batchId.exists(_ < minBatch)) index.dropRun(run)
        else {
          if (in.getPos != run.offset) in.seek(run.offset)
          index.run(run, out.count)
          crc.reset()
          var left = run.length
          while (left > 0) {
            val n = in.read(buf, 0, math.min(left, buf.length.toLong).toInt)
            if (n < 0) throw new StaleRun(file, s"it ends inside the run at byte ${run.offset}")
            crc.update(buf, 0, n)
            out.write(buf, 0, n)
            left -= n
          }
          if (crc.getValue != run.crc) {
            throw new StaleRun(
              file,
              s"the CRC32C of bytes ${run.offset}..${run.offset + run.length} differs"
            )
          }
        }
      }
    } finally in.close()
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
      def logName(p: Path): String =
        if (CompactIndex.isIndexFile(p.getName)) p.getName.stripSuffix(CompactIndex.Suffix)
        else p.getName
      def expired(p: Path): Boolean =
        isBatchFile(new Path(p.getParent, logName(p))) &&
          getBatchIdFromFileName(logName(p)) < minCompactionBatchId
      // An index before its compact file: a crash between leaves a compact file without an
      // index (rebuilt when read), never an index without its compact file.
      def order(f: FileStatus) =
        (getBatchIdFromFileName(logName(f.getPath)), !CompactIndex.isIndexFile(f.getPath.getName))
      fileManager
        .list(metadataPath, (p: Path) => expired(p))
        .sortBy(order)
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
    val file = batchIdToPath(logBatchId).toString
    foreachLineIn(logBatchId) { (line, lineNo) =>
      val e = decodeLine(line, file, lineNo)
      fn(if (e.batchId.isDefined) e else e.copy(batchId = batchOf(e, logBatchId)))
    }
  }

  /** Indexes rebuilt in memory by this instance, by compact id (readers never write files). */
  private val rebuiltIndexes = new java.util.concurrent.ConcurrentHashMap[Long, CompactIndex]()

  /**
   * The index of compact file `compactId`: the one on disk if it is proved
   * ([[CompactIndex.prove]]), else rebuilt by one scan of the file and kept in memory. Reading
   * never writes: only compaction, `adopt` (which rewrites compact files) and `repair` write index
   * files, so read-only commands, dry runs and refused operations leave the sink exactly as it was.
   */
  def indexOf(compactId: Long, rebuild: Boolean = false): CompactIndex = {
    val file = batchIdToPath(compactId)
    val status = statusOf(file).getOrElse(
      throw BatchLogException.missingLogFile(
        file.toString,
        s"the log needs it to read batch $compactId"
      )
    )
    val onDisk =
      if (rebuild) None else CompactIndex.load(fileManager, CompactIndex.pathOf(file), status)
    onDisk.flatMap(_.toOption).getOrElse {
      val cached = Option(rebuiltIndexes.get(compactId)).filter(i => !rebuild && i.matches(status))
      cached.getOrElse {
        onDisk.flatMap(_.left.toOption).filter(_ != CompactIndex.LegacyReason).foreach { why =>
          logWarning(s"Not using ${CompactIndex.pathOf(file)}: $why. Rebuilding it in memory " +
            "from its compact file (`python -m batchlog repair` rewrites it)")
        }
        val index = scanIndex(compactId, status)
        rebuiltIndexes.put(compactId, index)
        index
      }
    }
  }

  /**
   * Builds the index of compact file `compactId` (of `status`) by reading it once, every run's
   * CRC32C computed from the raw bytes: proved by construction.
   */
  def scanIndex(compactId: Long, status: FileStatus): CompactIndex = {
    val file = batchIdToPath(compactId)
    val crc = new java.util.zip.CRC32C
    val b = new CompactIndex.Builder(crc)
    val in = LogFiles.open(fileManager, file, s"the log needs it to read batch $compactId")
    var untagged = false
    val end =
      try {
        CompactIndex.scanLines(in, crc, h => BatchLogException.badHeader(file.toString, h)) {
          var lineNo = 1L
          (line, offset) =>
            lineNo += 1
            untagged ||= !LogFormat.isTagged(line)
            b.line(batchOfLine(line, compactId, file.toString, lineNo), offset)
        }
      } finally in.close()
    if (untagged) hasUntaggedLines.add(compactId) else hasUntaggedLines.remove(compactId)
    b.result(end, status)
  }

  /** Compact files found by a scan to hold lines without `batchId` (written by plain Spark). */
  private val hasUntaggedLines = java.util.concurrent.ConcurrentHashMap.newKeySet[Long]()

  /** Writes the index of compact file `compactId` from a scan (after `adopt` rewrote the file). */
  def writeIndex(compactId: Long): Unit = {
    val file = batchIdToPath(compactId)
    statusOf(file).foreach(st =>
      CompactIndex.write(fileManager, CompactIndex.pathOf(file), scanIndex(compactId, st))
    )
  }

  /**
   * The on-disk index of compact file `compactId` checked in full: None if it is proved and every
   * run's CRC32C matches the compact file (one streaming read); else Some(the reason it is not
   * used: [[CompactIndex.AbsentReason]] if there is none, [[CompactIndex.LegacyReason]] for a
   * legacy one, which readers rebuild in memory as a matter of course, or the damage).
   */
  def indexProblem(compactId: Long): Option[String] = {
    val file = batchIdToPath(compactId)
    statusOf(file).flatMap { status =>
      CompactIndex.load(fileManager, CompactIndex.pathOf(file), status) match {
        case None => Some(CompactIndex.AbsentReason)
        case Some(Left(why)) => Some(why)
        case Some(Right(index)) =>
          val in = LogFiles.open(fileManager, file, s"the log needs it to read batch $compactId")
          try CompactIndex.checkRuns(index, in)
          finally in.close()
      }
    }
  }

  private def batchOfLine(
      line: String,
      logBatchId: Long,
      file: String,
      lineNo: Long
  ): Option[Long] =
    LogFormat.taggedBatch(line).orElse(batchOf(decodeLine(line, file, lineNo), logBatchId))

  /**
   * Calls `fn` for every live entry whose batch (`None`: untagged) satisfies `wanted`, reading only
   * those entries: per-batch files are skipped by name and compact files are read through their
   * [[CompactIndex]], one seek per run.
   */
  def foreachLiveEntryWhere(wanted: Option[Long] => Boolean)(fn: SinkLogEntry => Unit): Unit = {
    val now = System.currentTimeMillis()
    val live = (e: SinkLogEntry) => if (shouldRetain(e, now)) fn(e)
    liveLogBatchIds().foreach { id =>
      if (!isCompactionBatch(id, compactInterval)) {
        if (wanted(Some(id))) foreachEntryIn(id)(live)
      } else {
        // Each run is checked as it is read (batch and count); a mismatch means the index is
        // stale: it is rebuilt, and only the runs not yet passed on are read from the new one.
        val done = mutable.HashSet.empty[(Option[Long], Long)]
        def readAll(index: CompactIndex): Boolean =
          index.runs.filter(r => wanted(r.batchId) && !done((r.batchId, r.offset))).forall { run =>
            readRun(id, run) match {
              case Some(entries) => entries.foreach(live); done += ((run.batchId, run.offset)); true
              case None => false
            }
          }
        if (!readAll(indexOf(id)) && !readAll(indexOf(id, rebuild = true))) {
          throw BatchLogException.corruptLine(
            batchIdToPath(id).toString,
            -1,
            "it changed while it was read"
          )
        }
      }
    }
  }

  /** One live entry (the oldest), read without scanning the log; None if the log is empty. */
  def firstLiveEntry(): Option[SinkLogEntry] =
    liveLogBatchIds().iterator.flatMap { id =>
      if (isCompactionBatch(id, compactInterval)) {
        def first(index: CompactIndex) = index.runs.headOption.map(r => readRun(id, r))
        (first(indexOf(id)) match {
          case Some(None) => first(indexOf(id, rebuild = true)).flatten
          case other => other.flatten
        }).flatMap(_.headOption)
      } else {
        val buf = mutable.ArrayBuffer.empty[SinkLogEntry]
        foreachEntryIn(id)(buf += _)
        buf.headOption
      }
    }.nextOption()

  /**
   * The entries of one run, or None if they do not match it (stale index): each line of the run's
   * batch, `count` lines, and the CRC32C of the run's bytes.
   */
  private def readRun(compactId: Long, run: IndexRun): Option[Seq[SinkLogEntry]] = {
    val file = batchIdToPath(compactId)
    val in = LogFiles.open(fileManager, file, s"the log needs it to read batch $compactId")
    try {
      in.seek(run.offset)
      val checked = new java.util.zip.CheckedInputStream(
        new CompactIndex.BoundedStream(in, run.length),
        new java.util.zip.CRC32C
      )
      val r = new BufferedReader(new InputStreamReader(checked, UTF_8), 1 << 16)
      if (r.read() != '\n') return None
      val out = Seq.newBuilder[SinkLogEntry]
      var n = 0L
      var line = r.readLine()
      while (line != null) {
        val e = decodeLine(line, file.toString, -1)
        val b = batchOf(e, compactId)
        if (b != run.batchId) return None
        out += e.copy(batchId = b)
        n += 1
        line = r.readLine()
      }
      val bytesMatch = checked.getChecksum.getValue == run.crc
      if (n == run.count && bytesMatch) Some(out.result()) else None
    } catch {
      case _: java.io.EOFException => None
    } finally in.close()
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

  /** Proofs of lineage computed by this instance, by compact id ([[LineageProof]]). */
  private val proofs = new java.util.concurrent.ConcurrentHashMap[Long, LineageProof]()

  /**
   * The batches the surviving log files prove for the untagged lines of compact file `compactId`,
   * by logged path; empty when all its lines are tagged (nothing is read then).
   */
  def provenPaths(compactId: Long): Map[String, Long] = {
    indexOf(compactId) // a scan notes compact files with untagged lines
    if (hasUntaggedLines.contains(compactId)) lineageProof(compactId).paths else Map.empty
  }

  /** What the surviving log files prove about the untagged entries of compact file `compactId`. */
  def lineageProof(compactId: Long): LineageProof =
    proofs.computeIfAbsent(compactId, id => LineageProof.of(this, id))

  /**
   * The batch of entry `e` read from log file `logBatchId`: its tag, else what the file or the data
   * file name proves ([[LogFormat.resolveBatch]]), else, in a compact file, what the surviving
   * per-batch log files prove ([[LineageProof]]); None if nothing proves it.
   */
  def batchOf(e: SinkLogEntry, logBatchId: Long): Option[Long] = {
    val inCompact = isCompactionBatch(logBatchId, compactInterval)
    LogFormat.resolveBatch(e, logBatchId, inCompact).orElse(
      if (inCompact) lineageProof(logBatchId).batchOf(e.path) else None
    )
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

  /** `<output>/_spark_metadata`, or a clear error if `outputPath` is not a file sink. */
  def metadataPathOf(spark: SparkSession, outputPath: String): Path = {
    if (outputPath == null || outputPath.isEmpty) {
      throw BatchLogException.invalidArgument("path", "''", "give the sink's output directory")
    }
    val out = new Path(outputPath)
    val fs = out.getFileSystem(spark.sessionState.newHadoopConf())
    val meta = new Path(fs.makeQualified(out), BatchTaggedFileStreamSinkLog.MetadataDir)
    if (!fs.exists(meta) || !fs.getFileStatus(meta).isDirectory)
      throw BatchLogException.notASink(outputPath)
    meta
  }

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
