package io.batchlog.checkpoint

import java.io.{BufferedReader, InputStreamReader}
import java.nio.charset.StandardCharsets.UTF_8

import scala.util.Try

import org.apache.hadoop.fs.{ChecksumFileSystem, FileSystem, Path}
import org.json4s._
import org.json4s.jackson.JsonMethods.parse

import org.apache.spark.sql.SparkSession
import io.batchlog.shim.CheckpointFileManager

import io.batchlog.BatchLogException
import io.batchlog.Compat
import io.batchlog.log.{DataFileNaming, JsonField, LogFiles, LogLayout, SinkReaders}

/**
 * One entry of a query's offset log, `offsets/N`:
 * {{{
 *   v1
 *   {"batchWatermarkMs":0,"batchTimestampMs":...,"conf":{...}}   <- metadata
 *   {"logOffset":3}                                             <- one line per source ("-": none)
 * }}}
 */
final case class OffsetsEntry(
    batchId: Long,
    conf: Map[String, String],
    sourceOffsets: Seq[Option[String]]
) {

  /** The file source's offset for source `i`: its log offset, if source `i` is a file source. */
  def fileSourceLogOffset(i: Int): Option[Long] =
    sourceOffsets.lift(i).flatten.flatMap { s =>
      Try(parse(s)).toOption.collect {
        case JObject(List(("logOffset", JInt(k)))) => k.toLong
      }
    }

  /**
   * True if every source of the batch is a `batchlog` source ([[BatchLogOffset]]): its planned
   * input cannot be replayed exactly once its upstream was rewound (the upstream batch's files are
   * new), so a rewind re-plans the batch instead (it deletes `offsets/N` too).
   */
  def readsOnlyBatchLogSources: Boolean =
    sourceOffsets.nonEmpty && sourceOffsets.forall(_.exists(BatchLogOffset.parse(_).isDefined))
}

/**
 * A streaming query's checkpoint directory, read through Hadoop's `FileSystem` and Spark's
 * `CheckpointFileManager`: `metadata` (the query id), `offsets/N` (planned batches), `commits/N`
 * (finished batches), `sources/<i>/` (per-source logs) and `state/<operator>/<partition>/` (state
 * store versions). The one place that knows this layout.
 */
class QueryCheckpoint(spark: SparkSession, path: String) {
  private val hadoopConf = spark.sessionState.newHadoopConf()
  private val asGiven = new Path(path)
  val fs: FileSystem = asGiven.getFileSystem(hadoopConf)
  val root: Path = fs.makeQualified(asGiven)
  val fm: CheckpointFileManager = CheckpointFileManager.create(root, hadoopConf)

  val offsetsDir = new Path(root, "offsets")
  val commitsDir = new Path(root, QueryCheckpoint.CommitsDir)
  val sourcesDir = new Path(root, "sources")
  val stateDir = new Path(root, "state")

  // `metadata` alone makes a checkpoint: Spark writes it as a query is created, while 4.1+ create
  // `offsets/` only as the query plans its first batch. A query stopped before that (refused at
  // its start, see `HeadStartListener`) has `metadata` and no `offsets/`, and is one takeover names.
  if (!fm.exists(new Path(root, "metadata"))) throw BatchLogException.notACheckpoint(path)

  /** The query id (`metadata`'s `id`): the same for every run of the query. */
  lazy val queryId: String = {
    val file = new Path(root, "metadata")
    val in = fm.open(file)
    val text =
      try new String(Compat.readAllBytes(in), UTF_8)
      finally in.close()
    Try(parse(text) \ "id").toOption.collect { case JString(id) => id }.getOrElse(
      throw BatchLogException.unsupportedCheckpoint(file.toString, "it names no query id")
    )
  }

  /** Batch ids with an `offsets/N` file, ascending. */
  def offsetIds: Seq[Long] = numericNames(offsetsDir)

  /** Batch ids with a `commits/N` file, ascending. */
  def commitIds: Seq[Long] = numericNames(commitsDir)

  def offsetsFile(n: Long): Path = new Path(offsetsDir, n.toString)
  def commitFile(n: Long): Path = new Path(commitsDir, n.toString)

  def offsets(n: Long): OffsetsEntry = {
    val file = offsetsFile(n)
    val in = fm.open(file)
    val lines =
      try {
        val r = new BufferedReader(new InputStreamReader(in, UTF_8))
        Iterator.continually(r.readLine()).takeWhile(_ != null).toVector
      } finally in.close()
    if (lines.headOption.contains("v1") && lines.length >= 2) {
      val conf = Try(parse(lines(1)) \ "conf").toOption.collect { case JObject(fields) =>
        fields.collect { case (k, JString(v)) => k -> v }.toMap
      }.getOrElse(throw BatchLogException.unsupportedCheckpoint(
        file.toString,
        "its metadata line is not JSON"
      ))
      OffsetsEntry(n, conf, lines.drop(2).map(l => if (l == "-") None else Some(l)))
    } else {
      throw BatchLogException.unsupportedCheckpoint(
        file.toString,
        s"its header is '${lines.headOption.getOrElse("")}', only the offset log format v1 is known"
      )
    }
  }

  /** Source indexes with a `sources/<i>/` directory. */
  def sourceIndexes: Seq[Int] = numericNames(sourcesDir).map(_.toInt)

  def sourceDir(i: Int): Path = new Path(sourcesDir, i.toString)

