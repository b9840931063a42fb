package io.batchlog.log

import java.io.{File, OutputStream}
import java.nio.channels.FileChannel
import java.util.UUID

import scala.util.control.NonFatal

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.{
  FileAlreadyExistsException,
  FSDataInputStream,
  HardLink,
  Path,
  RawLocalFileSystem
}
import org.apache.hadoop.io.IOUtils

import io.batchlog.shim.CheckpointFileManager

/**
 * Atomic writes of log files on the local file system without forking a process.
 *
 * Why: Spark's default `CheckpointFileManager` writes through Hadoop's `FileContext`, and on the
 * local file system without Hadoop's native library (a pip-installed pyspark has none) each atomic
 * write forks five processes: `chmod` for the temp file and `readlink` four times for its rename.
 * That fixed cost, about 2 ms a fork on an idle machine and much more on a busy one, was most of
 * what a commit and a compaction of a small log cost (profiled with JFR: 12,721 process starts in
 * one run of `bench/run log` at 100k entries).
 *
 * How, with the same guarantees: the temp file (a hidden name beside the target, as Spark's) is
 * written as the plain local file `RawLocalFileSystem` maps the path to, without Hadoop setting its
 * permission (that is the `chmod`; the process umask applies, as for any file a process creates),
 * then published with one system call: a hard link for a write that must not replace an existing
 * file (fails atomically if the target exists, as `createAtomic(overwriteIfPossible = false)`
 * must), a rename for one that may. The published file has no `.crc` side file (a stale one is
 * removed first, so Hadoop never checks new bytes against an old checksum); readers through
 * Hadoop's checksummed local file system read a file without one unchecked, and batchlog's compact
 * files carry their own CRC32C per run.
 *
 * Used only where it cannot change behaviour: a `file:` path whose manager is Spark's default
 * (`FileContextBasedCheckpointFileManager`). A manager set with
 * `spark.sql.streaming.checkpointFileManagerClass` (such as the test kit's fault-injecting one) is
 * always used as it is, and a file system without hard links falls back to it.
 */
private[log] object LocalPublish {

  private val DefaultManager = "FileContextBasedCheckpointFileManager"

  @volatile private var linksWork = true

  private lazy val raw: RawLocalFileSystem = {
    val fs = new RawLocalFileSystem()
    fs.initialize(java.net.URI.create("file:///"), new Configuration(false))
    fs
  }

  /** True if `file` is written through this object rather than through `fm`. */
  def applies(fm: CheckpointFileManager, file: Path): Boolean =
    linksWork && file.toUri.getScheme == "file" && fm.getClass.getSimpleName == DefaultManager

  /**
   * Writes `file` with `fn` and publishes it atomically. A target that exists with `overwrite`
   * false is Hadoop's `FileAlreadyExistsException`, the temp file removed. On a file system without
   * hard links the bytes written are published by `viaManager` (the manager's own atomic write,
   * given a function that copies them), once, and the manager's way is used from then on.
   */
  def publish(file: Path, overwrite: Boolean)(fn: OutputStream => Unit)(
      viaManager: (OutputStream => Unit) => Unit
  ): Unit = {
    val tmp = new Path(file.getParent, s".${file.getName}.${UUID.randomUUID()}.tmp")
    val crc = new Path(file.getParent, s".${file.getName}.crc")
    try {
      // RawLocalFileSystem.create sets the file's permission, which forks chmod: the temp file is
      // its java.io.File opened directly (what RawLocalFileSystem does underneath, minus chmod).
      val out = new LocalOutputStream(new java.io.FileOutputStream(fileOf(tmp)))
      try fn(out)
      finally out.close()
      raw.delete(crc, false)
      if (overwrite) {
        if (!raw.rename(tmp, file)) throw new java.io.IOException(s"cannot rename $tmp to $file")
      } else {
        try HardLink.createHardLink(fileOf(tmp), fileOf(file))
        catch {
          case e: java.nio.file.FileAlreadyExistsException =>
            throw new FileAlreadyExistsException(s"$file exists (${e.getMessage})")
          case _: UnsupportedOperationException | _: java.nio.file.FileSystemException
              if !raw.exists(file) =>
            linksWork = false // e.g. a mount without hard links
            viaManager { out =>
              val in = raw.open(tmp)
              try IOUtils.copyBytes(in, out, 1 << 16, false)
              finally in.close()
            }
        }
      }
    } finally {
      try raw.delete(tmp, false)
      catch { case NonFatal(_) => }
    }
  }

  private def fileOf(p: Path): File = raw.pathToFile(p)

  /**
   * The local file behind `file` when it is read and written here (so compaction can copy its bytes
   * by its channel, [[channelOf]]); None on any other file system or manager.
   */
  def localFile(fm: CheckpointFileManager, file: Path): Option[File] =
    if (applies(fm, file)) Some(fileOf(file)) else None

  /**
   * `file` opened for reading as the manager would read it, minus its per-call cost (Hadoop's
   * `FileContext` resolves the path and probes the checksum side file on every open, about 0.1 ms a
   * file on the local disk, paid for each batch file a compaction reads): the raw local file, when
   * it has no `.crc` side file. None (read through the manager, which checks that side file) if it
   * has one, or on any other file system or manager. A missing file is `FileNotFoundException`.
   */
  def open(fm: CheckpointFileManager, file: Path): Option[FSDataInputStream] =
    if (!applies(fm, file)) None
    else if (fileOf(new Path(file.getParent, s".${file.getName}.crc")).exists()) None
    else Some(raw.open(file, 1 << 16))

  /**
   * The channel of a stream this object writes, flushed, to write bytes past the stream's buffer
   * (the position is shared); None for any other stream.
   */
  def channelOf(out: OutputStream): Option[FileChannel] = out match {
    case l: LocalOutputStream => l.flush(); Some(l.file.getChannel)
    case _ => None
  }

  final private class LocalOutputStream(val file: java.io.FileOutputStream)
      extends java.io.BufferedOutputStream(file, 1 << 16)
}
