package io.batchlog.ops

/*
 * The values batchlog's operations return: plans (what an operation will do, computed before it
 * changes anything: what a dry run prints) and reports (what it did). Immutable case classes of
 * strings, numbers, options and sequences only, so that Scala, Java and -- through the one
 * serializer, `io.batchlog.api.ReportJson` -- Python read the same thing. Their field names are the
 * JSON keys; Python's `batchlog.reports` holds the same classes as dataclasses.
 *
 * Lists of paths are capped at `ListLimit` entries; the counts beside them are always complete.
 */

/** Files and bytes one batch wrote. */
final case class BatchFiles(batchId: Long, files: Long, bytes: Long)

/**
 * A query that reads the sink (`io.batchlog.log.SinkReaders`): its id, checkpoint, the index of its
 * source that reads the sink, `kind` (`batchlog` or `file`), its own file sink if any, when it was
 * first and last registered, and whether it has gone unseen longer than
 * `spark.batchlog.readers.staleAfter`.
 */
final case class SinkReaderInfo(
    queryId: String,
    checkpoint: String,
    sourceIndex: Int,
    kind: String,
    sink: Option[String],
    sinceMs: Long,
    seenMs: Long,
    stale: Boolean
)

/** A logged data file: its path as logged (a URI), size and batch (None when untagged). */
final case class LoggedFile(path: String, size: Long, batchId: Option[Long])

/** A data file in the output directory that the log does not list. */
final case class OrphanFile(path: String, size: Long, batchId: Option[Long], modificationTime: Long)

/**
 * A multipart upload open under the sink's log directories (a killed compaction's, on S3): in no
 * listing, its parts billed until it is aborted ([[io.batchlog.log.OpenUploads]]).
 */
final case class OpenUpload(path: String, uploadId: String, initiatedTime: Long)

object OpenUpload {
  def apply(o: io.batchlog.log.OpenUploads.Open): OpenUpload =
    OpenUpload(o.path.toString, o.uploadId, o.initiated)
}

/** A logged file whose size on disk is not the logged one. */
final case class SizeMismatch(path: String, size: Long, batchId: Option[Long], actualSize: Long)

/**
 * A logged file that is not inside the output directory ([[SinkBoundary]]): `reason` says why
 * (outside, another file system, through a link, a link). Nothing acts on it.
 */
final case class ForeignEntry(path: String, size: Long, batchId: Option[Long], reason: String)

/** A logged file whose batch-tagged name names another batch than its entry. */
final case class WrongBatch(path: String, size: Long, batchId: Option[Long], nameBatchId: Long)

/** An index file beside a live compact file that is not used, and why. */
final case class IndexProblem(file: String, compactId: Long, problem: String)

/**
 * A run of a compact file (the lines of one batch, `None`: untagged) whose bytes do not match the
 * CRC32C its proved index records: damage (see [[Verify]]); `entries` is the run's line count.
 */
final case class DamagedRun(
    file: String,
    compactId: Long,
    batchId: Option[Long],
    offset: Long,
    length: Long,
    entries: Long
)

/**
 * A damaged run a repair restores (or, in a dry run, would restore): the entries of its batch, from
 * `source` (a batch file, or the data files named with the batch).
 */
final case class RestoredRun(file: String, batchId: Long, entries: Long, source: String)

/** How a compactible log directory is cut back: log files rebuilt and deleted, by name. */
final case class LogCut(dir: String, keepUpTo: Long, rebuild: Seq[String], delete: Seq[String])

/** The cut of file source `source`'s log (`sources/<source>/`). */
final case class SourceLogCut(
    dir: String,
    keepUpTo: Long,
    rebuild: Seq[String],
    delete: Seq[String],
    source: Int
)

/** A log file a repair writes: its name, entries and the batches they come from. */
final case class RepairLogFile(name: String, entries: Long, batches: Long)

object Reports {

  /** At most this many paths of each kind are listed in a report (counts are always complete). */
  val ListLimit = 1000
}

