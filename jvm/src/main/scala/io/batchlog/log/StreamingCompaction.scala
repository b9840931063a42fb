package io.batchlog.log

import org.apache.hadoop.fs.Path

import org.apache.spark.internal.Logging
import io.batchlog.shim.CompactibleFileStreamLog._

import io.batchlog.BatchLogException
import io.batchlog.Compat

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
   * built by scanning the file), each run's CRC32C checked as it is copied. A mismatch (the file
   * changed under its index) fails the attempt inside `addNewBatchByStream`, which cancels the temp
   * file so nothing is published; compaction then retries once from a fresh scan.
   */
  private[log] def compact(batchId: Long, newEntries: Array[SinkLogEntry]): Boolean = {
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
    val crc = Compat.crc32c()
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
      getValidBatchesBeforeCompactionBatch(batchId, interval).foreach { id =>
        val inCompact = isCompactionBatch(id, interval)
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
              // Lines of batch files (at most compactInterval - 1 files) are checked, as Spark's
              // compaction parses them: a corrupt entry fails here, naming its file and line,
              // instead of outliving its batch file inside the compact file. A line exactly as
              // batchlog writes it is checked by a scan (isCanonical) and copied; any other is
              // decoded.
              val tagged = LogFormat.taggedBatch(line)
              val copyable = tagged.isDefined && !ageRetentionActive &&
                (inCompact || LogFormat.isCanonical(line))
              if (copyable) emit(line, tagged)
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
          checkpointFileManager,
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
    val local = for {
      src <- LocalPublish.localFile(checkpointFileManager, file)
      dst <- LocalPublish.channelOf(out.underlying)
    } yield (src, dst)
    local match {
      case Some((src, dst)) => copyRunsMapped(file, src, dst, prev, out, index, minBatch)
      case None => copyRunsByStream(file, prev, out, index, minBatch)
    }
  }

  /**
   * [[copyRuns]] on a local disk: each run is mapped from the previous compact file, its CRC32C
   * computed on the mapping and the mapping written to the new file's channel: the bytes are copied
   * once, by the kernel, instead of read into and written from the heap.
   */
  private def copyRunsMapped(
      file: Path,
      src: java.io.File,
      dst: java.nio.channels.FileChannel,
      prev: CompactIndex,
      out: CompactIndex.CountingStream,
      index: CompactIndex.Builder,
      minBatch: Long
  ): Unit = {
    val in = java.nio.channels.FileChannel.open(src.toPath, java.nio.file.StandardOpenOption.READ)
    val crc = Compat.crc32c()
    try {
      val first = java.nio.ByteBuffer.allocate(LogFormat.Header.length)
      val n = in.read(first, 0L)
      LogFiles.requireHeader(first.array(), n, file.toString)(
        LogFiles.firstLine(checkpointFileManager, file)
      )
      prev.runs.foreach { run =>
        if (run.batchId.exists(_ < minBatch)) index.dropRun(run)
        else {
          if (in.size() < run.offset + run.length) {
            throw new StaleRun(file, s"it ends inside the run at byte ${run.offset}")
          }
          index.run(run, out.count)
          crc.reset()
          var pos = run.offset
          val end = run.offset + run.length
          while (pos < end) {
            val n = math.min(end - pos, 1L << 30) // a mapping is at most 2 GiB
            val mapped = in.map(java.nio.channels.FileChannel.MapMode.READ_ONLY, pos, n)
            Compat.updateChecksum(crc, mapped.duplicate())
            while (mapped.hasRemaining) dst.write(mapped)
            pos += n
          }
          out.wrotePast(run.length)
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

  private def copyRunsByStream(
      file: Path,
      prev: CompactIndex,
      out: CompactIndex.CountingStream,
      index: CompactIndex.Builder,
      minBatch: Long
  ): Unit = {
    val in = LogFiles.open(checkpointFileManager, file, s"compaction needs it")
    val buf = new Array[Byte](1 << 20)
    val crc = Compat.crc32c()
    try {
      val n = in.read(0L, buf, 0, LogFormat.Header.length)
      LogFiles.requireHeader(buf, n, file.toString)(LogFiles.firstLine(checkpointFileManager, file))
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
            out.copied(buf, 0, n)
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

}
