package io.batchlog.log

import java.io.{BufferedReader, InputStreamReader}
import java.nio.charset.StandardCharsets.UTF_8

import scala.collection.mutable

import org.apache.hadoop.fs.{FileStatus, FSDataInputStream}

import org.apache.spark.internal.Logging
import io.batchlog.shim.CompactibleFileStreamLog._

import io.batchlog.BatchLogException
import io.batchlog.Compat
import io.batchlog.Compat._

/**
 * Reads of a [[BatchTaggedFileStreamSinkLog]] (mixed into it) through the per-batch
 * [[CompactIndex]] of its compact files: the index on disk when it is proved, else one rebuilt in
 * memory by a scan; one seek per run of a wanted batch, each run checked as it is read.
 */
trait CompactIndexReads extends Logging { self: BatchTaggedFileStreamSinkLog =>

  /**
   * Indexes this instance used, by compact id: proved on disk, or rebuilt by a scan (readers never
   * write files). One is used again while its compact file keeps the identity (name, length,
   * modification time) it was proved for, so an index file is read and parsed once per compact
   * file, not per lookup. Only the newest [[CachedCompacts]] are kept: a running query's log
   * compacts for as long as it runs.
   */
  private val indexes = new java.util.concurrent.ConcurrentHashMap[Long, CompactIndex]()

  /** How many compact files' indexes and proofs a log instance keeps ([[Newest]]). */
  final protected val CachedCompacts = 2

  /** The compact ids whose index this instance holds (at most [[CachedCompacts]]). */
  private[batchlog] def cachedIndexIds: Seq[Long] = Newest.keys(indexes)

  /**
   * Forgets every index, head and wait this instance cached. For a reader that is done while
   * something still holds it (a stopped query, which a Spark Connect server keeps for an hour); a
   * later lookup reads and proves them again.
   */
  def dropCachedIndexes(): Unit = {
    indexes.clear(); heads.clear(); awaited.clear(); hasUntaggedLines.clear()
  }

  /**
   * The index of compact file `compactId`: the one on disk if it is proved
   * ([[CompactIndex.prove]]), else rebuilt by one scan of the file and kept in memory. Reading
   * never writes: only compaction, `adopt` (which rewrites compact files) and `repair` write index
   * files, so read-only commands, dry runs and refused operations leave the sink exactly as it was.
   */
  def indexOf(compactId: Long, rebuild: Boolean = false): CompactIndex = {
    val file = batchIdToPath(compactId)
    val status = statusOf(file).getOrElse(
      throw BatchLogException.missingLogFile(
        file.toString,
        readWhy(compactId)
      )
    )
    val cached = Option(indexes.get(compactId)).filter(i => !rebuild && i.matches(status))
    cached.getOrElse {
      def load() = CompactIndex.load(reads, CompactIndex.pathOf(file), status)
      val onDisk =
        if (rebuild) None
        else load().orElse(if (awaitIndex(compactId, status)) load() else None)
      val index = onDisk.flatMap(_.toOption).getOrElse {
        onDisk.flatMap(_.left.toOption).filterNot(CompactIndex.isExpectedReason).foreach { why =>
          logWarning(s"Not using ${CompactIndex.pathOf(file)}: $why. Rebuilding it in memory " +
            "from its compact file (`python -m batchlog repair` rewrites it)")
        }
        scanIndex(compactId, status)
      }
      indexes.put(compactId, index)
      Newest.keep(indexes, CachedCompacts)
      // a scan's finding about a compact file goes with its index
      hasUntaggedLines.retainAll(indexes.keySet())
      index
    }
  }

  /**
   * The proved heads of `v3` indexes on disk this instance read, by compact id, with the blocks it
   * read of each: a lookup of a few batches reads the head and their blocks, not the whole index.
   * Bounded as [[indexes]].
   */
  private val heads = new java.util.concurrent.ConcurrentHashMap[Long, HeldHead]()

  /** The compact ids whose `v3` head this instance holds (at most [[CachedCompacts]]). */
  private[batchlog] def cachedHeadIds: Seq[Long] = Newest.keys(heads)

  final private class HeldHead(val head: IndexBlocks.Head) {
    val blocks = new java.util.concurrent.ConcurrentHashMap[Long, Vector[IndexRun]]()
  }

