package io.batchlog.log

/**
 * A compact file checked against its index on disk in full (`verify`, `repair`): what readers and
 * compaction would meet in it.
 */
sealed trait IndexCheck

object IndexCheck {

  /** The index is proved and every run matches the compact file's bytes. */
  case object Sound extends IndexCheck

  /** The index is not used (readers rebuild it in memory), and why: the index is what is wrong. */
  final case class Unused(why: String) extends IndexCheck

  /**
   * The index is proved, so the compact file keeps the name, length and modification time it
   * records, and `runs` of the file do not match their CRC32C: the compact file is damaged.
   */
  final case class Damaged(index: CompactIndex, runs: Seq[IndexRun]) extends IndexCheck
}
