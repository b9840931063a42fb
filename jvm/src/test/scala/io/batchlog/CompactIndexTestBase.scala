package io.batchlog

import java.io.File
import java.nio.charset.StandardCharsets.UTF_8
import java.nio.file.Files

import scala.jdk.CollectionConverters._

import org.apache.hadoop.fs.FileStatus

import io.batchlog.log.{BatchTaggedFileStreamSinkLog, CompactIndex, SinkLogEntry}

/** Sinks written through batchlog's log, and their compact files' indexes as they are on disk. */
trait CompactIndexTestBase extends SparkSessionTestBase {

  protected def entry(b: Long, i: Int, modTime: Long = 1700000000000L): SinkLogEntry = SinkLogEntry(
    f"file:///out/p=$i/part-00000-batch-$b-00000000-0000-0000-0000-${b * 100 + i}%012d.parquet",
    100L + i,
    isDir = false,
    modTime,
    1,
    1024L,
    "add",
    Some(b)
  )

  protected def entries(b: Long, n: Int): Array[SinkLogEntry] = Array.tabulate(n)(entry(b, _))

  /** A sink dir with `batches` batches of `perBatch(b)` entries written through our log. */
  protected def buildSink(
      root: File,
      batches: Int,
      perBatch: Long => Int
  ): BatchTaggedFileStreamSinkLog = {
    val log = new BatchTaggedFileStreamSinkLog(spark, new File(root, "_spark_metadata").toString)
    (0 until batches).foreach(b => assert(log.add(b, entries(b, perBatch(b)))))
    log
  }

  protected def indexFile(root: File, compact: Long) =
    new File(root, s"_spark_metadata/$compact.compact${CompactIndex.Suffix}")

  protected def statusOf(log: BatchTaggedFileStreamSinkLog, compact: Long): FileStatus = {
    val p = log.logFilePath(compact)
    p.getFileSystem(spark.sessionState.newHadoopConf()).getFileStatus(p)
  }

  /** `CompactIndex.prove` of the index file beside compact file `compact`, as it is on disk. */
  protected def prove(log: BatchTaggedFileStreamSinkLog, compact: Long) = CompactIndex.prove(
    Files.readAllBytes(
      new File(CompactIndex.pathOf(log.logFilePath(compact)).toUri.getPath).toPath
    ),
    s"$compact.compact",
    statusOf(log, compact)
  )

  protected def proved(log: BatchTaggedFileStreamSinkLog, compact: Long): CompactIndex =
    prove(log, compact).fold(why => fail(s"index of $compact.compact not proved: $why"), identity)

  protected def compactLines(root: File, compact: Long): Seq[String] =
    Files.readAllLines(new File(root, s"_spark_metadata/$compact.compact").toPath, UTF_8).asScala.toSeq
  protected def metaFile(root: File, name: String) = new File(root, s"_spark_metadata/$name")

  /** Replaces a file's bytes as a hand edit or bit rot would: its Hadoop checksum sidecar goes. */
  protected def overwrite(root: File, name: String, bytes: Array[Byte]): Unit = {
    Files.write(metaFile(root, name).toPath, bytes)
    Files.deleteIfExists(metaFile(root, s".$name.crc").toPath)
  }

  protected def lineEnds(bytes: Array[Byte]): Seq[Int] = bytes.indices.filter(bytes(_) == '\n')

  /** 1, 2 or 3 entries a batch. */
  protected val perBatch: Long => Int = b => (b % 3 + 1).toInt

  /**
   * An interval-3 log of batches `0 until batches` with `per(b)` entries each (by default batches
   * 0..10, compacts 2, 5, 8), given its root, its log and the index compaction wrote for compact
   * file `compact`.
   */
  protected def withIndexedLog(batches: Int = 11, compact: Long = 8, per: Long => Int = perBatch)(
      f: (File, BatchTaggedFileStreamSinkLog, CompactIndex) => Unit
  ): Unit =
    withSQLConf(BatchLogConf.CompactIntervalKey -> "3") {
      withTempDir { root =>
        val log = buildSink(root, batches, per)
        f(root, log, proved(log, compact))
      }
    }

  /** Replaces the index beside compact file `compact` with `index`, written as batchlog does. */
  protected def rewriteIndex(
      log: BatchTaggedFileStreamSinkLog,
      compact: Long,
      index: CompactIndex
  ): Unit =
    CompactIndex.write(
      log.checkpointFileManager,
      CompactIndex.pathOf(log.logFilePath(compact)),
      index
    )
}