  /** The proved head of the `v3` index of compact file `compactId` of `status`, if it has one. */
  private def headOf(compactId: Long, status: FileStatus): Option[HeldHead] =
    Option(heads.get(compactId)).filter(_.head.matches(status)).orElse {
      val file = CompactIndex.pathOf(batchIdToPath(compactId))
      val read =
        try {
          val in = LogFiles.open(reads, file)
          try IndexBlocks.readHead(in, status.getPath.getName, status).toOption.flatten
          finally in.close()
        } catch { case _: java.io.IOException => None }
      read.map { h =>
        val held = new HeldHead(h)
        heads.put(compactId, held)
        Newest.keep(heads, CachedCompacts)
        held
      }
    }

  /**
   * Compact files whose missing index this instance waited for, with the modification time it
   * waited for: once per compact file. Bounded as [[indexes]].
   */
  private val awaited = new java.util.concurrent.ConcurrentHashMap[Long, java.lang.Long]()

  /** How many times log instances waited for a fresh compact file's index (for tests). */
  private[batchlog] def indexWaits: Long = CompactIndexReads.waits.get()

  /**
   * Waits for the index of compact file `compactId` (of `status`), missing when read, if its writer
   * is likely still to write it: true once it is there. Why: a compaction publishes `N.compact`
   * first and its index right after (the index proves the compact file by its modification time,
   * which an object store sets only as it publishes). A reader in between (a downstream trigger
   * polls for the latest batch) would rebuild the index by scanning the whole compact file: 0.7 s
   * at 100,000 batches on a local disk, a GET of the whole file on S3. The writer's index takes
   * milliseconds to come.
   *
   * Only where the previous compact file has an index (its writer writes them: plain Spark does
   * not), for a compact file written less than [[CompactIndexReads.IndexGraceMs]] ago (its store's
   * clock against this one's), once per compact file and log instance, and for at most twice the
   * time the previous index took to follow its compact file (both modification times by the store's
   * clock) plus [[CompactIndexReads.MinWaitMs]], never beyond the grace. So an index deleted by
   * hand, or a writer killed in the gap, costs a reader a fraction of a second once. The index,
   * once there, is proved as any other.
   */
  private def awaitIndex(compactId: Long, status: FileStatus): Boolean = {
    import CompactIndexReads.{IndexGraceMs, MinWaitMs}
    val t = status.getModificationTime
    val fresh = System.currentTimeMillis() - t < IndexGraceMs &&
      !Option(awaited.get(compactId)).contains(java.lang.Long.valueOf(t))
    val prev = compactId - interval
    val prevGap =
      if (!fresh || prev < 0) None
      else statusOf(CompactIndex.pathOf(batchIdToPath(prev))).flatMap { index =>
        statusOf(batchIdToPath(prev)).map(c =>
          math.max(0L, index.getModificationTime - c.getModificationTime)
        )
      }
    prevGap.exists { gap =>
      awaited.put(compactId, t)
      Newest.keep(awaited, CachedCompacts)
      CompactIndexReads.waits.incrementAndGet()
      val index = CompactIndex.pathOf(batchIdToPath(compactId))
      val waitMs = math.min(IndexGraceMs, 2 * gap + MinWaitMs)
      val deadline = System.nanoTime() + waitMs * 1000000L
      var pause = 2L
      var there = fileManager.exists(index)
      while (!there && System.nanoTime() < deadline) {
        Thread.sleep(math.max(1L, math.min(pause, (deadline - System.nanoTime()) / 1000000L)))
        pause = math.min(pause * 2, 25L)
        there = fileManager.exists(index)
      }
      if (!there) {
        logInfo(s"No index for $compactId.compact after waiting $waitMs ms for its writer: " +
          "rebuilding it in memory")
      }
      there
    }
  }

  /**
   * The runs of compact file `compactId` that may hold batches `from` to `to` (and every untagged
   * run), as an index of only those runs: from the whole index if this instance holds it, else from
   * the blocks of its `v3` index that hold them (each read once and proved), else the whole index
   * ([[indexOf]]). A block that does not prove sends it to [[indexOf]], which says why.
   */
  def indexWithin(compactId: Long, from: Long, to: Long): CompactIndex =
    indexOfBlocks(compactId)(_.blocks.filter(_.mayHold(from, to)))

