package io.batchlog.log

import java.io.{ByteArrayOutputStream, OutputStream}

import scala.util.control.NonFatal

import org.apache.hadoop.fs.{FileStatus, FileSystem, Path}

/**
 * A compact file that a store joins on its side from two pieces: the previous compact file whole,
 * then one piece of new lines ([[GcsCompose]]: `compose`; [[AzureBlocks]]: a block list of ranges
 * copied from it and one block of new lines). Only the new lines and the index pass through the
 * driver.
 *
 * Why only "whole, then new lines": neither store copies a range into the middle of an object as
 * cheaply as it joins whole objects or blocks, and a compaction without a retention drop is exactly
 * that: the previous file's bytes, then the new batches' lines. A compaction that drops runs, or a
 * previous file whose header differs, is [[ObjectStoreCopy.Failed]]: it runs again on the client
 * side, as on S3.
 *
 * Proof of the source: the previous compact file must have the status (length, modification time)
 * its proved [[CompactIndex]] records, once when the compaction starts (the log's choice of target)
 * and again in [[complete]], right before the join. A compact file is written once and replaced
 * only by `repair`, which fences the writer first.
 */
abstract private[log] class AppendUpload(fs: FileSystem, val file: Path, prev: FileStatus)
    extends OutputStream {
  private val head = new ByteArrayOutputStream(LogFiles.HeaderBytes.length)
  private val tail = new ByteArrayOutputStream(1 << 16)
  private var copied: Option[(Long, Long)] = None // offset, length of `prev` joined

  /** What the store does ("compose", "commit a block list"): for messages. */
  protected def verb: String

  /**
   * Publishes `file` as `prev` (whose status is `now`) whole, then `tail` (maybe empty), once:
   * Hadoop's `FileAlreadyExistsException` if the store refused it because `file` exists,
   * [[ObjectStoreCopy.Failed]] if nothing was published.
   */
  protected def join(now: FileStatus, tail: ByteArrayOutputStream): Unit

  override def write(b: Int): Unit = write(Array(b.toByte), 0, 1)
  override def write(b: Array[Byte], off: Int, len: Int): Unit =
    (if (copied.isEmpty) head else tail).write(b, off, len)

  /** Bytes `[offset, offset + length)` of `source` come next; they must extend the stretch. */
  def copy(source: Path, offset: Long, length: Long): Unit = copied match {
    case None if fs.makeQualified(source) == prev.getPath && offset == CompactIndex.FirstOffset =>
      copied = Some((offset, length))
    case Some((o, l)) if tail.size == 0 && o + l == offset => copied = Some((o, l + length))
    case _ =>
      throw failed(s"bytes $offset+$length of $source are not the next of ${prev.getPath}")
  }

  protected def failed(why: String, cause: Throwable = null): ObjectStoreCopy.Failed =
    new ObjectStoreCopy.Failed(s"cannot $verb $file: $why", cause)

  /** The join, or [[ObjectStoreCopy.Failed]] with nothing published (see the class). */
  final private[log] def complete(): Unit = {
    val whole = copied.exists { case (o, l) => o + l == prev.getLen }
    if (!whole || !java.util.Arrays.equals(head.toByteArray, LogFiles.HeaderBytes)) {
      throw failed(s"it is not ${prev.getPath} whole then new lines (retention dropped runs)")
    }
    val now =
      try fs.getFileStatus(prev.getPath)
      catch { case NonFatal(e) => throw failed(s"cannot read ${prev.getPath}'s status", e) }
    if (now.getLen != prev.getLen || now.getModificationTime != prev.getModificationTime) {
      throw failed(s"${prev.getPath} changed since its index was proved")
    }
    join(now, tail)
    ObjectStoreCopy.Stats.bytesCopied.addAndGet(prev.getLen)
    ObjectStoreCopy.Stats.bytesUploaded.addAndGet(tail.size.toLong)
  }
}

/** The compaction target of an [[AppendUpload]]: the previous compact file's status, proved. */
abstract private[log] class AppendTarget(val file: Path) extends StoreCompaction {
  @volatile private var prev: Option[FileStatus] = None

  /** The previous compact file, with the status its proved index records. */
  def from(status: FileStatus): AppendTarget = { prev = Some(status); this }

  /** The upload of `file` from the previous compact file `prev`. */
  protected def upload(prev: FileStatus): AppendUpload

  final def publish(fn: OutputStream => Unit): Unit = {
    val source = prev.getOrElse(throw new ObjectStoreCopy.Failed(s"no source for $file", null))
    val out = upload(source)
    fn(out)
    out.complete()
    ObjectStoreCopy.Stats.compactions.incrementAndGet()
  }
}