/**
 * `inspect`: a sink's compaction state, log files, per-batch totals and rewind horizon, its
 * readers, the writer's lease, and its retention watermark (`retainedFrom`: the oldest batch the
 * sink's log retention has not dropped entries of; 0 if it dropped none).
 */
final case class SinkSummary(
    outputPath: String,
    metadataPath: String,
    latestBatch: Long,
    compactInterval: Int,
    latestCompact: Option[String],
    nextCompactionBatch: Long,
    logFiles: Long,
    logBytes: Long,
    untaggedFiles: Long,
    untaggedBytes: Long,
    batches: Seq[BatchFiles],
    horizon: HorizonReport,
    logPublish: String,
    compaction: String,
    readers: Seq[SinkReaderInfo],
    lease: Option[LeaseHolder],
    retainedFrom: Long
)

/**
 * The writer's lease as `inspect` read it, once (`io.batchlog.log.WriterLease`): the query, run and
 * driver that hold it, the batch it was at and when it last refreshed it, by the writer's own
 * clock. A single read cannot tell a live writer from a killed one whose lease is not yet judged
 * dead (that takes watching it unchanged for `timeoutMs`); absent when no query writes the sink.
 */
final case class LeaseHolder(
    queryId: String,
    runId: String,
    host: String,
    pid: Long,
    batchId: Long,
    refreshedAtMs: Long,
    timeoutMs: Long
)

/**
 * The rewind horizon: the oldest batch a rewind can reach, the latest of the sink's tagged lineage
 * and (given the query's checkpoint) what the checkpoint retains and the batch from which the
 * checkpoint's query owns the sink (after a takeover); and who owns the sink. Given a checkpoint
 * and an owner on record: how many of the checkpoint's committed batches the sink has from another
 * writer (Spark's sink skipped them: their rows are not in it), the first and last.
 */
final case class HorizonReport(
    sinkHorizon: Long,
    checkpointHorizon: Option[Long],
    horizon: Long,
    minBatchesToRetain: Int,
    owner: Option[String],
    ownerSince: Option[Long],
    checkpointQueryId: Option[String],
    checkpointSkippedBatches: Option[Long],
    checkpointSkippedFirst: Option[Long],
    checkpointSkippedLast: Option[Long]
)

/** What a rewind to `toBatch` will do; see [[Rewind]]. */
final case class RewindPlanSummary(
    sink: String,
    checkpoint: String,
    toBatch: Long,
    sinkLatestBatch: Long,
    offsetsLatest: Long,
    commitsLatest: Long,
    horizon: Long,
    sinkHorizon: Long,
    checkpointHorizon: Long,
    resuming: Boolean,
    queryId: String,
    force: Boolean,
    affectedBatches: Seq[Long],
    dataFiles: Long,
    dataBytes: Long,
    orphanFiles: Long,
    dataFilesPerBatch: Seq[BatchFiles],
    sinkLog: LogCut,
    sourceLogs: Seq[SourceLogCut],
    stateFiles: Seq[String],
    stateBytes: Long,
    removeStateDir: Boolean,
    commitsToDelete: Seq[Long],
    offsetsToDelete: Seq[Long]
)

/**
 * What a rewind did: `elapsedMs` for all of it, `dataFilesMs` of that for deleting the data files
 * (in parallel; the rest is the log and checkpoint work, which grows with the batches rewound).
 */
final case class RewindResult(
    toBatch: Long,
    dataFilesDeleted: Long,
    dataBytes: Long,
    elapsedMs: Long,
    dataFilesMs: Long
)

/** A rewind's plan and, unless it was a dry run, its result. */
final case class RewindReport(plan: RewindPlanSummary, result: Option[RewindResult])