  private def indexOfBlocks(compactId: Long)(
      pick: IndexBlocks.Head => Seq[IndexBlocks.Block]
  ): CompactIndex = {
    val file = batchIdToPath(compactId)
    val status = statusOf(file) match {
      case Some(st) => st
      case None => return indexOf(compactId) // fails, naming the missing file
    }
    Option(indexes.get(compactId)).filter(_.matches(status)).getOrElse {
      headOf(compactId, status).orElse {
        if (awaitIndex(compactId, status)) headOf(compactId, status) else None
      }.flatMap { held =>
        val h = held.head
        // the index file is opened once, for the first block not held yet, and read until a block
        // does not prove
        var in: FSDataInputStream = null
        val runs =
          try pick(h).foldLeft[Either[String, Vector[IndexRun]]](Right(Vector.empty)) { (acc, b) =>
              acc.flatMap { a =>
                Option(held.blocks.get(b.at)).map(Right(_)).getOrElse {
                  if (in == null)
                    in = LogFiles.open(reads, CompactIndex.pathOf(file))
                  val read = IndexBlocks.readBlock(in, b)
                  read.foreach(rs => held.blocks.put(b.at, rs))
                  read
                }.map(a ++ _)
              }
            }
          finally if (in != null) in.close()
        runs.left.foreach(_ => heads.remove(compactId)) // indexOf says why, and rebuilds
        runs.toOption.map(rs =>
          CompactIndex(
            h.compactName,
            h.compactLength,
            h.compactModTime,
            rs,
            h.droppedEntries,
            h.droppedMaxBatch
          )
        )
      }.getOrElse(indexOf(compactId))
    }
  }

  /** The newest batch retention dropped, as compact file `compactId`'s index records it. */
  def droppedMaxBatchOf(compactId: Long): Long = indexOfBlocks(compactId)(_ => Nil).droppedMaxBatch

  /**
   * The sink's retention watermark: the oldest batch whose log entries the sink's retention has not
   * dropped, one above the newest batch it dropped entries of, as the latest compact file's index
   * records it (carried from compaction to compaction); 0 if it dropped none (or the index,
   * rebuilt, does not tell).
   */
  def retainedFrom(): Long =
    liveLogBatchIds().headOption.filter(isCompactFile).map(c => droppedMaxBatchOf(c) + 1)
      .getOrElse(0L)

  /**
   * False if compact file `compactId` has no untagged run (read from its index's head if it can).
   */
  def mayHaveUntagged(compactId: Long): Boolean =
    indexOfBlocks(compactId)(h => h.blocks.filter(_.untagged > 0).take(1)).runs
      .exists(_.batchId.isEmpty)

  /**
   * Builds the index of compact file `compactId` (of `status`) by reading it once, every run's
   * CRC32C computed from the raw bytes: proved by construction.
   */
  def scanIndex(compactId: Long, status: FileStatus): CompactIndex = {
    val file = batchIdToPath(compactId)
    val crc = Compat.crc32c()
    val b = new CompactIndex.Builder(crc)
    val in =
      LogFiles.open(reads, file, readWhy(compactId))
    var untagged = false
    val end =
      try {
        CompactIndex.scanLines(in, crc, h => BatchLogException.badHeader(file.toString, h)) {
          var lineNo = 1L
          (line, offset) =>
            lineNo += 1
            untagged ||= !LogFormat.isTagged(line)
            b.line(batchOfLine(line, compactId, file.toString, lineNo), offset)
        }
      } finally in.close()
    if (untagged) hasUntaggedLines.add(compactId) else hasUntaggedLines.remove(compactId)
    b.result(end, status)
  }

  /** Compact files found by a scan to hold lines without `batchId` (written by plain Spark). */
  private[log] val hasUntaggedLines = java.util.concurrent.ConcurrentHashMap.newKeySet[Long]()

  /** Writes the index of compact file `compactId` from a scan (after `adopt` rewrote the file). */
  def writeIndex(compactId: Long): Unit = {
    val file = batchIdToPath(compactId)
    statusOf(file).foreach(st =>
      CompactIndex.write(checkpointFileManager, CompactIndex.pathOf(file), scanIndex(compactId, st))
    )
  }

