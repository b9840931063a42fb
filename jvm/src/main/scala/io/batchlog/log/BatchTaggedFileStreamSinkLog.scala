package io.batchlog.log

import java.io.{InputStream, OutputStream}

import scala.collection.mutable

import org.apache.hadoop.fs.{FileStatus, FileSystem, Path}

import org.apache.spark.sql.SparkSession
import io.batchlog.shim.CheckpointFileManager
import io.batchlog.shim.CompactibleFileStreamLog
import io.batchlog.shim.CompactibleFileStreamLog._
import io.batchlog.shim.FileStreamSinkLog

import io.batchlog.{BatchLogConf, BatchLogException, BuildInfo}

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
 * This file holds the log's life cycle (adding a batch, cleanup) and its plain reads; compaction is
 * in [[StreamingCompaction]] and the reads through a compact file's index in [[CompactIndexReads]],
 * both mixed into this class.
 *
 * @param retentionMs
 *   the sink's `retention` option: entries older than this are dropped at compaction and hidden
 *   from readers, as `FileStreamSinkLog` does
 * @param listing
 *   for an operation that reads and changes nothing (`verify`, `vacuum`'s plan): the log is read as
 *   one listing of its directory saw it ([[ListedOnce]], from
 *   [[BatchTaggedFileStreamSinkLog.listedOnce]]); never for a log that is written
 */
class BatchTaggedFileStreamSinkLog(
    sparkSession: SparkSession,
    path: String,
    retentionMs: Long = Long.MaxValue,
    private[log] val listing: Option[ListedOnce] = None
) extends CompactibleFileStreamLog[SinkLogEntry](LogFormat.Version, sparkSession, path)
    with CompactIndexReads
    with StreamingCompaction {

  /** The constructor JVM callers (py4j, Java) see: a Scala default is no Java overload. */
  def this(sparkSession: SparkSession, path: String, retentionMs: Long) =
    this(sparkSession, path, retentionMs, None)

  BuildInfo.requireMatchingSpark()

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

  /**
   * The sink's metrics in this JVM, in Spark's metrics system ([[SinkMetrics]]): one source per
   * sink, whoever opens its log, so keyed by the qualified path (Spark 3.5's sink names its log by
   * the path as the user gave it, a rewind by the qualified one).
   */
  lazy val metrics: SinkMetrics = SinkMetrics.of(metadataFs.makeQualified(metadataPath))

  def isCompactFile(logBatchId: Long): Boolean = isCompactionBatch(logBatchId, compactInterval)

  def logFilePath(logBatchId: Long): Path = batchIdToPath(logBatchId)

  /**
   * Log file `N` / `N.compact`, qualified (`file:/...`, `hdfs://...`) even when the log was opened
   * with a bare path, so that every write knows its file system ([[LogFiles.publish]]).
   */
  override def batchIdToPath(batchId: Long): Path =
    metadataFs.makeQualified(super.batchIdToPath(batchId))

  /** The file manager of the log's directory (for batchlog's own records beside the log). */
  def checkpointFileManager: CheckpointFileManager = fileManager

  /** The manager the log's reads go through: the `listing`, else [[checkpointFileManager]]. */
  def reads: CheckpointFileManager = listing.getOrElse(fileManager)

  /** With a `listing`, from it (Spark's lists the directory on every call). */
  override def getLatestBatchId(): Option[Long] =
    if (listing.isEmpty) super.getLatestBatchId()
    else listLogFiles().filter(_.isFile).lastOption.map(f => pathToBatchId(f.getPath))

  /** batchlog's retention (`spark.batchlog.retention.*`), on top of the sink's `retention`. */
  private[log] val retention = BatchLogConf.retention(sparkSession)

  /** `spark.batchlog.compaction.serverSide`: may a compaction copy on the store? */
  private[log] val serverSideCompaction = BatchLogConf.serverSideCompaction(sparkSession)
  private[log] val serverSideMinBytes = BatchLogConf.serverSideMinBytes(sparkSession)
  private val maxAgeMs = math.min(retentionMs, retention.ageMs.getOrElse(Long.MaxValue))

  /** Entries older than the sink's `retention` option or `spark.batchlog.retention.age`. */
  override def shouldRetain(entry: SinkLogEntry, currentTime: Long): Boolean =
    maxAgeMs == Long.MaxValue || currentTime - entry.modificationTime <= maxAgeMs

  private[log] def ageRetentionActive: Boolean = maxAgeMs != Long.MaxValue

  private lazy val metadataFs =
    metadataPath.getFileSystem(sparkSession.sessionState.newHadoopConf())

  /** The Hadoop file system of the log's directory (Hadoop's cached instance). */
  def fileSystem: org.apache.hadoop.fs.FileSystem = metadataFs

  /** One file's status: a single stat, not a listing of the whole log directory. */
  private[log] def statusOf(file: Path): Option[FileStatus] = listing match {
    case Some(once) if once.covers(file) => once.statusOf(file)
    case _ =>
      knownPrev.filter(_._1 == file).map(_._2).orElse {
        try Some(metadataFs.getFileStatus(file))
        catch { case _: java.io.FileNotFoundException => None }
      }
  }

  // ---- writing -------------------------------------------------------------------------------

  override def serialize(entries: Array[SinkLogEntry], out: OutputStream): Unit = {
    val w = LogFiles.writer(out)
    entries.foreach(e => LogFiles.writeLine(w, LogFormat.encode(e)))
    w.flush()
  }

  /**
   * Spark's atomic write of a log file (behind `addNewBatchByStream`), through
   * [[LogFiles.publish]]: the same temp file and atomic publish, without the processes Hadoop forks
   * for it on a local disk. A file that appeared meanwhile was written by a second writer: Spark's
   * error for that.
   */
  override protected def write(batchMetadataFile: Path, fn: OutputStream => Unit): Unit =
    try {
      publishSent = false
      def written(out: OutputStream): Unit = {
        fn(out)
        beforePublish(batchMetadataFile) // the bytes are written, not yet published
        publishSent = true
      }
      storeCopy.filter(_.file == batchMetadataFile) match {
        case Some(target) => // a compaction on the store ([[ObjectStoreCopy]], [[GcsCompose]])
          target.publish(written)
        case None => LogFiles.publish(fileManager, batchMetadataFile, overwrite = false)(written)
      }
    } catch {
      case e: org.apache.hadoop.fs.FileAlreadyExistsException =>
        throw new java.util.ConcurrentModificationException(
          s"Multiple streaming queries are concurrently using $metadataPath",
          e
        )
    }

  /**
   * Spark's `get` (also behind `getLatest`/`getRange`), reading through [[foreachLineIn]] so that
   * an error names the log file: `deserialize` only sees a stream. Missing file: `None`, as Spark.
   */
  override def get(batchId: Long): Option[Array[SinkLogEntry]] = {
    val file = batchIdToPath(batchId)
    if (!reads.exists(file)) None
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
      else publishBatchFile(batchId, entries)
    if (added) lastAdded = batchId
    if (added && isDeletingExpiredLog) deleteExpiredLog(batchId)
    added
  }

  /**
   * Claims log id `batchId` (the one after the latest) for an operation that fences the sink's
   * writer (a rewind): logs it as an empty batch, compacting if it is a compaction batch, by the
   * same write-once publish a writer uses, and without the cleanup of expired log files (the cut
   * that follows may need them). A writer that passed its checks before the operation bumped the
   * epoch and publishes this id now loses: its publish is refused. False if the id was logged
   * already (a writer won: the operation must stop); `BATCH_OUT_OF_ORDER` if it is not the next id.
   */
  def claimNext(batchId: Long): Boolean =
    try {
      requireNext(batchId)
      if (isCompactionBatch(batchId, compactInterval)) compact(batchId, Array.empty)
      else publishBatchFile(batchId, Array.empty)
    } catch { case _: java.util.ConcurrentModificationException => false }

  /**
   * Batch file `batchId` holding `entries`; a failed publish is settled by reading the file back
   * ([[PublishOutcome]]): the store may have applied it and lost the answer.
   */
  private def publishBatchFile(batchId: Long, entries: Array[SinkLogEntry]): Boolean = {
    val bytes = new java.io.ByteArrayOutputStream()
    serialize(entries, bytes)
    val published = PublishOutcome.settle(batchIdToPath(batchId), batchId, statusOf, publishSent)(
      addNewBatchByStream(batchId)(bytes.writeTo)
    )(st => PublishOutcome.holdsBytes(fileManager, st.getPath, bytes.toByteArray))
    if (published) metrics.batchFilePublished(bytes.size.toLong)
    published
  }

  /**
   * Called with a log file's path after its bytes are written and right before it is published (a
   * hard link, a rename or the upload's completion): its writer's last check
   * ([[io.batchlog.commit.WriterGuard.requireLease]]), which may refuse it. Nothing by default.
   */
  @volatile var beforePublish: Path => Unit = (_: Path) => ()

  /**
   * Set by [[write]] once a log file's bytes are written and its writer's last check passed: the
   * request that publishes it is under way, and a failure from here on may have been applied
   * ([[PublishOutcome]]); one before it published nothing.
   */
  @volatile private[log] var publishSent = false

  /** Set by a compaction for the upload that copies on the store ([[StreamingCompaction]]). */
  @volatile private[log] var storeCopy: Option[StoreCompaction] = None

  /** The batch this instance logged last (-1: none): the next one needs no probe for it. */
  @volatile private var lastAdded = -1L

  /** True if log file `batchId` (`N` or `N.compact`) exists. */
  def isLogged(batchId: Long): Boolean = reads.exists(batchIdToPath(batchId))

  /**
   * No probe when this log wrote the previous batch (a running query, each batch after its first);
   * else one probe (the previous batch's file), and a listing only when it is absent. The skipped
   * probe is safe for a guarded writer ([[io.batchlog.commit.WriterGuard]]): a rewind cuts the log
   * only after it bumped the epoch (the writer's check before each commit sees it) and, unless
   * forced, after it saw the writer's lease unchanged for a whole timeout, while the writer refuses
   * to publish ([[beforePublish]]) once its last refresh is older than the timeout minus a margin;
   * and a publish racing the rewind's epoch bump loses to the rewind's create-once claim of the
   * next log id ([[io.batchlog.ops.Rewind]]).
   */
  private def requireNext(batchId: Long): Unit =
    if (batchId > 0 && lastAdded != batchId - 1 && !isLogged(batchId - 1)) {
      getLatestBatchId().filter(_ < batchId).foreach { latest =>
        throw BatchLogException.batchOutOfOrder(metadataPath.toString, batchId, latest)
      }
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
      val (lastCut, youngest) = lastSweep
      // A writer adds log files above the cut: with the cut where it was, the files below it are
      // the ones the last sweep kept, and none of them has expired yet. (One another process put
      // below the cut, as `repair` may, is swept when the cut next moves.)
      if (minCompactionBatchId == lastCut && expiredTime < youngest) return
      def expired(name: String): Boolean = LogLayout.idOfName(name).exists(_ < minCompactionBatchId)
      // An index before its compact file: a crash between leaves a compact file without an
      // index (rebuilt when read), never an index without its compact file.
      def order(f: (String, Long)) =
        (LogLayout.idOfName(f._1).get, !CompactIndex.isIndexFile(f._1))
      // On a local disk a listing builds a Hadoop status (several system calls) for every file of
      // the log: names first, and one stat for the age of each file below the cut.
      val candidates: Seq[(String, Long)] =
        LocalPublish.localFile(
          checkpointFileManager,
          metadataFs.makeQualified(metadataPath)
        ) match {
          case Some(local) =>
            Option(local.list()).toSeq.flatten.filter(expired)
              .map(n => (n, new java.io.File(local, n).lastModified()))
              .filter(_._2 > 0) // 0: gone meanwhile
          case None =>
            fileManager.list(metadataPath, (p: Path) => expired(p.getName)).toSeq
              .map(f => (f.getPath.getName, f.getModificationTime))
        }
      var kept = Long.MaxValue
      candidates.sortBy(order).foreach { case (name, mtime) =>
        if (mtime <= expiredTime) fileManager.delete(new Path(metadataPath, name))
        else kept = math.min(kept, mtime)
      }
      lastSweep = (minCompactionBatchId, kept)
    }
  }

  /**
   * The cut of the last sweep of expired log files, and the modification time of the oldest file it
   * kept below that cut (none: `Long.MaxValue`): until the cut moves (every `compactInterval`
   * batches) or that file expires, a sweep would find nothing to delete, and it lists the log.
   */
  @volatile private var lastSweep = (-1L, Long.MaxValue)

  // ---- reading -------------------------------------------------------------------------------

  /** The log files `N` / `N.compact` present, oldest first. */
  def listLogFiles(): Array[FileStatus] =
    if (!reads.exists(metadataPath)) Array.empty
    else
      reads.list(metadataPath, batchFilesFilter).sortBy(f => pathToBatchId(f.getPath))

  /**
   * Why a reader opens log file `logBatchId`: the end of the error if it is missing. Every caller
   * passes it by name, so it runs only once the file turned out to be missing; then, if the sink's
   * record names another interval than the one this log reads at, that is the cause (a young log,
   * or one with a single compact file, is read at the session's interval, as Spark reads it), and
   * it fails with [[BatchLogException.logReadAtOtherInterval]] instead: the log is sound, and an
   * error sending the user to `repair` would send them in a loop.
   */
  private[log] def readWhy(logBatchId: Long): String = {
    recordedInterval.filter(_._1 != compactInterval).foreach { case (recorded, at) =>
      throw BatchLogException.logReadAtOtherInterval(
        batchIdToPath(logBatchId).toString,
        compactInterval,
        recorded,
        at.toString
      )
    }
    s"the log needs it to read batch $logBatchId at compact interval $compactInterval"
  }

  /**
   * The compact interval of the query that writes the sink, from the sink's record, and the
   * record's path: None without a record, with a damaged one (the caller's own error says more), or
   * with none recorded. A log with fewer than two compact files is read at this session's interval,
   * which may not be the writer's.
   */
  private[batchlog] def recordedInterval: Option[(Int, Path)] =
    (try SinkRecord.readWithPath(reads, metadataPath)
    catch { case _: BatchLogException => None })
      .collect { case (r, at) if r.compactInterval > 0 => (r.compactInterval, at) }

  /** Fails with a clear error unless log file `logBatchId` starts with the `v1` header. */
  def checkHeader(logBatchId: Long): Unit = {
    val file = batchIdToPath(logBatchId)
    val header = LogFiles.firstLine(reads, file, readWhy(logBatchId))
    if (header != LogFormat.Header) throw BatchLogException.badHeader(file.toString, header)
  }

  /** Calls `fn(line, lineNo)` for each entry line of log file `logBatchId`, header checked. */
  def foreachLineIn(logBatchId: Long)(fn: (String, Long) => Unit): Unit =
    LogFiles.foreachLine(
      reads,
      batchIdToPath(logBatchId),
      readWhy(logBatchId)
    )(fn)

  /** Calls `fn` for each entry of log file `logBatchId`, its batch resolved. */
  def foreachEntryIn(logBatchId: Long)(fn: SinkLogEntry => Unit): Unit = {
    val file = batchIdToPath(logBatchId).toString
    foreachLineIn(logBatchId) { (line, lineNo) =>
      val e = decodeLine(line, file, lineNo)
      fn(if (e.batchId.isDefined) e else e.copy(batchId = batchOf(e, logBatchId)))
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

  /**
   * Proofs of lineage computed by this instance, by compact id ([[LineageProof]]): the newest
   * [[CachedCompacts]] only, as the indexes.
   */
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
    Option(proofs.get(compactId)).getOrElse {
      val proof = LineageProof.of(this, compactId)
      proofs.put(compactId, proof)
      Newest.keep(proofs, CachedCompacts)
      proof
    }

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

  private[log] def decodeLine(line: String, file: String, lineNo: Long): SinkLogEntry =
    try LogFormat.decode(line)
    catch {
      case e: IllegalArgumentException =>
        throw BatchLogException.corruptLine(file, lineNo, e.getMessage)
    }
}

object BatchTaggedFileStreamSinkLog {

  /** Name of the metadata directory under a sink's output path (Spark's). */
  val MetadataDir = "_spark_metadata"

  /**
   * `<output>/_spark_metadata`, qualified, with its file system; nothing is read, so it names the
   * log of an output that has none (yet, or any more).
   */
  def metadataPathIn(spark: SparkSession, outputPath: String): (FileSystem, Path) = {
    if (outputPath == null || outputPath.isEmpty) {
      throw BatchLogException.invalidArgument("path", "''", "give the sink's output directory")
    }
    val out = new Path(outputPath)
    val fs = out.getFileSystem(spark.sessionState.newHadoopConf())
    (fs, new Path(fs.makeQualified(out), BatchTaggedFileStreamSinkLog.MetadataDir))
  }

  /** `<output>/_spark_metadata`, or a clear error if `outputPath` is not a file sink. */
  def metadataPathOf(spark: SparkSession, outputPath: String): Path = {
    val (fs, meta) = metadataPathIn(spark, outputPath)
    val isDir =
      try fs.getFileStatus(meta).isDirectory // one call: on S3 a HEAD and a 2-key LIST
      catch { case _: java.io.FileNotFoundException => false }
    if (!isDir) throw BatchLogException.notASink(outputPath)
    meta
  }

  /**
   * The log of the sink at `outputPath` for an operation that reads it and changes nothing, read as
   * one listing of `_spark_metadata/` and `_batchlog/` saw them ([[ListedOnce]]). That listing is
   * also the check that it is a sink, which [[metadataPathOf]] makes with a request of its own.
   */
  def listedOnce(spark: SparkSession, outputPath: String): BatchTaggedFileStreamSinkLog = {
    val (fs, meta) = metadataPathIn(spark, outputPath)
    val once = new ListedOnce(
      CheckpointFileManager.create(meta, spark.sessionState.newHadoopConf()),
      fs,
      Seq(meta, new Path(meta.getParent, JsonRecordFile.RecordDir))
    )
    if (!once.exists(meta)) throw BatchLogException.notASink(outputPath)
    new BatchTaggedFileStreamSinkLog(spark, meta.toString, listing = Some(once))
  }

  /** The log of the sink whose output directory is `outputPath` (see [[metadataPathOf]]). */
  def forOutput(spark: SparkSession, outputPath: String): BatchTaggedFileStreamSinkLog =
    new BatchTaggedFileStreamSinkLog(spark, metadataPathOf(spark, outputPath).toString)

  /**
   * The tagged log of each running query run's sink, keyed by Spark's log of the sink (one per
   * run). The run's writer guard removes the entry when the run's thread ends ([[release]]),
   * whoever still holds Spark's query (the Spark Connect server keeps a stopped query for an hour);
   * the weak keys only cover a log whose run never ended, so that it goes with Spark's log.
   */
  private val bySink = new java.util.WeakHashMap[FileStreamSinkLog, BatchTaggedFileStreamSinkLog]()

  /** The sinks (their `_spark_metadata` paths) whose running query has a log in this JVM. */
  private[batchlog] def loggedSinks: Seq[Path] = bySink.synchronized(
    bySink.values().toArray(Array.empty[BatchTaggedFileStreamSinkLog]).toSeq.map(_.metadataPath)
  )

  /**
   * The tagged log that commits for the sink owning `sinkLog`, one per sink (the commit protocol is
   * re-created each batch; the log, like Spark's, lives as long as the sink's run).
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

  /**
   * The run that committed through `log` for `sinkLog` ended: its entry goes, with the indexes and
   * proofs it cached (the writer guard's call, once the run's thread ended).
   */
  def release(sinkLog: FileStreamSinkLog, log: BatchTaggedFileStreamSinkLog): Unit =
    bySink.synchronized {
      if (bySink.get(sinkLog) eq log) bySink.remove(sinkLog)
    }
}
