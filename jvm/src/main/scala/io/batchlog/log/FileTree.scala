package io.batchlog.log

import java.nio.file.{Files, LinkOption, Paths}
import java.nio.file.attribute.BasicFileAttributes

import org.apache.hadoop.fs.{ChecksumFileSystem, FileStatus, FileSystem, Path}

/**
 * Every file below a directory, listed the way that is cheapest on its file system, and never
 * through a symbolic link.
 *
 * Why not always `FileSystem.listFiles(root, recursive = true)`: on an object store it is one flat
 * listing (a request per 1,000 keys, however deep the partition directories), but it returns a
 * `LocatedFileStatus` per file, and building one on the local file system reads the file's
 * permissions, which Hadoop does by forking `ls -ld` when its native library is absent (as in a
 * pip-installed pyspark): about 5 ms a file, 35 s for the rewind of a 1,000-batch sink. So the
 * local file system is walked with `java.nio` (one `lstat` per entry, no permissions read), an
 * object store with a flat listing listed flat, and any other walked a directory at a time
 * ([[walkStatuses]]).
 *
 * Why never through a link: the walks feed deletes (rewind, vacuum, state cuts). Hadoop's local
 * listing reports a link to a directory as that directory, so a walk that follows it deletes the
 * files behind it, outside the tree. Here a link (to a file or a directory, dangling or not) is
 * handed to `onLink` and neither followed nor reported as a file: on the local disk from its
 * `NOFOLLOW_LINKS` attributes, elsewhere from `FileStatus.isSymlink` (HDFS reports links as neither
 * file nor directory and does not descend into them; object stores have none). The root itself is
 * the caller's choice and is followed.
 */
object FileTree {

  /**
   * Calls `fn` for every file below `root` (none if it is absent), skipping every directory for
   * which `skipDir(name)` holds, with all below it; `onLink` gets every symbolic link met (not
   * below a skipped directory), `onDir` (local disk only: a flat listing has no directories) every
   * directory met, skipped or not.
   */
  def foreachFile(
      fs: FileSystem,
      root: Path,
      skipDir: String => Boolean = _ => false,
      onLink: Path => Unit = _ => (),
      onDir: Path => Unit = _ => ()
  )(fn: FileStatus => Unit): Unit = {
    val qualified = fs.makeQualified(root)
    // a flat listing of a missing root fails by itself: no probe first (on S3, a HEAD and a LIST)
    val flat = fs.getScheme != "file" && listsFlat(fs)
    if (!flat && !fs.exists(root)) return
    if (fs.getScheme == "file") {
      val hidesChecksums = fs.isInstanceOf[ChecksumFileSystem]
      val blockSize = fs.getDefaultBlockSize(qualified)
      // by the decoded path: `Paths.get(URI)` refuses a URI with non-ASCII characters
      walk(
        fs,
        Paths.get(qualified.toUri.getPath),
        blockSize,
        hidesChecksums,
        skipDir,
        onLink,
        onDir,
        fn
      )
    } else if (!flat) walkStatuses(fs, qualified, skipDir, onLink, fn)
    else {
      val depth = qualified.depth()
      val it =
        try fs.listFiles(qualified, true)
        catch { case _: java.io.FileNotFoundException => return }
      while (it.hasNext) {
        val f = it.next()
        var dir = f.getPath.getParent
        var skipped = false
        while (dir != null && dir.depth() > depth && !skipped) {
          skipped = skipDir(dir.getName)
          dir = dir.getParent
        }
        if (!skipped) { if (f.isSymlink) onLink(f.getPath) else if (f.isFile) fn(f) }
      }
    }
  }

  /**
   * Whether `fs` lists a tree flat: its `listFiles` is its own (S3A, Google's connector: one
   * listing request per 1,000 keys), not `FileSystem`'s walk of `listLocatedStatus`.
   */
  private def listsFlat(fs: FileSystem): Boolean =
    try
      fs.getClass.getMethod("listFiles", classOf[Path], java.lang.Boolean.TYPE)
        .getDeclaringClass != classOf[FileSystem]
    catch { case _: NoSuchMethodException => false }

  /**
   * The walk of a file system without a flat listing (ABFS, HDFS), one directory at a time, each
   * subdirectory descended once. Why not `FileSystem.listFiles`, which walks too: a directory may
   * be listed twice. ABFS on a flat-namespace account (the Blob API) reports a directory both as
   * its marker blob and as a prefix of names, seen against Azurite; `listFiles` then reports every
   * file below it twice, and a repair counted each data file twice.
   */
  private def walkStatuses(
      fs: FileSystem,
      dir: Path,
      skipDir: String => Boolean,
      onLink: Path => Unit,
      fn: FileStatus => Unit
  ): Unit = {
    val subdirs = scala.collection.mutable.LinkedHashSet.empty[Path]
    val it = fs.listStatusIterator(dir)
    while (it.hasNext) {
      val f = it.next()
      if (f.isSymlink) onLink(f.getPath)
      else if (f.isDirectory) { if (!skipDir(f.getPath.getName)) subdirs += f.getPath }
      else if (f.isFile) fn(f)
    }
    subdirs.foreach(d =>
      try walkStatuses(fs, d, skipDir, onLink, fn)
      catch { case _: java.io.FileNotFoundException => } // gone since listed
    )
  }

  private def walk(
      fs: FileSystem,
      dir: java.nio.file.Path,
      blockSize: Long,
      hidesChecksums: Boolean,
      skipDir: String => Boolean,
      onLink: Path => Unit,
      onDir: Path => Unit,
      fn: FileStatus => Unit
  ): Unit = {
    // as Hadoop's local listing names them (`file:///a/b`, the form Spark logs)
    def hadoopPath(p: java.nio.file.Path) =
      new Path(p.toString).makeQualified(fs.getUri, fs.getWorkingDirectory)
    val subdirs = Seq.newBuilder[java.nio.file.Path]
    val stream = Files.newDirectoryStream(dir)
    try {
      val it = stream.iterator()
      while (it.hasNext) {
        val entry = it.next()
        val name = entry.getFileName.toString
        val attrs =
          try
            Some(Files.readAttributes(
              entry,
              classOf[BasicFileAttributes],
              LinkOption.NOFOLLOW_LINKS
            ))
          catch { case _: java.nio.file.NoSuchFileException => None } // gone since listed
        attrs.foreach { a =>
          if (a.isSymbolicLink) onLink(hadoopPath(entry))
          else if (a.isDirectory) {
            onDir(hadoopPath(entry))
            if (!skipDir(name)) subdirs += entry
          } else if (!(hidesChecksums && name.startsWith(".") && name.endsWith(".crc"))) {
            val mtime = a.lastModifiedTime().toMillis
            fn(new FileStatus(a.size(), false, 1, blockSize, mtime, hadoopPath(entry)))
          }
        }
      }
    } finally stream.close()
    subdirs.result().foreach(walk(fs, _, blockSize, hidesChecksums, skipDir, onLink, onDir, fn))
  }
}
