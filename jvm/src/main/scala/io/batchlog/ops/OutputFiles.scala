package io.batchlog.ops

import org.apache.hadoop.fs.{FileStatus, FileSystem, Path}

import io.batchlog.log.FileTree

/** Walking a sink's output directory for data files. */
object OutputFiles {

  private def hidden(name: String): Boolean = name.startsWith("_") || name.startsWith(".")

  /**
   * Calls `fn` for every file below `root` that Spark would treat as data: names starting with `_`
   * or `.` (such as `_spark_metadata`, `_SUCCESS`, `.crc` files), and everything below such a
   * directory, are skipped, as Spark's file index does.
   */
  def foreachDataFile(fs: FileSystem, root: Path)(fn: FileStatus => Unit): Unit =
    FileTree.foreachFile(fs, root, hidden) { f => if (!hidden(f.getPath.getName)) fn(f) }
}