  /**
   * The on-disk index of compact file `compactId` checked in full (one streaming read of the file
   * when it is proved): [[IndexCheck.Sound]], [[IndexCheck.Unused]] (with
   * [[CompactIndex.AbsentReason]] if there is none, [[CompactIndex.LegacyReason]] for a legacy one,
   * which readers rebuild in memory as a matter of course, or the damage to the index), or
   * [[IndexCheck.Damaged]]: the index is proved, so the compact file keeps the name, length and
   * modification time it records, and runs of it do not match their CRC32C: the compact file is
   * damaged. None if the compact file is gone.
   */
  def checkIndex(compactId: Long): Option[IndexCheck] = {
    val file = batchIdToPath(compactId)
    statusOf(file).map { status =>
      CompactIndex.load(reads, CompactIndex.pathOf(file), status) match {
        case None => IndexCheck.Unused(CompactIndex.AbsentReason)
        case Some(Left(why)) => IndexCheck.Unused(why)
        case Some(Right(index)) => runsChecked(compactId, index)
      }
    }
  }

  /**
   * [[checkIndex]] of compact file `compactId` in the same read of the file that hands its lines to
   * `line(text, lineNo, sound)`, run by run (a run is held whole, so only one of at most `keepUpTo`
   * bytes), `sound` false for the lines of a run that does not match its CRC32C. The second value
   * says whether every run's lines were handed; when not (no proved index, or a longer run), none
   * were, and the caller reads the file's entries the usual way. So `verify` reads the live compact
   * file once, not once for its damage and again for its entries.
   */
  def checkIndexReading(compactId: Long, keepUpTo: Long)(
      line: (String, Long, Boolean) => Unit
  ): (Option[IndexCheck], Boolean) = {
    val file = batchIdToPath(compactId)
    statusOf(file) match {
      case None => (None, false)
      case Some(status) =>
        CompactIndex.load(reads, CompactIndex.pathOf(file), status) match {
          case None => (Some(IndexCheck.Unused(CompactIndex.AbsentReason)), false)
          case Some(Left(why)) => (Some(IndexCheck.Unused(why)), false)
          case Some(Right(index)) if index.runs.exists(_.length > keepUpTo) =>
            (Some(runsChecked(compactId, index)), false)
          case Some(Right(index)) =>
            val damaged = Seq.newBuilder[IndexRun]
            var lineNo = 1L // the header's
            val in = LogFiles.open(reads, file, readWhy(compactId))
            try {
              // the header first: no run covers it
              val first = new Array[Byte](LogFormat.Header.length)
              var n, got = 0
              while (n < first.length && { got = in.read(first, n, first.length - n); got > 0 }) {
                n += got
              }
              LogFiles.requireHeader(first, n, reads, file)
              CompactIndex.foreachRun(index, in, keepUpTo, at = n.toLong) { (r, bytes, matches) =>
                if (!matches) damaged += r
                if (bytes == null) lineNo += r.count // the file ended inside it
                else {
                  // a run is its lines, each after its '\n' (the first ends the line before it)
                  var from = 1
                  while (from <= bytes.length) {
                    var to = from
                    while (to < bytes.length && bytes(to) != '\n') to += 1
                    lineNo += 1
                    line(new String(bytes, from, to - from, UTF_8), lineNo, matches)
                    from = to + 1
                  }
                }
              }
            } finally in.close()
            damaged.result() match {
              case Nil => (Some(IndexCheck.Sound), true)
              case runs => (Some(IndexCheck.Damaged(index, runs)), true)
            }
        }
    }
  }

  /**
   * The live entries as [[foreachLiveEntry]] gives them, each with whether it may be trusted
   * (false: it is in a run of the live compact file that does not match its CRC32C), and the check
   * of the live compact file's index and runs, made in the same read of it ([[checkIndexReading]]):
   * None without a compact file. A log file found gone before any entry was handed (a concurrent
   * compaction's cleanup) starts the read over from the newer compaction, listed again, as
   * [[foreachLiveEntry]] does.
   */
  def foreachLiveEntryChecked(keepUpTo: Long)(
      fn: (SinkLogEntry, Boolean) => Unit
  ): Option[(Long, IndexCheck)] = {
    var delivered = false
    var latest = getLatestBatchId().getOrElse(-1L)
    var result: Option[(Long, IndexCheck)] = None
    var done = false
    while (!done) {
      try {
        result = liveEntriesChecked(latest, keepUpTo) { (e, sound) =>
          delivered = true; fn(e, sound)
        }
        done = true
      } catch {
        case e: BatchLogException if e.code == BatchLogException.MissingLogFile && !delivered =>
          val expectedMinLatest = nextCompactionBatchId(latest, interval)
          listing.foreach(_.relist())
          latest = getLatestBatchId().getOrElse(-1L)
          if (latest < expectedMinLatest) throw e
      }
    }
    result
  }

