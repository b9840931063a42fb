package io.batchlog.ops

import org.apache.hadoop.fs.{FileSystem, LocatedFileStatus, Path}

/** Walking a sink's output directory for data files. */
object OutputFiles {

  /**
   * Calls `fn` for every file below `root` that Spark would treat as data: names starting with `_`
   * or `.` (such as `_spark_metadata`, `_SUCCESS`, `.crc` files), and everything below such a
   * directory, are skipped, as Spark's file index does.
   */
  def foreachDataFile(fs: FileSystem, root: Path)(fn: LocatedFileStatus => Unit): Unit = {
    if (!fs.exists(root)) return
    val it = fs.listFiles(root, true)
    val depth = root.depth()
    while (it.hasNext) {
      val f = it.next()
      var p = f.getPath
      var hidden = false
      while (p != null && p.depth() > depth && !hidden) {
        hidden = p.getName.startsWith("_") || p.getName.startsWith(".")
        p = p.getParent
      }
      if (!hidden) fn(f)
    }
  }
}
