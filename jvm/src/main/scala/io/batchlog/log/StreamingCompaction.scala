package io.batchlog.log

import java.nio.charset.StandardCharsets.UTF_8

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

  private val NewLine = Array[Byte]('\n')

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
      // Bytes straight to the stream (it is buffered), no Writer: each run's offset and CRC are
      // exact at every line, and copied bytes need no re-encoding.
      val counted = new CompactIndex.CountingStream(out, crc)
      counted.write(LogFiles.HeaderBytes)
      // Consecutive lines of one batch copied from a batch file are written as one stretch of
      // its bytes, `\n` separators included (`pending`), not line by line.
      var pending: Array[Byte] = null
      var pendingFrom, pendingTo = 0
      var lastBatch: Option[Option[Long]] = None // the batch of the last line written
      def flushPending(): Unit = if (pending != null) {
        counted.write(pending, pendingFrom, pendingTo - pendingFrom)
        pending = null
      }

      /** `bytes[from, to)` is the line; `bytes(from - 1)`, if a `\n`, may be written with it. */
      def emitBytes(bytes: Array[Byte], from: Int, to: Int, batch: Option[Long]): Unit =
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
      def emit(line: String, batch: Option[Long]): Unit = {
        flushPending()
        val bytes = line.getBytes(UTF_8)
        emitBytes(bytes, 0, bytes.length, batch)
        flushPending()
      }

      /** A line as text: tagged lines of compact files copied, any other decoded and checked. */
      def emitText(line: String, id: Long, inCompact: Boolean, file: String, lineNo: Long): Unit = {
        val tagged = LogFormat.taggedBatch(line)
        if (tagged.isDefined && !ageRetentionActive && inCompact) emit(line, tagged)
        else {
          val e = decodeLine(line, file, lineNo)
          val b = batchOf(e, id)
          if (!shouldRetain(e, now)) index.drop(b)
          else emit(if (tagged.isDefined) line else LogFormat.encode(e.copy(batchId = b)), b)
        }
      }
      getValidBatchesBeforeCompactionBatch(batchId, interval).foreach { id =>
        val inCompact = isCompactionBatch(id, interval)
        // Byte copy only keeps tags that are in the lines: a batch resolved from elsewhere
        // (a surviving batch file) must be written into the line while the proof still exists.
        val copyable = if (inCompact && !ageRetentionActive)
          Some(indexOf(id, rebuild = rescan)).filter(_.runs.forall(_.batchId.isDefined))
            .filterNot(_ => hasUntaggedLines.contains(id))
        else None
        val file = batchIdToPath(id).toString
        copyable match {
          case Some(prev) =>
            // The previous compact file is all tagged: copy its runs as bytes, dropping whole
            // runs of batches below the retention, and shift their offsets into the new index.
            flushPending(); lastBatch = None
            copyRuns(id, prev, counted, index, minBatch)
          case None if !inCompact && !ageRetentionActive =>
            // Lines of batch files (at most compactInterval - 1 files) are checked, as Spark's
            // compaction parses them: a corrupt entry fails here, naming its file and line,
            // instead of outliving its batch file inside the compact file. A line exactly as
            // batchlog writes it is checked by a scan of its bytes (isCanonical) and copied as
            // they are; any other is decoded.
            LogFiles.foreachLineBytes(fileManager, batchIdToPath(id), readWhy(id), flushPending) {
              (bytes, from, to, lineNo) =>
                val view = new LogFormat.AsciiView(bytes, from, to)
                val tagged = if (LogFormat.isCanonical(view)) LogFormat.taggedBatch(view) else None
                if (tagged.isDefined) emitBytes(bytes, from, to, tagged)
                else
                  emitText(new String(bytes, from, to - from, UTF_8), id, inCompact, file, lineNo)
            }
          case None =>
            foreachLineIn(id)((line, lineNo) => emitText(line, id, inCompact, file, lineNo))
        }
      }
      flushPending()
      newEntries.foreach { e =>
        if (shouldRetain(e, now)) emit(LogFormat.encode(e), e.batchId) else index.drop(e.batchId)
      }
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
   * [[copyRuns]] on a local disk: the previous compact file is mapped in large windows (not one
   * mapping per run: a compaction of 200 runs spent half its copy time mapping and unmapping), each
   * run's CRC32C is computed on the mapping, and each stretch of consecutive kept runs is written
   * to the new file's channel in one call: the bytes are copied once, by the kernel, instead of
   * read into and written from the heap.
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
    import java.nio.channels.FileChannel.MapMode.READ_ONLY
    val in = java.nio.channels.FileChannel.open(src.toPath, java.nio.file.StandardOpenOption.READ)
    val crc = Compat.crc32c()
    val Window = 1L << 30 // a mapping is at most 2 GiB; a run longer than a window is split
    try {
      val first = java.nio.ByteBuffer.allocate(LogFormat.Header.length)
      val n = in.read(first, 0L)
      LogFiles.requireHeader(first.array(), n, checkpointFileManager, file)
      val size = in.size()
      var map: java.nio.MappedByteBuffer = null
      var mapStart = 0L
      var pending = (0L, 0L) // [from, to) of the file mapped and checked, not yet written
      def mapped(from: Long, to: Long): Boolean =
        map != null && from >= mapStart && to <= mapStart + map.capacity()
      def slice(from: Long, to: Long): java.nio.ByteBuffer = {
        val b = map.duplicate()
        b.position((from - mapStart).toInt).limit((to - mapStart).toInt)
        b
      }
      def flush(): Unit = if (pending._2 > pending._1) {
        val b = slice(pending._1, pending._2)
        while (b.hasRemaining) dst.write(b)
        out.wrotePast(pending._2 - pending._1)
        pending = (0L, 0L)
      }
      def remap(from: Long, to: Long): Unit = {
        flush()
        mapStart = from
        map = in.map(READ_ONLY, from, math.min(size, from + math.max(Window, to - from)) - from)
      }
      prev.runs.foreach { run =>
        if (run.batchId.exists(_ < minBatch)) { flush(); index.dropRun(run) }
        else {
          val end = run.offset + run.length
          if (size < end) throw new StaleRun(file, s"it ends inside the run at byte ${run.offset}")
          index.run(run, out.count + (pending._2 - pending._1))
          crc.reset()
          if (run.length <= Window) {
            if (!mapped(run.offset, end)) remap(run.offset, end)
            Compat.updateChecksum(crc, slice(run.offset, end))
            pending = if (pending._2 == run.offset) (pending._1, end)
            else {
              flush(); (run.offset, end)
            }
          } else { // longer than a window: mapped and written piece by piece
            var pos = run.offset
            while (pos < end) {
              val pieceEnd = math.min(end, pos + Window)
              remap(pos, pieceEnd)
              Compat.updateChecksum(crc, slice(pos, pieceEnd))
              pending = (pos, pieceEnd)
              flush()
              pos = pieceEnd
            }
          }
          if (crc.getValue != run.crc) {
            throw new StaleRun(file, s"the CRC32C of bytes ${run.offset}..$end differs")
          }
        }
      }
      flush()
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
      LogFiles.requireHeader(buf, n, checkpointFileManager, file)
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
