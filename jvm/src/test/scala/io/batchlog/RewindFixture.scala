package io.batchlog

import java.io.File
import java.nio.charset.StandardCharsets.UTF_8
import java.nio.file.Files

import org.apache.hadoop.fs.Path

import io.batchlog.checkpoint.StateFiles
import io.batchlog.log.SinkLogEntry
import io.batchlog.ops.{Rewind, RewindPlan}

/**
 * A sink and checkpoint written file by file, as a query with one file source and one HDFS-backed
 * stateful operator leaves them after batches 0..7: two data files per batch, the sink log (ours or
 * Spark's), `offsets/` and `commits/` 0..7, the file source's log 0..7, state versions 1..8.
 */
trait RewindFixture { self: SparkSessionTestBase =>
  import TestLogs._

  protected val QueryId = "8f1c0000-0000-0000-0000-000000000001"
  protected val Latest = 7L
  protected val HdfsProvider = StateFiles.KnownProviders.find(_.contains("HDFS")).get

  protected case class Fixture(root: File) {
    val out = new File(root, "out")
    val meta: File = metaDir(out)
    val cp = new File(root, "checkpoint")
    def sink: String = out.toString
    def checkpoint: String = cp.toString
    def plan(toBatch: Long, force: Boolean = false): RewindPlan =
      Rewind.plan(spark, sink, checkpoint, toBatch, force)
  }

  protected def write(f: File, text: String): Unit = {
    f.getParentFile.mkdirs()
    Files.write(f.toPath, text.getBytes(UTF_8))
  }

  /** Data file `i` of batch `b` on disk, batch-named (or vanilla-named), and its log entry. */
  protected def dataFile(out: File, b: Long, i: Int, named: Boolean): SinkLogEntry = {
    val e = if (named) namedEntry(b, i) else plainEntry(b, i)
    val f = new File(out, new Path(e.path).getName)
    write(f, "x" * (10 * b.toInt + i + 1))
    e.copy(path = f.toURI.toString, size = f.length())
  }

  /**
   * The sink and checkpoint after batches 0..Latest, the sink log written by `vanillaLog` or ours.
   */
  protected def withFixture(named: Boolean = true, vanillaLog: Boolean = false)(
      body: Fixture => Unit
  ): Unit = withTempDir { root =>
    val fx = Fixture(root)
    (0L to Latest).foreach { b =>
      val es = Array(dataFile(fx.out, b, 0, named), dataFile(fx.out, b, 1, named))
      if (vanillaLog) assert(vanilla(fx.meta).add(b, es.map(_.toSinkFileStatus)))
      else assert(ours(fx.meta).add(b, es))
      write(
        new File(fx.cp, s"offsets/$b"),
        "v1\n" + s"""{"batchWatermarkMs":0,"batchTimestampMs":0,"conf":""" +
          s"""{"${StateFiles.ProviderConfKey}":"$HdfsProvider"}}""" + "\n" +
          s"""{"logOffset":$b}"""
      )
      write(new File(fx.cp, s"commits/$b"), "v1\n{\"nextBatchWatermarkMs\":0}")
      write(new File(fx.cp, s"sources/0/$b"), "v1\n" + sourceEntry(b))
      write(new File(fx.cp, s"state/0/0/${b + 1}.delta"), "d")
    }
    write(new File(fx.cp, "metadata"), s"""{"id":"$QueryId"}""")
    write(new File(fx.cp, "state/0/0/5.snapshot"), "s")
    write(new File(fx.cp, "state/0/_metadata/metadata"), "m")
    body(fx)
  }

  protected def sourceEntry(b: Long) =
    s"""{"path":"file:///in/f$b.json","timestamp":1,"batchId":$b}"""

}
