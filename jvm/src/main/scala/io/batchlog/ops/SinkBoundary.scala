package io.batchlog.ops

import java.nio.file.{Files, Paths}

import scala.collection.mutable

import org.apache.hadoop.fs.{FileSystem, Path}

import io.batchlog.log.{DataFileNaming, SinkLogEntry}

/**
 * The one place that decides whether a path is the sink's to act on: inside its output directory
 * (maintenance deletes and writes nothing else; the query's checkpoint is handled by the rewind,
 * whose files it lists itself).
 *
 * A log entry names its file by URI, and nothing stops a log from naming a file elsewhere: an
 * absolute path outside the output, `out/../sibling/...`, another scheme or authority, or a path
 * through a symbolic link inside the output that leads out. Such an entry is *foreign*: verify
 * reports it, rewind and vacuum refuse to act while the log holds one, and repair rebuilds the log
 * from the data files inside the output, which leaves it out.
 *
 * A path is inside when it is on the output's file system (Hadoop's `checkPath`: the same scheme
 * and authority, a default port may be left out; a path without a scheme is the output's) and,
 * qualified and normalized (`..` and `.` resolved), lies strictly below the output's path, and no
 * directory between the output and it is hidden (`_`/`.`: `_spark_metadata`, `_batchlog`: never
 * data). On the local disk, where links exist, neither it nor any directory between the output and
 * it may be a symbolic link (checked with `lstat`, each directory once per boundary). The output
 * path itself is the user's choice and is taken as given.
 */
final class SinkBoundary(fs: FileSystem, outputDir: Path) {

  /** The output, qualified, without a trailing `/` (its depth is that of its path's names). */
  val output: Path = {
    val q = fs.makeQualified(outputDir)
    val path = q.toUri.getPath
    if (path.length > 1 && path.endsWith("/")) {
      new Path(q.toUri.getScheme, q.toUri.getAuthority, path.stripSuffix("/"))
    } else q
  }
  private val outPath = output.toUri.getPath.stripSuffix("/")
  private val local = fs.getScheme == "file"
  private val linkDirs = mutable.HashMap.empty[Path, Boolean]

  /**
   * `p` qualified against the output's file system and normalized, or None if it is on another file
   * system (another scheme or authority, as Hadoop's `checkPath` judges it: a default port may be
   * left out).
   */
  def qualify(p: Path): Option[Path] =
    try Some(new Path(fs.makeQualified(p).toUri.normalize()))
    catch { case _: IllegalArgumentException => None } // "Wrong FS"

  /** Why `p` is not the sink's to act on, or None if it lies inside the output. */
  def foreignReason(p: Path): Option[String] = qualify(p) match {
    case None => Some(s"on another file system than the output ($output)")
    case Some(q) if !q.toUri.getPath.startsWith(outPath + "/") =>
      Some(s"outside the output directory $output")
    case Some(q) =>
      val between = Iterator.iterate(q.getParent)(_.getParent)
        .takeWhile(d => d != null && d.depth() > output.depth()).toList
      between.find(d => DataFileNaming.isHidden(d.getName)).map(d =>
        s"inside $d, a directory Spark never reads data from"
      ).orElse {
        if (!local) None
        else if (isLink(q)) Some("a symbolic link: its target is not the sink's")
        else between.reverse.find(d => linkDirs.getOrElseUpdate(d, isLink(d))).map(d =>
          s"reached through the symbolic link $d"
        )
      }
  }

  /** `e` as a foreign entry if its file is not inside the output. */
  def foreignEntry(e: SinkLogEntry): Option[ForeignEntry] =
    foreignReason(Verify.entryPath(e)).map(ForeignEntry(e.path, e.size, e.batchId, _))

  // by the decoded path: `Paths.get(URI)` refuses a URI with non-ASCII characters ("Bad escape")
  private def isLink(p: Path): Boolean = Files.isSymbolicLink(Paths.get(p.toUri.getPath))
}

object SinkBoundary {

  /** Up to this many foreign entries are named in an error or report. */
  val Examples: Int = 5
}
