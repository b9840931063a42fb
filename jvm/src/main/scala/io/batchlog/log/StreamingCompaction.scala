package io.batchlog.log

import java.nio.charset.StandardCharsets.UTF_8

import org.apache.hadoop.fs.{FileStatus, Path}

import org.apache.spark.internal.Logging
import io.batchlog.shim.CompactibleFileStreamLog._

import io.batchlog.{BatchLogException, Compat}

/**
 * Compaction of a [[BatchTaggedFileStreamSinkLog]] (mixed into it): writes `N.compact` by copying
 * the previous compact file's tagged runs as bytes, through its [[CompactIndex]], instead of
 * parsing and re-serialising every live entry as Spark's compaction does.
 */
trait StreamingCompaction extends Logging { self: BatchTaggedFileStreamSinkLog =>

  /**
   * Writes `N.compact`: the live lines of the previous compact file and the batch files since, then
   * `newEntries`, in batch order, and its [[CompactIndex]]. A tagged line is copied as text (its
   * batch read from its tail); only untagged lines and, under an age retention, every line are
   * parsed. Retention drops lines of batches older than `retention.batches` and entries older than
   * the age; what it drops is logged and recorded in the index.
   *
   * The previous compact file's runs are copied as bytes only through a proved index (or one just
   * built by scanning the file), each run's CRC32C checked as it is copied. A mismatch fails the
   * attempt inside `addNewBatchByStream`, which cancels the temp file so nothing is published. If
   * the compact file still has the name, length and modification time its index records, it is
   * damaged (a compact file is written once): the compaction fails with `CORRUPT_LOG`, naming the
   * file, the batches and their bytes, and `repair` as the way out; a rescan would copy the damage
   * into the new compact file under a fresh, matching CRC, and the evidence would be gone. Only if
   * the file was replaced (the index is stale) does compaction retry once, from a fresh scan.
   */
  private[log] def compact(batchId: Long, newEntries: Array[SinkLogEntry]): Boolean = {
    val startNs = System.nanoTime()
    val added =
      try compactByStore(batchId, newEntries)
      catch {
        case s: CompactCopy.StaleRun =>
          requireReplaced(pathToBatchId(s.file), s.index, s.run)
          logWarning(s"${s.file} does not match its index (${s.getMessage}); compacting batch " +
            s"$batchId again from a fresh scan of it")
          try compactOnce(batchId, newEntries, rescan = true)
          catch {
            case s2: CompactCopy.StaleRun =>
              requireReplaced(pathToBatchId(s2.file), s2.index, s2.run)
              throw BatchLogException.corruptLine(
                s2.file.toString,
                -1,
                s"it changed while compaction $batchId copied it: ${s2.getMessage}"
              )
          }
      }
    val ms = (System.nanoTime() - startNs) / 1000000
    metrics.compactionTook(ms)
    if (ms >= COMPACT_LATENCY_WARN_THRESHOLD_MS) {
      logWarning(s"Compacting took $ms ms for compact batch $batchId")
    }
    added
  }

  private val NewLine = Array[Byte]('\n')

  /**
   * The compact file written by a store-side copy of the previous one's runs, where the store can
   * ([[ObjectStoreCopy]]); if it fails (the previous file changed, the store refused a ranged
   * copy), its upload is aborted and the compaction runs again on the client-side path, which
   * checks every run's CRC32C and tells damage from a replaced file.
   */
  private def compactByStore(batchId: Long, newEntries: Array[SinkLogEntry]): Boolean =
    try storeCopyFor(batchId) match {
        case None => compactOnce(batchId, newEntries, rescan = false)
        case Some(target) =>
          try {
            storeCopy = Some(target)
            compactOnce(batchId, newEntries, rescan = false)
          } catch {
            case f: ObjectStoreCopy.Failed =>
              ObjectStoreCopy.Stats.fallbacks.incrementAndGet()
              logWarning(
                s"Server-side compaction of batch $batchId failed, its upload aborted; " +
                  s"compacting on the client: ${f.getMessage}",
                f.getCause
              )
              storeCopy = None
              knownPrev = None // the previous file may have changed: the client path reads anew
              compactOnce(batchId, newEntries, rescan = false)
          } finally storeCopy = None
      }
    finally knownPrev = None

