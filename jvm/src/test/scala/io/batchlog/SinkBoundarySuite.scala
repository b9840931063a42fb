package io.batchlog

import java.io.File
import java.nio.file.Files

import scala.collection.mutable

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.{FileSystem, Path}

import io.batchlog.log.DataFileNaming
import io.batchlog.ops.{OutputFiles, SinkBoundary}

/**
 * What is inside a sink's output ([[SinkBoundary]]) and what a walk of it meets ([[OutputFiles]]):
 * real directories, files and links in a temporary directory on the local file system.
 */
class SinkBoundarySuite extends TempDirs {

  private val fs = FileSystem.getLocal(new Configuration())

  private def touch(f: File): File = {
    f.getParentFile.mkdirs(); Files.write(f.toPath, Array[Byte](1)); f
  }

  private def data(dir: File, batch: Int): File =
    touch(new File(dir, s"part-00000-batch-$batch-${java.util.UUID.randomUUID()}.c000.parquet"))

  test("inside, outside, another file system, hidden directories, links") {
    withTempDir { tmp =>
      val out = new File(tmp, "out")
      val elsewhere = new File(tmp, "elsewhere")
      val inside = data(new File(out, "p=1"), 0)
      val special = data(new File(out, "p=ü½ 50%25"), 0)
      val outsideFile = data(elsewhere, 0)
      Files.createSymbolicLink(new File(out, "p=2").toPath, elsewhere.toPath)
      Files.createSymbolicLink(new File(out, "p=1/link.parquet").toPath, outsideFile.toPath)
      val b = new SinkBoundary(fs, new Path(out.toURI)) // file:/.../out/
      val o = b.output
      assert(o == fs.makeQualified(new Path(out.getPath)))
      def reason(p: String) = b.foreignReason(new Path(p))

      assert(reason(inside.toURI.toString).isEmpty)
      assert(reason(inside.getPath).isEmpty) // no scheme: the output's file system
      assert(b.foreignReason(new Path(special.toURI)).isEmpty)
      assert(reason(s"${out.toURI}p=1/../p=1/${inside.getName}").isEmpty)
      assert(reason(outsideFile.toURI.toString).contains(s"outside the output directory $o"))
      assert(reason(s"${out.toURI}../elsewhere/${outsideFile.getName}")
        .contains(s"outside the output directory $o"))
      assert(reason(s"${tmp.toURI}out2/x.parquet").contains(s"outside the output directory $o"))
      assert(reason(out.toURI.toString).contains(s"outside the output directory $o"))
      assert(reason(s"hdfs://127.0.0.1:1${inside.getPath}")
        .contains(s"on another file system than the output ($o)"))
      assert(reason(s"${out.toURI}_batchlog/x.parquet")
        .contains(s"inside $o/_batchlog, a directory Spark never reads data from"))
      assert(reason(s"${out.toURI}p=2/${outsideFile.getName}")
        .contains(s"reached through the symbolic link $o/p=2"))
      assert(reason(s"${out.toURI}p=1/link.parquet")
        .contains("a symbolic link: its target is not the sink's"))
    }
  }

  test("a walk of the output follows no link and tells data files from the rest") {
    withTempDir { tmp =>
      val out = new File(tmp, "out")
      val elsewhere = new File(tmp, "elsewhere")
      val d0 = data(new File(out, "p=1"), 0)
      val d1 = data(out, 1)
      val d2 = data(new File(out, "p=ü½ 50%25"), 2) // as Spark escapes a partition value 50%
      data(elsewhere, 2)
      touch(new File(out, "README.txt"))
      touch(new File(out, "_batchlog/part-00000-x.json"))
      touch(new File(out, "chk/metadata"))
      touch(new File(out, "chk/offsets/0"))
      touch(new File(out, "chk/commits/0"))
      touch(new File(out, "notchk/metadata")) // no offsets/: not a checkpoint
      Files.createSymbolicLink(new File(out, "p=2").toPath, elsewhere.toPath)
      Files.createSymbolicLink(new File(out, "p=1/part-00009-batch-3-x.parquet").toPath, d1.toPath)

      val found = mutable.ArrayBuffer.empty[String]
      val extras =
        OutputFiles.foreachDataFile(fs, new Path(out.toURI))(f => found += f.getPath.getName)
      assert(found.sorted == Seq(d0.getName, d1.getName, d2.getName).sorted)
      val root = fs.makeQualified(new Path(out.getPath))
      assert(extras.links.map(_.toString).sorted ==
        Seq(s"$root/p=1/part-00009-batch-3-x.parquet", s"$root/p=2"))
      assert(extras.checkpoints.map(_.toString) == Seq(s"$root/chk"))
      assert(extras.otherCount == 5) // README.txt, the checkpoint's three files, notchk/metadata
    }
  }

  test("data file names") {
    assert(DataFileNaming.isDataFileName("part-00000-batch-3-x.c000.snappy.parquet"))
    assert(DataFileNaming.isDataFileName("part-00012-0a1b.c000.json"))
    assert(!DataFileNaming.isDataFileName("part-x.bak"))
    assert(!DataFileNaming.isDataFileName("README.txt"))
    assert(!DataFileNaming.isDataFileName("_SUCCESS"))
    assert(!DataFileNaming.isDataFileName(".part-00000-x.crc"))
  }
}
