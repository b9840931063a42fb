package io.batchlog.log

import java.util.UUID

/**
 * Names of the data files the commit protocol writes. They carry the micro-batch id, so a file can
 * be traced to its batch even without the log (after a vanilla compaction dropped the tag, or when
 * the log is lost and must be rebuilt):
 *
 * {{{
 *   <prefix>part-<split:%05d>-batch-<batchId>-<uuid><suffix>
 *   part-00001-batch-7-3f2b...-9c1e.c000.snappy.parquet
 * }}}
 *
 * Vanilla Spark names them `part-<split>-<uuid><suffix>`; those have no batch.
 *
 * What counts as a data file where batchlog deletes or rebuilds from a listing (vacuum, repair,
 * verify's orphans): a name starting `part-<digits>-`, as every Spark file writer (and batchlog's
 * committer) names its output, that is not hidden. Anything else in the output directory (a user's
 * `README.txt`, a checkpoint kept there, `_batchlog/`, `_spark_metadata`) is never data.
 */
object DataFileNaming {

  /** A UUID as `UUID.toString` writes it (Spark's own data file names carry one too). */
  val UuidPattern: String = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"

  /** Matches a batch-tagged data file name; group 1 is the batch id. */
  val Pattern: String = s"part-[0-9]+-batch-([0-9]+)-$UuidPattern"

  private val regex = Pattern.r.unanchored
  private val dataName = "part-[0-9]+-.+".r
  private val uuidRegex = UuidPattern.r

  /** The UUID in a data file name (one per write job), or the name itself if it has none. */
  def uuidOf(name: String): String = uuidRegex.findFirstIn(name).getOrElse(name)

  def fileName(prefix: String, split: Int, batchId: Long, suffix: String): String =
    f"${prefix}part-$split%05d-batch-$batchId-${UUID.randomUUID()}$suffix"

  /** The batch id carried by a data file name or path, if it is batch-tagged. */
  def batchIdOf(pathOrName: String): Option[Long] = {
    val name = pathOrName.substring(pathOrName.lastIndexOf('/') + 1)
    regex.findFirstMatchIn(name).map(_.group(1).toLong)
  }

  /** A name Spark ignores as data: starting with `_` or `.` (as its file index does). */
  def isHidden(name: String): Boolean = name.startsWith("_") || name.startsWith(".")

  /** True if `name` is named as a sink's data file (see above): `part-<digits>-...`, not hidden. */
  def isDataFileName(name: String): Boolean = name match {
    case dataName() => true
    case _ => false
  }
}