  /**
   * The previous compact file's status as the store-side path read it when this compaction chose
   * its target, by path; [[statusOf]] answers it again, without a request, until the compaction
   * ends or falls back to the client side. Its index, proved against that status, is what the
   * compaction copies by; the store-side path checks it again at the store (GCS, Azure: the status
   * right before the join; S3: each copy If-Match the ETag). Saves two status requests a compaction
   * (four on GCS, where a status is a GET and a LIST).
   */
  @volatile private[log] var knownPrev: Option[(Path, FileStatus)] = None

  /** The status of the previous compact file `prevId`, kept as [[knownPrev]]. */
  private def prevStatus(prevId: Long): Option[FileStatus] = {
    val prev = batchIdToPath(prevId)
    val st = statusOf(prev)
    knownPrev = st.map(prev -> _)
    st
  }

  /**
   * The store-side copy for compaction `batchId`, without age retention, when the previous compact
   * file is large enough: on S3A with the SDK v2 client when its proved index records the ETag it
   * still has; on GCS and Azure when its proved index records its status now. None: the client-side
   * copy.
   */
  private def storeCopyFor(batchId: Long): Option[StoreCompaction] = {
    val prevId = batchId - interval
    if (prevId < 0 || ageRetentionActive || !serverSideCompaction) {
      return None
    }
    val file = batchIdToPath(batchId)
    GcsCompose.target(checkpointFileManager, file).toOption
      .orElse(AzureBlocks.target(checkpointFileManager, file).toOption) match {
      case Some(append) => return appendFrom(append, prevId)
      case None =>
    }
    ObjectStoreCopy.target(checkpointFileManager, file).toOption.filter { _ =>
      // one status of the previous compact file: its size, and the ETag it has now
      prevStatus(prevId).exists { prev =>
        prev.getLen >= serverSideMinBytes && {
          val recorded =
            try indexOf(prevId).etag
            catch { case scala.util.control.NonFatal(_) => None }
          recorded.isDefined && ObjectStoreCopy.etagOf(prev) == recorded
        }
      }
    }
  }

  /**
   * A join on the store ([[AppendUpload]]: GCS `compose`, Azure blocks) from the previous compact
   * file `prevId` if it is large enough and its index is proved against its status now (the status
   * the join checks again right before it runs).
   */
  private def appendFrom(append: AppendTarget, prevId: Long): Option[StoreCompaction] =
    prevStatus(prevId).filter(_.getLen >= serverSideMinBytes).filter {
      st =>
        try indexOf(prevId).matches(st)
        catch { case scala.util.control.NonFatal(_) => false }
    }.map(st => append.from(st))

  private def compactOnce(
      batchId: Long,
      newEntries: Array[SinkLogEntry],
      rescan: Boolean
  ): Boolean = {
    val now = System.currentTimeMillis()
    val minBatch = retention.batches.map(n => batchId + 1 - n).getOrElse(Long.MinValue)
    val crc = Compat.crc32c()
    val index = new CompactIndex.Builder(crc)
    var endOffset = 0L
    var blocks: IndexBlocks.Blocks = null
    val merged = getValidBatchesBeforeCompactionBatch(batchId, interval)
    val readAhead =
      if (ageRetentionActive) Map.empty[Long, Array[Byte]]
      else {
        val dir = fileSystem.makeQualified(metadataPath)
        BatchFilePrefetch(fileSystem, dir, merged.filterNot(isCompactionBatch(_, interval)))
      }
    // A failed publish is settled by reading the compact file back ([[PublishOutcome]]): it is
    // this compaction's if it has the length written and the last run's bytes (the new batch's
    // lines, naming this job's files) have their CRC32C.
    val added = PublishOutcome.settle(batchIdToPath(batchId), batchId, statusOf, publishSent)(
      addNewBatchByStream(batchId) { out =>
        val w = new CompactWriter(out, crc, index, minBatch, now, readAhead)
        try {
          merged.foreach(w.logFile(_, rescan))
          newEntries.foreach(w.entry)
          endOffset = w.finish()
        } finally w.abandon()
        // the whole index but its compact file's status, before the compact file is published:
        // readers that meet the compact file first wait for its index ([[CompactIndexReads]])
        blocks = index.blocks(endOffset)
        // from the previous compact file's index the writer copied by (no second read of it), or
        // read from its file
        val prevDropped = w.copiedFrom.filter(c => !rescan && c._1 == batchId - interval)
          .map(_._2.droppedMaxBatch).getOrElse(droppedBefore(batchId))
        index.droppedMaxBatch = math.max(index.droppedMaxBatch, prevDropped)
      }
    ) { st =>
      blocks != null &&
      PublishOutcome.holdsRun(checkpointFileManager, st, endOffset, blocks.lastRun)
    }
    if (added) {
      val compactFile = batchIdToPath(batchId)
      statusOf(compactFile).foreach { st =>
        val written = index.result(endOffset, st)
        CompactIndex.write(
          checkpointFileManager,
          CompactIndex.pathOf(compactFile),
          blocks.toBytes(written)
        )
        metrics.compacted(written.entries, st.getLen)
      }
      if (index.dropped > 0) {
        logInfo(s"Retention dropped ${index.dropped} entries (batches up to " +
          s"${index.droppedMaxBatch}) from compact batch $batchId")
        // Older compact files still hold what was dropped: without their indexes, a lookup of
        // one batch never answers from them ([[DirectLookup]]); Spark's readers never read them.
        LogLayout.compactIds(checkpointFileManager, metadataPath).filter(_ < batchId).foreach {
          id => checkpointFileManager.delete(CompactIndex.pathOf(batchIdToPath(id)))
        }
      }
    }
    added
  }

