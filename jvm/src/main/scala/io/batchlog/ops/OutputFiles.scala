package io.batchlog.ops

import scala.collection.mutable

import org.apache.hadoop.fs.{FileStatus, FileSystem, Path}

import io.batchlog.log.{DataFileNaming, FileTree}

/**
 * Walking a sink's output directory for data files, and for what else is there that is not ours.
 *
 * Only files named as data files ([[DataFileNaming.isDataFileName]]) are handed on: a user's file,
 * a checkpoint kept inside the output, and every name Spark ignores (`_`/`.`, with all below such a
 * directory: `_spark_metadata`, `_batchlog`, `.crc` files) are not. Symbolic links are never
 * followed nor handed on ([[FileTree]]): the files behind a link are not the sink's to delete.
 */
object OutputFiles {

  /**
   * What a walk met besides data files: links (not followed), the number of other (non-data) files
   * with the first [[Reports.ListLimit]] of them, and checkpoints inside the output (a directory
   * with a `metadata` file and an `offsets` directory, Spark's checkpoint layout).
   */
  final class Extras {
    val links: mutable.ArrayBuffer[Path] = mutable.ArrayBuffer.empty
    var otherCount: Long = 0L
    val others: mutable.ArrayBuffer[Path] = mutable.ArrayBuffer.empty
    private val withMetadata = mutable.HashSet.empty[Path]
    private val withOffsets = mutable.HashSet.empty[Path]

    private[OutputFiles] def other(f: FileStatus): Unit = {
      otherCount += 1
      if (others.length < Reports.ListLimit) others += f.getPath
      val parent = f.getPath.getParent
      if (f.getPath.getName == "metadata") withMetadata += parent
      // a flat listing shows no directories: offsets/ is known from the files in it
      if (parent.getName == "offsets") withOffsets += parent.getParent
    }

    private[OutputFiles] def dir(p: Path): Unit =
      if (p.getName == "offsets") withOffsets += p.getParent

    /** The checkpoints found inside the output, by path. */
    def checkpoints: Seq[Path] = withMetadata.intersect(withOffsets).toSeq.sortBy(_.toString)
  }

  /** Calls `fn` for every data file below `root`; returns what else the walk met. */
  def foreachDataFile(fs: FileSystem, root: Path)(fn: FileStatus => Unit): Extras = {
    val extras = new Extras
    FileTree.foreachFile(
      fs,
      root,
      DataFileNaming.isHidden,
      onLink = p => if (!DataFileNaming.isHidden(p.getName)) extras.links += p,
      onDir = extras.dir
    ) { f =>
      val name = f.getPath.getName
      if (DataFileNaming.isDataFileName(name)) fn(f)
      else if (!DataFileNaming.isHidden(name)) extras.other(f)
    }
    extras
  }
}
