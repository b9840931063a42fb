package io.batchlog.log

import java.io.OutputStream
import java.nio.ByteBuffer
import java.nio.channels.FileChannel
import java.nio.file.StandardOpenOption.READ

import org.apache.hadoop.fs.Path

import io.batchlog.shim.CheckpointFileManager

import io.batchlog.Compat

/**
 * Copies the runs of the previous compact file into the one being written, as bytes, through its
 * [[CompactIndex]]: no line is parsed, and each run's CRC32C is checked as it is copied (a mismatch
 * is a [[StaleRun]]: the file changed under its index, or, if it keeps the identity the index
 * records, it is damaged; the compaction tells which).
 *
 * On a local disk the copy runs beside the compaction ([[Background]]): the runs kept are laid out
 * first (their offsets follow from their lengths, so the index records them and the stream moves
 * past them at once), and the lines after them are checked and written while a second thread copies
 * the runs into the gap left for them. Those lines are held in memory meanwhile, up to a bound
 * ([[Held]]): a write to the same file would wait for the copy's. Elsewhere (HDFS, object stores)
 * the runs are read and written in order through the streams.
 */
private[batchlog] object CompactCopy {

  /** `run` of compact file `file`, whose bytes do not match `index`, compaction's copy of it. */
  final class StaleRun(val file: Path, val index: CompactIndex, val run: IndexRun, detail: String)
      extends Exception(detail)
      with PublishOutcome.NotPublished

  /**
   * What [[Held]] keeps in memory at most while the runs are copied beside it: 16 MiB, the lines of
   * `compactInterval` batches of 6,000 files each; a larger tail waits for the copy. (Tests lower
   * it to try every way through.)
   */
  @volatile private[batchlog] var heldBytes: Int = 16 << 20

  /**
   * Copies the runs of compact file `file` (indexed by `prev`) that retention keeps (batches from
   * `minBatch`) to `out`, recording them in `index`; `held` is the stream `out` writes to. When
   * this returns, `out` has counted the runs; on a local disk their bytes are copied by a thread
   * that `held` waits for before it writes anything more to the file.
   */
  def copyRuns(
      fm: CheckpointFileManager,
      file: Path,
      prev: CompactIndex,
      out: CompactIndex.CountingStream,
      held: Held,
      index: CompactIndex.Builder,
      minBatch: Long
  ): Unit = {
    held.release() // a copy still running (one compact file a compaction: none) ends first
    (held.file, prev.etag) match {
      case (upload: ObjectStoreCopy.Upload, Some(etag)) =>
        return copyByStore(upload.copy(file, etag, _, _), prev, out, index, minBatch)
      case (append: AppendUpload, _) => // its source's status was proved instead
        return copyByStore(append.copy(file, _, _), prev, out, index, minBatch)
      case _ =>
    }
    val local = for {
      src <- LocalPublish.localFile(fm, file)
      dst <- LocalPublish.channelOf(held.file)
    } yield (src, dst)
    local match {
      case Some((src, dst)) =>
        held.holdFor(copyBeside(fm, file, src, dst, prev, out, index, minBatch))
      case None => copyInOrder(fm, file, prev, out, index, minBatch)
    }
  }

  /**
   * The kept runs as stretches the store copies (`copy(offset, length)`: [[ObjectStoreCopy]], on
   * the condition that the file still has the ETag its proved index records; [[AppendUpload]] (GCS,
   * Azure), whose source's status was proved): their bytes, and so their CRCs, are the ones the
   * index proved; no byte passes through here.
   */
  private def copyByStore(
      copy: (Long, Long) => Unit,
      prev: CompactIndex,
      out: CompactIndex.CountingStream,
      index: CompactIndex.Builder,
      minBatch: Long
  ): Unit = prev.runs.foreach { run =>
    if (run.batchId.exists(_ < minBatch)) index.dropRun(run)
    else {
      index.run(run, out.count)
      copy(run.offset, run.length)
      out.wrotePast(run.length)
    }
  }

  /** Lays the kept runs out in `dst` and starts the thread that copies them. */
  private def copyBeside(
      fm: CheckpointFileManager,
      file: Path,
      src: java.io.File,
      dst: FileChannel,
      prev: CompactIndex,
      out: CompactIndex.CountingStream,
      index: CompactIndex.Builder,
      minBatch: Long
  ): Background = {
    val in = FileChannel.open(src.toPath, READ)
    try {
      val first = ByteBuffer.allocate(LogFormat.Header.length)
      val n = in.read(first, 0L)
      LogFiles.requireHeader(first.array(), n, fm, file)
      val size = in.size()
      val base = dst.position() // == out.count: the stream was flushed (channelOf)
      val kept = Vector.newBuilder[(IndexRun, Long)] // each run kept, and its offset in `dst`
      var at = 0L
      prev.runs.foreach { run =>
        if (run.batchId.exists(_ < minBatch)) index.dropRun(run)
        else {
          if (size < run.offset + run.length) {
            throw new StaleRun(file, prev, run, s"it ends inside the run at byte ${run.offset}")
          }
          index.run(run, out.count + at)
          kept += ((run, base + at))
          at += run.length
        }
      }
      dst.position(base + at)
      out.wrotePast(at)
      val task = new Background(file, prev, in, dst, kept.result())
      task.start()
      task
    } catch { case e: Throwable => in.close(); throw e }
  }

  /**
   * Copies `runs` of the compact file read by `in` to their offsets in `dst` with positional
   * writes. The file is mapped in large windows (not one mapping per run: a compaction of 200 runs
   * spent half its copy time mapping and unmapping); each run's CRC32C is computed on the mapping
   * and each stretch of consecutive runs written in one call: the bytes are copied once, by the
   * kernel. [[await]] waits for it and throws what it failed with; [[abandon]] stops it.
   */
  final class Background(
      file: Path,
      prev: CompactIndex,
      in: FileChannel,
      dst: FileChannel,
      runs: Vector[(IndexRun, Long)]
  ) extends Thread(s"batchlog compaction copy of ${file.getName}") {
    setDaemon(true)
    @volatile private var abandoned = false
    @volatile private var failure: Throwable = null

    override def run(): Unit =
      try copy()
      catch { case e: Throwable => failure = e }
      finally in.close()

    private def copy(): Unit = {
      val crc = Compat.crc32c()
      val Window = 1L << 30 // a mapping is at most 2 GiB; a run longer than a window is split
      val size = in.size()
      var map: java.nio.MappedByteBuffer = null
      var mapStart = 0L
      var from, to = 0L // the bytes mapped and checked, not yet written
      var at = 0L // where they go in `dst`
      def mapped(a: Long, b: Long): Boolean =
        map != null && a >= mapStart && b <= mapStart + map.capacity()
      def slice(a: Long, b: Long): ByteBuffer = {
        val s = map.duplicate()
        s.position((a - mapStart).toInt).limit((b - mapStart).toInt)
        s
      }
      def flush(): Unit = if (to > from) {
        val b = slice(from, to)
        var pos = at
        while (b.hasRemaining) pos += dst.write(b, pos)
        from = to
      }
      def remap(a: Long, b: Long): Unit = {
        flush()
        mapStart = a
        map =
          in.map(FileChannel.MapMode.READ_ONLY, a, math.min(size, a + math.max(Window, b - a)) - a)
      }
      runs.foreach { case (run, runAt) =>
        if (abandoned) return
        val end = run.offset + run.length
        crc.reset()
        var pos = run.offset
        while (pos < end) { // a run longer than a window is mapped and written piece by piece
          val pieceEnd = math.min(end, pos + Window)
          if (!mapped(pos, pieceEnd)) remap(pos, pieceEnd)
          Compat.updateChecksum(crc, slice(pos, pieceEnd))
          val pieceAt = runAt + (pos - run.offset)
          if (to != pos || at + (to - from) != pieceAt) { flush(); from = pos; at = pieceAt }
          to = pieceEnd
          pos = pieceEnd
        }
        if (crc.getValue != run.crc) {
          throw new StaleRun(file, prev, run, s"the CRC32C of bytes ${run.offset}..$end differs")
        }
      }
      flush()
    }

    /** Waits for the copy; throws what it failed with. */
    def await(): Unit = {
      join()
      if (failure != null) throw failure
    }

    /** Stops the copy at its next run and waits for it (the compaction failed elsewhere). */
    def abandon(): Unit = { abandoned = true; join() }
  }

  /**
   * The stream a compaction writes its file through: it passes writes on to `file`, except while a
   * [[Background]] copy fills the gap before them, when it holds them in memory (up to
   * [[heldBytes]]; past that it waits for the copy). [[release]] waits for the copy, throwing what
   * it failed with, and writes what it held; call it before the file is published.
   */
  final class Held(val file: OutputStream) extends OutputStream {
    private var copy: Background = null
    private val held = new java.io.ByteArrayOutputStream(1 << 16)
    private val most = heldBytes

    /** Holds what is written from now until `c` is done ([[copyRuns]] released any before). */
    def holdFor(c: Background): Unit = copy = c

    override def write(b: Int): Unit = write(Array(b.toByte), 0, 1)
    override def write(b: Array[Byte], off: Int, len: Int): Unit =
      if (copy == null) file.write(b, off, len)
      else if (held.size + len <= most) held.write(b, off, len)
      else { release(); file.write(b, off, len) }

    def release(): Unit = if (copy != null) {
      val c = copy
      copy = null
      c.await()
      held.writeTo(file)
      held.reset()
    }

    /** Stops a copy still running (the compaction failed): no thread outlives its file. */
    def abandon(): Unit = if (copy != null) { copy.abandon(); copy = null }

    override def flush(): Unit = if (copy == null) file.flush()
    override def close(): Unit = file.close()
  }

  /** [[copyRuns]] through streams, run after run, on any file system. */
  private def copyInOrder(
      fm: CheckpointFileManager,
      file: Path,
      prev: CompactIndex,
      out: CompactIndex.CountingStream,
      index: CompactIndex.Builder,
      minBatch: Long
  ): Unit = {
    val in = LogFiles.open(fm, file, s"compaction needs it")
    val buf = new Array[Byte](1 << 20)
    val crc = Compat.crc32c()
    try {
      val n = in.read(0L, buf, 0, LogFormat.Header.length)
      LogFiles.requireHeader(buf, n, fm, file)
      prev.runs.foreach { run =>
        if (run.batchId.exists(_ < minBatch)) index.dropRun(run)
        else {
          if (in.getPos != run.offset) in.seek(run.offset)
          index.run(run, out.count)
          crc.reset()
          var left = run.length
          while (left > 0) {
            val n = in.read(buf, 0, math.min(left, buf.length.toLong).toInt)
            if (n < 0) {
              throw new StaleRun(file, prev, run, s"it ends inside the run at byte ${run.offset}")
            }
            crc.update(buf, 0, n)
            out.copied(buf, 0, n)
            left -= n
          }
          if (crc.getValue != run.crc) {
            throw new StaleRun(
              file,
              prev,
              run,
              s"the CRC32C of bytes ${run.offset}..${run.offset + run.length} differs"
            )
          }
        }
      }
    } finally in.close()
  }
}