/**
 * One hop of a cascade rewind ([[Cascade]]): the query of `checkpoint` (writing `sink`, if a file
 * sink) goes back to `toBatch`, because its source `sourceIndex` (`kind`: `batchlog`, `file`, or
 * `root` for the sink the cascade starts from) read batch `upstreamFrom` or later of `upstream`.
 * `plan`: its own rewind's plan (None for a query writing no file sink: its batches
 * `toBatch..lastBatch` run again when it restarts, its checkpoint is not changed).
 */
final case class CascadeHopSummary(
    depth: Int,
    upstream: Option[String],
    upstreamFrom: Long,
    sourceIndex: Int,
    kind: String,
    registered: Boolean,
    sink: Option[String],
    checkpoint: String,
    toBatch: Long,
    lastBatch: Long,
    plan: Option[RewindPlanSummary],
    checkpointRewind: Option[CheckpointRewindSummary]
)

/**
 * The rewind of a cascade's hop that writes no file sink: its checkpoint only, batch `toBatch`
 * planned anew (`offsetsToDelete` from it on), its file sources' logs and its state cut back.
 */
final case class CheckpointRewindSummary(
    checkpoint: String,
    toBatch: Long,
    offsetsToDelete: Seq[Long],
    commitsToDelete: Seq[Long],
    sourceLogs: Seq[SourceLogCut],
    stateFiles: Seq[String],
    stateBytes: Long,
    removeStateDir: Boolean
)

/** A reader of a rewound sink the cascade leaves as it is, and why. */
final case class CascadeUnaffectedReader(checkpoint: String, upstream: String, why: String)

/** What a cascade rewind will do; `command` runs it again (and finishes it after a crash). */
final case class CascadePlanSummary(
    sink: String,
    checkpoint: String,
    toBatch: Long,
    resuming: Boolean,
    hops: Seq[CascadeHopSummary],
    unaffected: Seq[CascadeUnaffectedReader],
    command: String
)

/** A cascade's plan and, unless it was a dry run, each hop's result (None: a listed hop). */
final case class CascadeReport(
    plan: CascadePlanSummary,
    results: Option[Seq[Option[RewindResult]]],
    elapsedMs: Long
)

/** A takeover's plan and whether it was carried out; see [[Takeover]]. */
final case class TakeoverReport(
    sink: String,
    checkpoint: String,
    queryId: String,
    previousOwner: Option[String],
    previousOwnerSince: Option[Long],
    sinkLatestBatch: Long,
    fromBatch: Long,
    checkpointNextBatch: Long,
    skippedBatches: Long,
    alreadyOwner: Boolean,
    dryRun: Boolean,
    done: Boolean
)

/** What adopt tagged (or, in a dry run, would tag); see [[Adopt]]. */
final case class AdoptReport(
    sink: String,
    dryRun: Boolean,
    compactFiles: Long,
    compactFilesRewritten: Long,
    entriesTagged: Long,
    entriesUntagged: Long,
    untaggedHorizon: Long
)

/** A sink's log checked against its output directory; see [[Verify]]. */
final case class VerifyReport(
    sink: String,
    metadataPath: String,
    healthy: Boolean,
    latestBatch: Long,
    compactInterval: Int,
    liveFiles: Long,
    liveBytes: Long,
    untaggedEntries: Long,
    logErrors: Seq[String],
    indexProblems: Seq[IndexProblem],
    indexAdvice: Option[String],
    indexesRebuiltInMemory: Int,
    damagedRuns: Seq[DamagedRun],
    missingCount: Long,
    missing: Seq[LoggedFile],
    sizeMismatchCount: Long,
    sizeMismatch: Seq[SizeMismatch],
    wrongBatchCount: Long,
    wrongBatch: Seq[WrongBatch],
    orphanCount: Long,
    orphanBytes: Long,
    orphans: Seq[OrphanFile],
    foreignCount: Long,
    foreign: Seq[ForeignEntry],
    links: Seq[String],
    checkpointsInOutput: Seq[String],
    otherFileCount: Long,
    openUploads: Seq[OpenUpload]
)