  /**
   * The newest batch retention dropped entries of at the compactions before `batchId`, as the
   * previous compact file's proved index records it (-1: none, or no proved index). Carried into
   * each new index, so the latest one tells readers below which batch entries may be gone (a
   * downstream `batchlog` source fails there instead of reading the batches as empty).
   */
  private def droppedBefore(batchId: Long): Long = {
    val prev = batchIdToPath(batchId - interval)
    if (batchId - interval < 0) -1L
    else
      statusOf(prev)
        .flatMap(st => CompactIndex.load(checkpointFileManager, CompactIndex.pathOf(prev), st))
        .flatMap(_.toOption).map(_.droppedMaxBatch).getOrElse(-1L)
  }

  /**
   * Writes one compact file to `out`: the `v1` header, then the lines of each log file given to
   * [[logFile]] and each entry given to [[entry]], in order, recording each line's batch and offset
   * in `index`. Bytes go straight to the stream (it is buffered), no Writer: each run's offset and
   * CRC are exact at every line, and copied bytes need no re-encoding.
   */
  final private class CompactWriter(
      out: java.io.OutputStream,
      crc: java.util.zip.Checksum,
      index: CompactIndex.Builder,
      minBatch: Long,
      now: Long,
      readAhead: Map[Long, Array[Byte]]
  ) {
    private val held = new CompactCopy.Held(out)
    private val counted = new CompactIndex.CountingStream(held, crc)
    counted.write(LogFiles.HeaderBytes)
    // Consecutive lines of one batch copied from a batch file are written as one stretch of its
    // bytes, `\n` separators included (`pending`), not line by line.
    private var pending: Array[Byte] = null
    private var pendingFrom, pendingTo = 0
    private var lastBatch: Option[Option[Long]] = None // the batch of the last line written

    /** The compact file whose runs were copied, and the index they were copied by. */
    var copiedFrom: Option[(Long, CompactIndex)] = None

    private def flushPending(): Unit = if (pending != null) {
      counted.write(pending, pendingFrom, pendingTo - pendingFrom)
      pending = null
    }

    /** `bytes[from, to)` is the line; `bytes(from - 1)`, if a `\n`, may be written with it. */
    private def emitBytes(bytes: Array[Byte], from: Int, to: Int, batch: Option[Long]): Unit =
      if (batch.exists(_ < minBatch)) { flushPending(); index.drop(batch) }
      else {
        if (!lastBatch.contains(batch)) flushPending() // the run's CRC closes on its bytes
        index.line(batch, counted.count + (if (pending == null) 0 else pendingTo - pendingFrom))
        lastBatch = Some(batch)
        if ((pending eq bytes) && pendingTo == from - 1 && bytes(pendingTo) == '\n') {
          pendingTo = to
        } else {
          flushPending()
          if (from > 0 && bytes(from - 1) == '\n') { pending = bytes; pendingFrom = from - 1 }
          else { counted.write(NewLine, 0, 1); pending = bytes; pendingFrom = from }
          pendingTo = to
        }
      }

    private def emit(line: String, batch: Option[Long]): Unit = {
      flushPending()
      val bytes = line.getBytes(UTF_8)
      emitBytes(bytes, 0, bytes.length, batch)
      flushPending()
    }

    /** A line as text: tagged lines of compact files copied, any other decoded and checked. */
    private def emitText(line: String, id: Long, inCompact: Boolean, lineNo: Long): Unit = {
      val tagged = LogFormat.taggedBatch(line)
      if (tagged.isDefined && !ageRetentionActive && inCompact) emit(line, tagged)
      else {
        val e = decodeLine(line, batchIdToPath(id).toString, lineNo)
        val b = batchOf(e, id)
        if (!shouldRetain(e, now)) index.drop(b)
        else emit(if (tagged.isDefined) line else LogFormat.encode(e.copy(batchId = b)), b)
      }
    }

    /** The live lines of log file `id` (a compact file, or a batch file since the last one). */
    def logFile(id: Long, rescan: Boolean): Unit = {
      val inCompact = isCompactionBatch(id, interval)
      // Byte copy only keeps tags that are in the lines: a batch resolved from elsewhere (a
      // surviving batch file) must be written into the line while the proof still exists.
      val copyable = if (inCompact && !ageRetentionActive)
        Some(indexOf(id, rebuild = rescan)).filter(_.runs.forall(_.batchId.isDefined))
          .filterNot(_ => hasUntaggedLines.contains(id))
      else None
      copyable match {
        case Some(prev) =>
          // The previous compact file is all tagged: copy its runs as bytes, dropping whole runs
          // of batches below the retention, and shift their offsets into the new index.
          flushPending(); lastBatch = None
          copiedFrom = Some(id -> prev)
          CompactCopy.copyRuns(
            checkpointFileManager,
            batchIdToPath(id),
            prev,
            counted,
            held,
            index,
            minBatch
          )
        case None if !inCompact && !ageRetentionActive =>
          // Lines of batch files (at most compactInterval - 1 files) are checked, as Spark's
          // compaction parses them: a corrupt entry fails here, naming its file and line, instead
          // of outliving its batch file inside the compact file. A line exactly as batchlog
          // writes it is checked by a scan of its bytes (LogFormat.CanonicalScan), in the same
          // pass that finds its end, and copied as it is; any other is decoded.
          val lines = new LogFiles.LineHandler {
            private var tag: Some[Long] = Some(id) // the last line's, reused: no box a line
            def line(bytes: Array[Byte], from: Int, to: Int, lineNo: Long, batch: Long): Unit =
              if (batch >= 0) {
                if (tag.get != batch) tag = Some(batch)
                emitBytes(bytes, from, to, tag)
              } else emitText(new String(bytes, from, to - from, UTF_8), id, inCompact, lineNo)
            override def beforeMove(): Unit = flushPending()
          }
          readAhead.get(id) match {
            case Some(bytes) => // read ahead ([[BatchFilePrefetch]])
              val in = new java.io.ByteArrayInputStream(bytes)
              LogFiles.readLineBytes(in, batchIdToPath(id).toString, canonical = true)(lines)
            case None =>
              LogFiles.foreachLineBytes(
                fileManager,
                batchIdToPath(id),
                readWhy(id),
                canonical = true
              )(lines)
          }
        case None =>
          foreachLineIn(id)((line, lineNo) => emitText(line, id, inCompact, lineNo))
      }
    }

    /** A new entry of the compaction batch. */
    def entry(e: SinkLogEntry): Unit =
      if (shouldRetain(e, now)) emit(LogFormat.encode(e), e.batchId) else index.drop(e.batchId)

    /**
     * Writes what is held once the copied runs are in place, their CRCs checked (throws
     * [[CompactCopy.StaleRun]] if one is not): the compact file's length.
     */
    def finish(): Long = {
      flushPending()
      held.release()
      counted.count
    }

    /** Stops a copy still running, if writing failed. */
    def abandon(): Unit = held.abandon()
  }
}