  /**
   * Every file the file source `i` logged, with the log offset (its `batchId`) that listed it: its
   * latest compact file and the files after it, as Spark's `FileStreamSourceLog` reads them. With
   * `skipVanished`, a log file deleted between the listing and its read (Spark's cleanup after a
   * compaction) is skipped; else it fails naming the file.
   */
  def foreachSourceFile(i: Int, skipVanished: Boolean = false)(fn: (String, Long) => Unit): Unit = {
    val dir = sourceDir(i)
    val compacts = LogLayout.compactIds(fm, dir)
    val from = compacts.headOption.getOrElse(-1L)
    LogLayout.listIds(fm, dir).filter(_ >= from).foreach { id =>
      val file = new Path(dir, LogLayout.fileName(id, compacts.contains(id)))
      try {
        LogFiles.foreachLine(fm, file, "it is the file source's log") { (line, n) =>
          val path = JsonField.string(line, "path").getOrElse(
            throw BatchLogException.unsupportedCheckpoint(
              file.toString,
              s"its line $n is not a file source log entry (no path): the file is damaged"
            )
          )
          fn(path, JsonField.long(line, "batchId").getOrElse(id))
        }
      } catch {
        case _: BatchLogException if skipVanished && !fm.exists(file) =>
      }
    }
  }

  /**
   * The first retained batch (an `offsets/N`) for which `p` holds, `p` being false up to some batch
   * and true from it on; None if it holds for none. Halves the retained `offsets/`.
   */
  def firstBatchWhere(p: Long => Boolean): Option[Long] = {
    val ids = offsetIds.toIndexedSeq
    var (lo, hi) = (0, ids.length) // the first index where p holds is in [lo, hi]
    while (lo < hi) {
      val mid = (lo + hi) >>> 1
      if (p(ids(mid))) hi = mid else lo = mid + 1
    }
    ids.lift(lo)
  }

  /**
   * The first batch of this query whose source `i` (`kind`: [[SinkReaders.KindBatchlog]] or
   * [[SinkReaders.KindFile]]) read batch `from` or later of the batchlog sink `upstream`; None if
   * none did. A `batchlog` source records in `offsets/N` the upstream batch it read up to; a file
   * source's log names the files each of its log offsets listed, and their batch-tagged names say
   * which upstream batch wrote them.
   */
  def firstBatchReading(i: Int, kind: String, upstream: Path, from: Long): Option[Long] =
    if (kind == SinkReaders.KindBatchlog) {
      firstBatchWhere(n => batchLogOffset(n, i).exists(_.batchId >= from))
    } else {
      val inside = upstream.toUri.getPath.stripSuffix("/") + "/"
      var first = Long.MaxValue
      foreachSourceFile(i) { (path, logOffset) =>
        if (
          logOffset < first && new Path(path).toUri.getPath.startsWith(inside) &&
          DataFileNaming.batchIdOf(path).exists(_ >= from)
        ) first = logOffset
      }
      if (first == Long.MaxValue) None
      else firstBatchWhere(n => offsets(n).fileSourceLogOffset(i).exists(_ >= first))
    }

  /**
   * The offset of the `batchlog` source `i` in `offsets/n`; None if it names none ("-"). A line
   * that is not a `batchlog` offset is damage (the source wrote it), never read as "no offset".
   */
  def batchLogOffset(n: Long, i: Int): Option[BatchLogOffset] =
    offsets(n).sourceOffsets.lift(i).flatten.map { line =>
      BatchLogOffset.parse(line).getOrElse(
        throw BatchLogException.unsupportedCheckpoint(
          offsetsFile(n).toString,
          s"the offset of its source $i, a batchlog source, is not one: the file is damaged"
        )
      )
    }

  /** Names in a directory that are plain numbers (log files), ascending; none if it is absent. */
  def numericNames(dir: Path): Seq[Long] =
    if (!fm.exists(dir)) Nil
    else fm.list(dir).toSeq.map(_.getPath.getName).filter(_.matches("[0-9]+")).map(_.toLong).sorted

  /**
   * Removes Hadoop's checksum files `.N.crc` in log directory `dir` whose log file `N` is gone, for
   * `N > above`, and returns them. On the local disk Hadoop keeps such a file beside each log file;
   * deleting `N` by hand (`rm offsets/3`) leaves it, and Spark then cannot write `N` again: it
   * reports "Multiple streaming queries are concurrently using" the directory. Other file systems
   * keep no checksum files, and nothing else is touched.
   */
  def removeStrayChecksums(dir: Path, above: Long): Seq[Path] = fs match {
    case c: ChecksumFileSystem =>
      val raw = c.getRawFileSystem
      if (!raw.exists(dir)) Nil
      else {
        val stray = raw.listStatus(dir).toSeq.map(_.getPath).filter { p =>
          p.getName match {
            case QueryCheckpoint.Checksum(n) =>
              n.length < 19 && n.toLong > above && !raw.exists(new Path(dir, n))
            case _ => false
          }
        }
        stray.foreach(raw.delete(_, false))
        stray
      }
    case _ => Nil
  }
}

object QueryCheckpoint {

  /** A checkpoint's commit log directory (Spark's `commits/`). */
  val CommitsDir = "commits"

  /** The name of Hadoop's local checksum file of log file `N`: `.N.crc`. */
  private val Checksum = "\\.([0-9]+)\\.crc".r
}