  private def liveEntriesChecked(latest: Long, keepUpTo: Long)(
      fn: (SinkLogEntry, Boolean) => Unit
  ): Option[(Long, IndexCheck)] = {
    val now = System.currentTimeMillis()
    var check: Option[(Long, IndexCheck)] = None
    def deliver(e: SinkLogEntry, id: Long, sound: Boolean): Unit = {
      val resolved = if (e.batchId.isDefined) e else e.copy(batchId = batchOf(e, id))
      if (shouldRetain(resolved, now)) fn(resolved, sound)
    }
    val ids = if (latest < 0) Nil else getAllValidBatches(latest, interval)
    ids.foreach { id =>
      if (!isCompactFile(id)) foreachEntryIn(id) { e => if (shouldRetain(e, now)) fn(e, true) }
      else {
        val file = batchIdToPath(id).toString
        val (c, handed) = checkIndexReading(id, keepUpTo) { (line, lineNo, sound) =>
          deliver(decodeLine(line, file, lineNo), id, sound)
        }
        check = c.map(id -> _)
        if (!handed) {
          val untrusted = c.toSeq.flatMap {
            case IndexCheck.Damaged(_, runs) => runs.map(_.batchId)
            case _ => Nil
          }.toSet
          foreachEntryIn(id) { e =>
            if (shouldRetain(e, now)) fn(e, !untrusted(e.batchId))
          }
        }
      }
    }
    check
  }

  /** The check of compact file `compactId` against its proved `index`: sound, or its damage. */
  private def runsChecked(compactId: Long, index: CompactIndex): IndexCheck =
    damagedRuns(compactId, index) match {
      case Nil => IndexCheck.Sound
      case runs => IndexCheck.Damaged(index, runs)
    }

  /** Why the on-disk index of compact file `compactId` is not used, or the damage to the file. */
  def indexProblem(compactId: Long): Option[String] = checkIndex(compactId).collect {
    case IndexCheck.Unused(why) => why
    case IndexCheck.Damaged(_, runs) => damageError(compactId, runs).getMessage
  }

  /**
   * The runs of compact file `compactId` that do not match `index` ([[CompactIndex.damagedRuns]]).
   */
  def damagedRuns(compactId: Long, index: CompactIndex): Seq[IndexRun] = {
    val in = LogFiles.open(reads, batchIdToPath(compactId), readWhy(compactId))
    try CompactIndex.damagedRuns(index, in)
    finally in.close()
  }

  /** The `CORRUPT_LOG` error for `runs` of compact file `compactId` that do not match its index. */
  def damageError(compactId: Long, runs: Seq[IndexRun]): BatchLogException = {
    val file = batchIdToPath(compactId)
    BatchLogException.damagedCompactFile(
      file.toString,
      CompactIndex.pathOf(file).toString,
      file.getParent.getParent.toString,
      runs.map(CompactIndex.describe)
    )
  }

  /**
   * Called when `run` of compact file `compactId`, read through `index`, does not match its bytes:
   * fails with `CORRUPT_LOG` (naming every run that does not match) if the file still has the name,
   * length and modification time `index` records, since a compact file is written once and that is
   * damage; returns if the file was replaced meanwhile (a stale index: a rescan may follow).
   */
  private[log] def requireReplaced(compactId: Long, index: CompactIndex, run: IndexRun): Unit =
    statusOf(batchIdToPath(compactId)).filter(index.matches).foreach { _ =>
      throw damageError(
        compactId,
        damagedRuns(compactId, index) match {
          case Nil => Seq(run) // it matched on a second read: name what the first one saw
          case runs => runs
        }
      )
    }

