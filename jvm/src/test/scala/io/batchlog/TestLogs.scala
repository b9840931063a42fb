package io.batchlog

import java.io.File
import java.nio.charset.StandardCharsets.UTF_8
import java.nio.file.Files
import java.util.UUID

import scala.jdk.CollectionConverters._

import com.fasterxml.jackson.databind.ObjectMapper
import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path
import org.scalatest.Assertions

import org.apache.spark.sql.SparkSession
import io.batchlog.shim.CheckpointFileManager
import io.batchlog.shim.{FileStreamSinkLog, SinkFileStatus}

import io.batchlog.log.{JsonRecordFile, LogFiles, LogFormat, SinkLogEntry}

/** Spark's own sink log, with its (protected) compact interval exposed. */
class VanillaSinkLog(spark: SparkSession, path: String)
    extends FileStreamSinkLog(FileStreamSinkLog.VERSION, spark, path) {
  def interval: Int = compactInterval
}

/**
 * Sink-log fixtures shared by the suites: entries, log files written and read by hand, and the
 * checks on a log directory's names and lines. No session: whatever needs one takes it.
 */
object TestLogs extends Assertions {

  private val mapper = new ObjectMapper()

  /** The fields of Spark's `SinkFileStatus`, in the order Spark writes them. */
  val VanillaFields: Seq[String] =
    Seq("path", "size", "isDir", "modificationTime", "blockReplication", "blockSize", "action")

  def uuid(batch: Long, i: Int): String = new UUID(batch, i.toLong).toString

  /** A vanilla-named data file (no batch in its name), tagged with `batch`. */
  def plainEntry(batch: Long, i: Int): SinkLogEntry = SinkLogEntry(
    path = s"file:/data/out/part-0000$i-${uuid(batch, i)}.c000.snappy.parquet",
    size = 1000L * batch + i,
    isDir = false,
    modificationTime = 1700000000000L + batch,
    blockReplication = 1,
    blockSize = 33554432L,
    action = "add",
    batchId = Some(batch)
  )

  /** A data file named by the batch-tagged commit protocol. */
  def namedEntry(batch: Long, i: Int): SinkLogEntry = plainEntry(batch, i).copy(
    path = s"file:/data/out/part-0000$i-batch-$batch-${uuid(batch, i)}.c000.snappy.parquet"
  )

  def entriesOf(batch: Long, n: Int = 3): Array[SinkLogEntry] =
    (0 until n).map(plainEntry(batch, _)).toArray

  def metaDir(root: File): File = new File(root, "_spark_metadata")

  /** A `CheckpointFileManager` for a local directory, without a session. */
  def localFm(dir: File): CheckpointFileManager =
    CheckpointFileManager.create(new Path(dir.toURI), new Configuration())

  /** Writes a log file (`v1` header, one line each) as batchlog does, atomically. */
  def writeLogFile(dir: File, name: String, lines: Seq[String]): Unit =
    LogFiles.writeAtomic(localFm(dir), new Path(new File(dir, name).toURI), overwrite = true) {
      w => lines.foreach(LogFiles.writeLine(w, _))
    }

  def readLines(f: File): Seq[String] = Files.readAllLines(f.toPath, UTF_8).asScala.toSeq

  /** Overwrites a file by hand (and drops its checksum so Hadoop does not reject it). */
  def overwrite(f: File, lines: Seq[String]): Unit =
    overwrite(f, lines.mkString("\n").getBytes(UTF_8))

  /** Replaces a file's bytes as a hand edit or bit rot would: its Hadoop checksum sidecar goes. */
  def overwrite(f: File, bytes: Array[Byte]): Unit = {
    Files.write(f.toPath, bytes)
    Files.deleteIfExists(new File(f.getParentFile, s".${f.getName}.crc").toPath)
  }

  /** Deletes a file and its Hadoop checksum sidecar, as a cleanup would. */
  def deleteWithCrc(f: File): Boolean = {
    Files.deleteIfExists(new File(f.getParentFile, s".${f.getName}.crc").toPath)
    f.delete()
  }

  /**
   * Log file names (`N`, `N.compact`) in `dir`, ignoring checksum and temp files and batchlog's
   * JSON records; every `N.compact.index` must sit beside its compact file, and with `indexed`
   * every compact file must have one.
   */
  def logFileNames(dir: File, indexed: Boolean = false): Set[String] = {
    val all = Option(dir.listFiles()).getOrElse(Array.empty[File]).map(_.getName)
      .filterNot(n => n.startsWith(".") || n.endsWith(".crc") || JsonRecordFile.isRecordName(n))
      .toSet
    val (indexes, logs) = all.partition(_.endsWith(".compact.index"))
    assert(
      indexes.map(_.stripSuffix(".index")).subsetOf(logs),
      s"an index outlived its compact: $all"
    )
    if (indexed) assert(indexes === logs.filter(_.endsWith(".compact")).map(_ + ".index"))
    logs
  }

  /** Compact files written by batchlog each have their index beside them. */
  def assertIndexed(dir: File): Unit = {
    val names = dir.listFiles().map(_.getName).toSet
    val compacts = names.filter(_.endsWith(".compact"))
    assert(names.filter(_.endsWith(".compact.index")) === compacts.map(_ + ".index"))
  }

  /** Log file names of batches `ids` at `interval` (`N.compact` for compaction batches). */
  def expectedNames(ids: Range, interval: Int): Set[String] =
    ids.map(id => if ((id + 1) % interval == 0) s"$id.compact" else id.toString).toSet

  /**
   * Parses a raw log line with a plain JSON parser and checks its shape: exactly the 7 vanilla
   * fields in Spark's order, then `commit` on a batch's first line, then `batchId`. Returns (path,
   * batchId, size).
   */
  def parseTaggedLine(file: File, line: String): (String, Long, Long) = {
    val node = mapper.readTree(line)
    assert(node.isObject, s"$file: $line")
    val fields = node.fieldNames().asScala.toSeq
    assert(
      fields === VanillaFields :+ "batchId" || fields === VanillaFields ++ Seq("commit", "batchId"),
      s"$file: $line"
    )
    assert(node.get("batchId").isIntegralNumber, s"$file: $line")
    assert(node.get("action").asText === "add")
    assert(node.get("isDir").isBoolean)
    (node.get("path").asText, node.get("batchId").asLong, node.get("size").asLong)
  }

  /**
   * (path, batchId) of every entry line of a log file, its header and each line's shape checked.
   */
  def taggedEntriesIn(f: File): Seq[(String, Long)] = {
    val lines = readLines(f)
    assert(lines.head === LogFormat.Header, f.toString)
    lines.tail.map(parseTaggedLine(f, _)).map { case (p, b, _) => (p, b) }
  }

  def statusKey(e: SinkLogEntry): (String, Long) = (e.path, e.size)
  def statusKey(s: SinkFileStatus): (String, Long) = (s.path, s.size)
}
