package io.batchlog.log

import java.io.FileNotFoundException
import java.util.concurrent.ConcurrentHashMap

import org.apache.hadoop.fs.{FileStatus, FileSystem, FSDataInputStream, Path, PathFilter}
import org.apache.hadoop.util.functional.FutureIO

import io.batchlog.shim.CheckpointFileManager

/**
 * The reads of one operation that changes nothing (`verify`), through `underlying`, with each of
 * `dirs` listed at most once: whether a file there exists, its status, and the listing itself are
 * all answered from that one listing, and a file there is opened with the status it listed (no
 * second request for its length). Paths outside `dirs` go to `underlying` as they are.
 *
 * Why: on an object store every call is a request. `exists` is a HEAD and a 2-key LIST, an open a
 * HEAD before its GET, and the log, its layout checks and the sink record each list the log
 * directory again: `verify` of a small sink sent 49 requests, 27 of them for the same directory.
 *
 * What it answers is the directory as listed: a file published after the listing is not there, one
 * deleted after it fails to open (`FileNotFoundException`, as it would without this view). That is
 * the snapshot a one-shot report wants; a running writer must never read through it.
 *
 * A write (never made by the operations that use it) goes to `underlying` and forgets its
 * directory's listing.
 */
final class ListedOnce(underlying: CheckpointFileManager, fs: FileSystem, dirs: Seq[Path])
    extends CheckpointFileManager {

  private val covered = dirs.map(keyOf).toSet

  /** Each listed directory's files by name; None for a directory that is not there. */
  private val listings = new ConcurrentHashMap[String, Option[Map[String, FileStatus]]]()

  private def keyOf(p: Path): String = p.toUri.getPath.stripSuffix("/")

  private def listing(dir: Path): Option[Map[String, FileStatus]] =
    listings.computeIfAbsent(
      keyOf(dir),
      _ =>
        try {
          val files = underlying.list(dir)
          // a file lists as itself: not a directory
          if (files.length == 1 && files(0).isFile && keyOf(files(0).getPath) == keyOf(dir)) None
          else Some(files.map(s => s.getPath.getName -> s).toMap)
        } catch { case _: FileNotFoundException => None }
    )

  /**
   * Forgets every listing: the next read lists again. For a reader that found a listed log file
   * gone (a concurrent compaction's cleanup) and starts over from the newer compaction, as Spark's
   * reader does.
   */
  def relist(): Unit = listings.clear()

  /** Whether `p` lies directly in a directory this view lists once. */
  def covers(p: Path): Boolean = p.getParent != null && covered(keyOf(p.getParent))

  /** The status of `p` as its directory's listing gave it (covered paths only, see [[covers]]). */
  def statusOf(p: Path): Option[FileStatus] = listing(p.getParent).flatMap(_.get(p.getName))

  override def list(dir: Path, filter: PathFilter): Array[FileStatus] =
    if (!covered(keyOf(dir))) underlying.list(dir, filter)
    else
      listing(dir) match {
        case Some(files) => files.values.filter(s => filter.accept(s.getPath)).toArray
        case None => throw new FileNotFoundException(s"$dir: no such directory")
      }

  override def exists(p: Path): Boolean =
    if (covered(keyOf(p))) listing(p).isDefined
    else if (covers(p)) statusOf(p).isDefined
    else underlying.exists(p)

  override def open(p: Path): FSDataInputStream =
    if (!covers(p)) underlying.open(p)
    else
      statusOf(p) match {
        case None => throw new FileNotFoundException(s"$p: not there when its directory was listed")
        case Some(st) if !underlying.isLocal =>
          // read whole, front to back: one GET, not a ranged GET per seek (S3A's random policy
          // read an 8 MiB compact file 15 to 30 times over)
          FutureIO.awaitFuture(
            fs.openFile(st.getPath).withFileStatus(st)
              .opt("fs.option.openfile.read.policy", "whole-file").build()
          )
        case Some(_) => LogFiles.open(underlying, p)
      }

  private def forget(p: Path): Unit = if (p.getParent != null) listings.remove(keyOf(p.getParent))

  override def createAtomic(
      p: Path,
      overwriteIfPossible: Boolean
  ): CheckpointFileManager.CancellableFSDataOutputStream = {
    forget(p)
    underlying.createAtomic(p, overwriteIfPossible)
  }

  override def mkdirs(p: Path): Unit = {
    forget(p); listings.remove(keyOf(p)); underlying.mkdirs(p)
  }

  override def delete(p: Path): Unit = { forget(p); underlying.delete(p) }

  override def isLocal: Boolean = underlying.isLocal

  override def createCheckpointDirectory(): Path = underlying.createCheckpointDirectory()
}