  /** The batch of a line of log file `logBatchId`: its tag read from its tail, else resolved. */
  private def batchOfLine(
      line: String,
      logBatchId: Long,
      file: String,
      lineNo: Long
  ): Option[Long] =
    LogFormat.taggedBatch(line).orElse(batchOf(decodeLine(line, file, lineNo), logBatchId))

  /**
   * Calls `fn` for every live entry whose batch (`None`: untagged) satisfies `wanted`, reading only
   * those entries: per-batch files are skipped by name and compact files are read through their
   * [[CompactIndex]], one seek per run.
   */
  def foreachLiveEntryWhere(wanted: Option[Long] => Boolean)(fn: SinkLogEntry => Unit): Unit =
    foreachLiveEntryWithin(0L, Long.MaxValue)(wanted)(fn)

  /**
   * [[foreachLiveEntryWhere]] for a `wanted` that holds no tagged batch outside `from` to `to`: of
   * a compact file only the runs that may hold them are looked at ([[indexWithin]]), so a lookup of
   * a few batches reads a few blocks of a `v3` index, however many batches the sink has.
   */
  def foreachLiveEntryWithin(from: Long, to: Long)(wanted: Option[Long] => Boolean)(
      fn: SinkLogEntry => Unit
  ): Unit = {
    val now = System.currentTimeMillis()
    foreachLiveLineWhere(wanted, from, to) { (line, batch, file, lineNo) =>
      val e = decodeLine(line, file, lineNo)
      if (shouldRetain(e, now)) fn(if (e.batchId == batch) e else e.copy(batchId = batch))
    }
  }

  /**
   * The logged paths of the live entries whose batch satisfies `wanted` (as
   * [[foreachLiveEntryWhere]]), without decoding the lines batchlog wrote: a tagged line's path is
   * cut from its head ([[LogFormat.pathOf]]). Any other line, and every line under an age retention
   * (which needs each entry's time), is decoded.
   */
  def foreachLivePathWhere(wanted: Option[Long] => Boolean)(fn: String => Unit): Unit =
    foreachLivePathWithin(0L, Long.MaxValue)(wanted)(fn)

  /** [[foreachLivePathWhere]] for a `wanted` as [[foreachLiveEntryWithin]]'s. */
  def foreachLivePathWithin(from: Long, to: Long)(wanted: Option[Long] => Boolean)(
      fn: String => Unit
  ): Unit =
    if (ageRetentionActive) foreachLiveEntryWithin(from, to)(wanted)(e => fn(e.path))
    else foreachLiveLineWhere(wanted, from, to) { (line, _, file, lineNo) =>
      fn(LogFormat.pathOf(line).getOrElse(decodeLine(line, file, lineNo).path))
    }

  /**
   * Calls `fn(line, batch, file, lineNo)` for every line of the live log files whose batch
   * satisfies `wanted` (lineNo -1 inside a compact file, which is read by runs). A compact file is
   * opened once and read through its index, one seek per wanted run, each run checked (its lines'
   * batch, their count and the CRC32C of its bytes) before any of its lines is passed on. Bytes
   * that do not match, in a compact file that keeps the identity its index records, are damage:
   * `CORRUPT_LOG` ([[requireReplaced]]). Otherwise the index is stale (the file was replaced, or
   * its index was wrong): it is rebuilt, and only the runs not yet passed on are read from the new
   * one.
   */
  private def foreachLiveLineWhere(wanted: Option[Long] => Boolean, from: Long, to: Long)(
      fn: (String, Option[Long], String, Long) => Unit
  ): Unit =
    liveLogBatchIds().foreach { id =>
      val file = batchIdToPath(id).toString
      if (!isCompactionBatch(id, interval)) {
        if (wanted(Some(id))) foreachLineIn(id) { (line, lineNo) =>
          fn(line, batchOfLine(line, id, file, lineNo), file, lineNo)
        }
      } else {
        val done = mutable.HashSet.empty[(Option[Long], Long)] // the runs passed on
        val in = new CompactReader(id)
        def readAll(index: CompactIndex): Boolean =
          index.runs.iterator.filter(r => wanted(r.batchId) && !done((r.batchId, r.offset))).forall {
            run =>
              in.run(run) match {
                case Right(lines) =>
                  lines.foreach(fn(_, run.batchId, file, -1L)); done += ((run.batchId, run.offset));
                  true
                case Left(bytesDiffer) =>
                  if (bytesDiffer) requireReplaced(id, indexOf(id), run) // naming every run
                  false
              }
          }
        try {
          if (!readAll(indexWithin(id, from, to)) && !readAll(indexOf(id, rebuild = true))) {
            throw BatchLogException.corruptLine(file, -1, "it changed while it was read")
          }
        } finally in.close()
      }
    }

