package io.batchlog.log

import org.apache.hadoop.fs.{FileAlreadyExistsException, Path}

import io.batchlog.shim.CheckpointFileManager

import io.batchlog.{BatchLogException, BuildInfo}

/** A query that writes (or wrote) a sink, from batch `fromBatch` on. */
final case class SinkOwner(queryId: String, fromBatch: Long, sinceMs: Long)

/**
 * What a sink's log says about itself, `<output>/_batchlog/_batchlog-sink.json`:
 * {{{
 *   {"version":1,"compactInterval":3,"epoch":2,
 *    "owners":[{"queryId":"8f1c…","fromBatch":0,"sinceMs":1795326048045}]}
 * }}}
 *   - `owners`: which query (the `id` in its checkpoint's `metadata`, stable across restarts) wrote
 *     the sink, from which batch on; the last one owns the sink now. A query that is not the owner
 *     is refused ([[io.batchlog.commit.WriterGuard]]) until a `takeover` names it. Spark itself
 *     cannot tell two queries apart: its sink silently skips every batch id already logged.
 *   - `epoch`: bumped by every operation that changes the sink under a writer (rewind, takeover,
 *     repair). A writer remembers the epoch it started with and re-reads it before committing, so a
 *     rewind from another process makes the running query fail before it commits, never after.
 *   - `compactInterval`: the interval of the query that writes the log, so that a log rebuilt by
 *     `repair` has the layout the restarting query expects even when no compact file survived.
 *   - `seq`: the record's version, one more at every change made by [[SinkRecord.compareAndSet]] (0
 *     in records written before it existed).
 *   - `writtenBy`: the batchlog release that last changed the record (absent in records written
 *     before it existed). A batchlog that must refuse a record of a newer `version` names it: the
 *     release the user needs.
 */
final case class SinkRecord(
    version: Int,
    compactInterval: Int,
    epoch: Long,
    owners: List[SinkOwner],
    seq: Long = 0L,
    writtenBy: Option[String] = None
) {
  def owner: Option[SinkOwner] = owners.lastOption

  /** Owners after a rewind to `toBatch` by `queryId`: the batches from `toBatch` on are its. */
  def rewoundTo(toBatch: Long, queryId: String, now: Long): SinkRecord = {
    val kept = owners.filter(_.fromBatch < toBatch)
    val next =
      if (kept.lastOption.exists(_.queryId == queryId)) kept
      else kept :+ SinkOwner(queryId, toBatch, now)
    copy(epoch = epoch + 1, owners = next)
  }
}

object SinkRecord extends JsonRecordFile[SinkRecord]("batchlog-sink.json") {
  val Version = 1

  /**
   * A record of a newer version is refused, never used or written back: this batchlog would drop
   * the fields it does not know, and a newer version raises `version` only when an older one must
   * not act on the sink.
   */
  override protected def precheck(p: Path, json: org.json4s.JValue): Unit =
    json \ "version" match {
      case org.json4s.JInt(v) if v > Version =>
        val release = Some(json \ "writtenBy").collect { case org.json4s.JString(r) => r }
        throw BatchLogException.newerRecord(p.toString, v.toLong, Version.toLong, release)
      case _ =>
    }

  /** Another process changed the record since `expected` was read; nothing was written. */
  final class Conflict(val file: Path, val expected: Long, val current: Option[SinkRecord])
      extends RuntimeException(
        s"$file changed since version $expected was read (now ${current.map(_.seq)})"
      )

  /**
   * The create-once claim of version `seq`, `batchlog-sink.<seq>.json` beside the record (derived
   * from [[path]], the one place that places a record), holding that version's record.
   */
  def versionPath(metadataPath: Path, seq: Long): Path = {
    val p = path(metadataPath)
    new Path(p.getParent, p.getName.stripSuffix(".json") + s".$seq.json")
  }

  /**
   * Replaces the record by `next` (its `seq` set to one more than `expected`'s, 1 if there was
   * none) only if it is still `expected`: a read-modify-write that a concurrent change cannot undo,
   * e.g. a starting writer's claim of the sink racing a rewind's epoch bump.
   *
   * How: the store arbitrates. The new version is first *created once* as
   * `batchlog-sink.<seq>.json` ([[LogFiles.publish]] without overwrite: a hard link on a local
   * disk, a rename that does not overwrite on HDFS, a conditional upload on an object store that
   * proved it refuses a second one); of two writers that read the same version, one creates it, the
   * other is refused ([[Conflict]], nothing written). The winner then overwrites the record itself
   * (what every reader, the writer's check before each commit included, reads: one status request
   * on an object store, as before) and removes the claim of the version before. A crash between the
   * two leaves the record one version behind its claim: the next compare-and-set finds the claim
   * taken, rolls the record forward to it, and reports the conflict (its caller re-reads).
   */
  def compareAndSet(
      fm: CheckpointFileManager,
      metadataPath: Path,
      expected: Option[SinkRecord],
      next: SinkRecord
  ): SinkRecord = {
    val seq = expected.map(_.seq + 1).getOrElse(1L)
    val record = next.copy(seq = seq, writtenBy = Some(BuildInfo.version))
    val claim = versionPath(metadataPath, seq)
    try publishRecordFile(fm, claim, overwrite = false)(out => out.write(bytes(record)))
    catch {
      case _: FileAlreadyExistsException =>
        val current = read(fm, metadataPath)
        readAt(fm, claim).filter(c => current.forall(_.seq < c.seq)).foreach { c =>
          write(fm, metadataPath, c) // a crash left the record behind its claim
        }
        throw new Conflict(path(metadataPath), seq - 1, read(fm, metadataPath))
    }
    write(fm, metadataPath, record)
    if (seq > 1) {
      try fm.delete(versionPath(metadataPath, seq - 1))
      catch { case scala.util.control.NonFatal(_) => } // a leftover claim is harmless
    }
    record
  }

  /** The record held by the claim file `claim`, if it exists. */
  private def readAt(fm: CheckpointFileManager, claim: Path): Option[SinkRecord] =
    readFile(fm, claim)

  def first(queryId: String, fromBatch: Long, compactInterval: Int, now: Long): SinkRecord =
    SinkRecord(Version, compactInterval, 0L, List(SinkOwner(queryId, fromBatch, now)))
}