/**
 * A repair's plan and outcome; see [[Repair]]. `written` tells whether a new log was written,
 * `movedAside` where the damaged one went, `indexesRewritten` the indexes an index-only repair
 * rewrote, `runsRestored` the damaged runs of compact files restored (in a dry run: that would be)
 * and where from.
 */
final case class RepairReport(
    sink: String,
    metadataPath: String,
    logExists: Boolean,
    logHealthy: Boolean,
    logProblems: Seq[String],
    needed: Boolean,
    compactInterval: Int,
    compactIntervalSource: String,
    compactIntervalAssumed: Boolean,
    owner: Option[String],
    rewindInProgress: Option[Long],
    latestBatch: Long,
    dataFiles: Long,
    dataBytes: Long,
    logFiles: Seq[RepairLogFile],
    batches: Seq[BatchFiles],
    untaggedCount: Long,
    untagged: Seq[String],
    suspectBatches: Seq[Long],
    indexProblems: Seq[IndexProblem],
    indexesOnly: Boolean,
    dryRun: Boolean,
    written: Boolean,
    movedAside: Option[String],
    indexesRewritten: Seq[String],
    damagedRuns: Seq[DamagedRun],
    runsOnly: Boolean,
    runsRestored: Seq[RestoredRun]
)

/** What vacuum deleted (or, in a dry run, would delete) and what it kept; see [[Vacuum]]. */
final case class VacuumReport(
    sink: String,
    dryRun: Boolean,
    latestBatch: Long,
    olderThanMs: Long,
    cutoffTime: Long,
    liveFiles: Long,
    orphanFiles: Long,
    orphanBytes: Long,
    candidateFiles: Long,
    candidateBytes: Long,
    deletedFiles: Long,
    skippedRecentFiles: Long,
    skippedRecentBytes: Long,
    writerLive: Boolean,
    skippedRunningFiles: Long,
    skippedRunningBytes: Long,
    candidates: Seq[OrphanFile],
    skippedRunning: Seq[String],
    skippedRecent: Seq[String],
    skippedLinks: Seq[String],
    otherFileCount: Long,
    uploadsToAbort: Seq[OpenUpload],
    recentUploads: Long,
    abortedUploads: Long
)

/**
 * A batch in a sink's history: the live files it wrote, their bytes, the newest one's time, and
 * what its commit recorded ([[io.batchlog.log.BatchCommit]]): its rows, how long its write took,
 * the query and the run that wrote it. Each of those is None where the commit did not record it (a
 * batch committed before batchlog recorded it); `history(withRows = true)` then counts the rows
 * from the data.
 */
final case class SinkBatch(
    batchId: Long,
    files: Long,
    bytes: Long,
    timeMs: Long,
    rows: Option[Long],
    durationMs: Option[Long],
    queryId: Option[String],
    runId: Option[String]
)

/** A compaction in a sink's history: its live compact file, the file's size and time. */
final case class SinkCompaction(batchId: Long, file: String, bytes: Long, timeMs: Long)

/**
 * A maintenance operation in a sink's history: who ran it (the Hadoop user, the host, the Spark
 * application), when it ended and how long it took, what it was asked, its outcome (`done`, or
 * `failed: <code>`) and what it changed, counted.
 */
final case class SinkOperation(
    operation: String,
    timeMs: Long,
    durationMs: Long,
    user: String,
    host: String,
    applicationId: String,
    batchlogVersion: String,
    arguments: Map[String, String],
    outcome: String,
    changed: Map[String, Long]
)

/**
 * `history`: a sink's live batches (`untaggedFiles`: live files no batch is proven for), its live
 * compactions and the operations run on it within `operationsRetentionMs`, each oldest first; see
 * [[History]].
 */
final case class SinkHistory(
    sink: String,
    latestBatch: Long,
    untaggedFiles: Long,
    batches: Seq[SinkBatch],
    compactions: Seq[SinkCompaction],
    operations: Seq[SinkOperation],
    operationsRetentionMs: Long
)