  /** One live entry (the oldest), read without scanning the log; None if the log is empty. */
  def firstLiveEntry(): Option[SinkLogEntry] =
    liveLogBatchIds().iterator.flatMap { id =>
      if (isCompactionBatch(id, interval)) {
        val in = new CompactReader(id)
        def first(index: CompactIndex) = index.runs.headOption.map { r =>
          in.run(r) match {
            case Right(lines) =>
              Some(lines.map(l => decodeLine(l, in.file.toString, -1).copy(batchId = r.batchId)))
            case Left(bytesDiffer) =>
              if (bytesDiffer) requireReplaced(id, indexOf(id), r)
              None
          }
        }
        try {
          (first(indexOfBlocks(id)(_.blocks.take(1))) match {
            case Some(None) => first(indexOf(id, rebuild = true)).flatten
            case other => other.flatten
          }).flatMap(_.headOption)
        } finally in.close()
      } else {
        val buf = mutable.ArrayBuffer.empty[SinkLogEntry]
        foreachEntryIn(id)(buf += _)
        buf.headOption
      }
    }.firstOption

  /**
   * Reads runs of compact file `compactId`, opening it at the first run read and keeping it open
   * (one open per file, not per run: a rewind reads hundreds of runs of one file).
   */
  final private class CompactReader(compactId: Long) {
    val file = batchIdToPath(compactId)
    private var opened: FSDataInputStream = _

    private def in: FSDataInputStream = {
      if (opened == null) {
        opened = LogFiles.open(
          reads,
          file,
          readWhy(compactId)
        )
        val first = new Array[Byte](LogFormat.Header.length)
        val n = opened.read(0L, first, 0, first.length)
        LogFiles.requireHeader(first, n, reads, file)
      }
      opened
    }

    /**
     * The lines of `run` if they match it: each line of the run's batch, `count` lines, and the
     * CRC32C of the run's bytes (read to its end whatever the lines hold). Else Left(true) if its
     * bytes do not match the CRC (or the file ends inside it), Left(false) if they do but the lines
     * do not match the run (an index written for another file). A tagged line's batch is read from
     * its tail; only other lines are decoded.
     */
    def run(run: IndexRun): Either[Boolean, scala.collection.Seq[String]] =
      try {
        in.seek(run.offset)
        val checked = new java.util.zip.CheckedInputStream(
          new CompactIndex.BoundedStream(in, run.length),
          Compat.crc32c()
        )
        val r = new BufferedReader(new InputStreamReader(checked, UTF_8), 1 << 16)
        var linesMatch = r.read() == '\n'
        val out = new mutable.ArrayBuffer[String](math.min(run.count, 1L << 16).toInt)
        var line = r.readLine()
        while (line != null) {
          if (linesMatch) {
            linesMatch =
              try batchOfLine(line, compactId, file.toString, -1) == run.batchId
              catch { case _: BatchLogException => false }
            out += line
          }
          line = r.readLine()
        }
        if (checked.getChecksum.getValue != run.crc) Left(true)
        else if (!linesMatch || out.length != run.count) Left(false)
        else Right(out)
      } catch {
        case _: java.io.EOFException => Left(true)
      }

    def close(): Unit = if (opened != null) opened.close()
  }

}

private[batchlog] object CompactIndexReads {

  /**
   * How long after a compact file was written its readers wait for its index before rebuilding it
   * by a scan: far more than a compaction takes to write an index (a few milliseconds at 100,000
   * batches, under a second at millions), far less than a scan of such a compact file.
   */
  val IndexGraceMs = 3000L

  /** What a reader waits for a fresh compact file's index beyond twice the previous one's delay. */
  val MinWaitMs = 200L

  private[log] val waits = new java.util.concurrent.atomic.AtomicLong()
}
