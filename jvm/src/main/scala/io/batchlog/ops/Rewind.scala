package io.batchlog.ops

import scala.collection.mutable

import org.apache.hadoop.fs.Path

import org.apache.spark.paths.SparkPath
import org.apache.spark.sql.SparkSession
import io.batchlog.shim.CheckpointFileManager

import io.batchlog.{BatchLogConf, BatchLogException}
import io.batchlog.checkpoint.{
  OffsetsEntry,
  QueryCheckpoint,
  StateFiles,
  StateMaintenance,
  StrayBatches
}
import io.batchlog.log.{
  BatchTaggedFileStreamSinkLog,
  DataFileNaming,
  JsonField,
  LogFormat,
  LogLayout,
  LogTruncation,
  RewindIntent,
  SinkMetrics,
  SinkRecord
}

/**
 * Rewinds a file sink and its query's checkpoint so that restarting the same query re-runs batch
 * `toBatch` with exactly the input range it had (exact replay), then continues.
 *
 * For the sink: every data file written by a batch >= N is deleted (in parallel), and the
 * batch-tagged log is cut back to batch N-1 ([[LogTruncation]]), after which the sink accepts batch
 * N again. For the checkpoint (facts in the project notes on checkpoint rewind): `offsets/` keeps N
 * (exact replay; but N-1, so that batch N is planned anew, for a query reading only `batchlog`
 * sources, for a hop of a cascade, and for a query whose file sources' batch N listed files of a
 * batchlog sink that are gone: its input changed upstream), `commits/` keeps N-1, each file
 * source's log under `sources/<i>/` is cut back to the log offset recorded in `offsets/N` (else its
 * files would never be read again), and every state store version above N is deleted (all of
 * `state/` for N = 0).
 *
 * Crash safety: an intent record ([[RewindIntent]]) is written first and removed last. The steps
 * are ordered so that re-planning from what is on disk finishes the job (data files are deleted
 * while the log still names them; the log is cut before the checkpoint; the file-source logs are
 * cut after `offsets/` and `commits/`, so that at every step a restarted query can still plan its
 * next batch and reaches the sink), and while the record exists the commit protocol refuses the
 * sink, so a query restarted on a half-rewound sink fails instead of silently skipping batches.
 *
 * Containment: the data files deleted are the logged ones of batches >= N, each inside the output
 * ([[SinkBoundary]]; a log naming one elsewhere stops the plan with FOREIGN_PATH), and the
 * batch-tagged files found by a walk of the output that follows no link; the checkpoint files
 * deleted are those listed below the checkpoint (again without following links).
 */
object Rewind {

  val Steps: Seq[String] = Seq(
    "intent",
    "fence",
    "data-files",
    "sink-log",
    "state",
    "commits",
    "offsets",
    "source-logs",
    "done"
  )

  /**
   * Plans a rewind, changing nothing. Refuses while a live writer holds the sink (unless `force`:
   * the writer is known to be dead) and when the checkpoint is not the sink owner's.
   */
  def plan(
      spark: SparkSession,
      sinkPath: String,
      checkpointPath: String,
      toBatch: Long,
      force: Boolean = false,
      replan: Boolean = false,
      inCascade: Boolean = false
  ): RewindPlan = BatchLogException.unchanged {
    val hadoopConf = spark.sessionState.newHadoopConf()
    val meta = BatchTaggedFileStreamSinkLog.metadataPathOf(spark, sinkPath)
    val sink = meta.getParent
    val cp = new QueryCheckpoint(spark, checkpointPath)
    refuseIfActive(spark, sink)
    val sinkFm = CheckpointFileManager.create(meta, hadoopConf)
    WriterFence.refuseLiveWriter(sinkFm, meta, force, BatchLogConf.fenceWaitMs(spark))
    val owners = WriterFence.requireOwner(sinkFm, meta, cp.root.toString, cp.queryId).toSeq
      .flatMap(_.owners)
    val ownerFrom = Horizon.ofOwner(owners, cp.queryId)
    val intent = RewindIntent.read(sinkFm, meta)
    intent.foreach { i =>
      // a hop of an unfinished cascade is finished by the cascade, which fixed its hops
      if (
        i.toBatch != toBatch || i.checkpoint != cp.root.toString || i.finishWith.isDefined != inCascade
      ) {
        throw BatchLogException.rewindInProgress(
          i.sink,
          i.toBatch,
          i.checkpoint,
          finishWith = i.finishWith
        )
      }
    }
    if (toBatch < 0) throw BatchLogException.invalidArgument("to_batch", toBatch, "it must be >= 0")
    val log = new BatchTaggedFileStreamSinkLog(spark, meta.toString)
    val sinkLatest = log.getLatestBatchId().getOrElse(-1L)
    if (toBatch > sinkLatest + 1) {
      throw BatchLogException.invalidArgument(
        "to_batch",
        toBatch,
        s"the sink's latest batch is $sinkLatest, so a rewind can go to batch ${sinkLatest + 1} at most"
      )
    }

    // The sink: data files of batches >= N, and how far back the tagged lineage reaches.
    val dataFiles = mutable.ArrayBuffer.empty[DataFileToDelete]
    val logged = mutable.HashSet.empty[String]
    val sinkHorizon = Horizon.ofSink(log)
    val sinkFs = sink.getFileSystem(hadoopConf)
    val boundary = new SinkBoundary(sinkFs, sink)
    val foreign = mutable.ArrayBuffer.empty[ForeignEntry]
    log.foreachLiveEntryWithin(toBatch, Long.MaxValue)(_.exists(_ >= toBatch)) { e =>
      val p = SparkPath.fromUrlString(e.path).toPath
      foreign ++= boundary.foreignEntry(e)
      dataFiles += DataFileToDelete(p, e.size, e.batchId.get, logged = true)
      logged += p.toUri.getPath
    }
    // Only files inside the output are deleted: a log naming one elsewhere stops the rewind.
    Verify.refuseForeign("Rewind", sink, foreign.toSeq)
    OutputFiles.foreachDataFile(sinkFs, sink) { f =>
      DataFileNaming.batchIdOf(f.getPath.getName).foreach { b =>
        if (b >= toBatch && !logged.contains(f.getPath.toUri.getPath)) {
          dataFiles += DataFileToDelete(f.getPath, f.getLen, b, logged = false)
        }
      }
    }

    // The checkpoint.
    val offsets = cp.offsetIds
    val commits = cp.commitIds
    val offsetsLatest = offsets.lastOption.getOrElse(-1L)
    val commitsLatest = commits.lastOption.getOrElse(-1L)
    // Spark plans batches in order: one planned above a gap is no progress of the query, but what
    // a fenced zombie planned on a rewound checkpoint (its next batch id, after the rewind removed
    // the ones between). The cut removes it with everything else above the target.
    val planned = StrayBatches.plannedLatest(offsets, sinkLatest)
    if (toBatch < ownerFrom) {
      val before = owners.init.lastOption.fold("another query")(o => s"query ${o.queryId}")
      throw BatchLogException.beyondHorizon(
        toBatch,
        ownerFrom,
        s"this checkpoint's query took the sink over at batch $ownerFrom: $before wrote the " +
          "batches below it, and this query's own batches up to there were skipped by the sink, " +
          "so its checkpoint cannot replay them"
      )
    }
    // A query that took the sink over and has not planned past the batches the sink skips for it
    // has nothing of its own to rewind: only the rewind to its first batch (a no-op) is left.
    val caughtUp = planned >= ownerFrom - 1
    if (intent.isEmpty && caughtUp && (sinkLatest > planned || sinkLatest < planned - 1)) {
      throw BatchLogException.unsupportedCheckpoint(
        cp.root.toString,
        s"it has planned batches up to $planned but the sink $sink has committed up to " +
          s"$sinkLatest: they are not the checkpoint and sink of one query"
      )
    }
    val checkpointHorizon = Horizon.ofCheckpoint(offsets, commits)
    if (toBatch < sinkHorizon || toBatch < checkpointHorizon) {
      val why =
        if (toBatch < sinkHorizon) {
          s"the sink's entries of batches below $sinkHorizon are untagged (written or compacted " +
            s"by plain Spark); run `python -m batchlog adopt $sink` to tag the ones that can be proven"
        } else {
          s"the checkpoint keeps offsets and commits from batch ${checkpointHorizon - 1} only " +
            s"(${BatchLogConf.MinBatchesToRetainKey} = " +
            s"${BatchLogConf.sinkLogSettings(spark).minBatchesToRetain}); raise " +
            s"${BatchLogConf.MinBatchesToRetainKey} to keep a longer rewind horizon"
        }
      throw BatchLogException.beyondHorizon(toBatch, math.max(sinkHorizon, checkpointHorizon), why)
    }
    def require(n: Long, has: Seq[Long], dir: String): Unit = if (!has.contains(n)) {
      throw BatchLogException.unsupportedCheckpoint(
        s"${cp.root}/$dir/$n",
        "it is missing inside the retained range (async progress tracking writes sparse logs)"
      )
    }
    if (toBatch > 0 && toBatch <= planned + 1) {
      require(toBatch - 1, offsets, "offsets"); require(toBatch - 1, commits, "commits")
    }
    val atN = if (toBatch <= planned) {
      require(toBatch, offsets, "offsets"); Some(cp.offsets(toBatch))
    } else None
    // Batch N planned anew (its input changed upstream): the file sources' logs keep the entries
    // batch N-1 had read, none for N = 0, so they list their directory again.
    val replanned = atN.exists { entry =>
      replan || entry.readsOnlyBatchLogSources ||
      inputRewound(cp, toBatch, entry, offsets, hadoopConf)
    }
    val CheckpointCuts(sourceLogs, stateFiles, removeStateDir) =
      checkpointCuts(spark, cp, toBatch, atN, replanned, offsets)

    RewindPlan(
      sink,
      meta,
      cp.root,
      toBatch,
      sinkLatest,
      offsetsLatest,
      commitsLatest,
      sinkHorizon,
      checkpointHorizon,
      dataFiles.toSeq,
      LogTruncation.planReadable(
        sinkFm,
        meta,
        toBatch - 1,
        log.interval,
        SinkRecord.read(sinkFm, meta).map(_.compactInterval)
          .getOrElse(BatchLogConf.sinkLogSettings(spark).compactInterval)
      ),
      sourceLogs,
      stateFiles,
      removeStateDir,
      commits.filter(_ >= toBatch).reverse,
      // exact replay keeps offsets/N; a query reading only batchlog sources, or one whose upstream
      // is rewound with it (a cascade), re-plans batch N from offsets/N-1: its input is new
      offsets.filter(b => b > toBatch || (b == toBatch && replanned)).reverse,
      resuming = intent.isDefined,
      queryId = cp.queryId,
      force = force
    )
  }

  /**
   * Carries out `plan`, step by step. A failure after the fence leaves the intent in place: its
   * error says to re-run the same rewind, which finishes the job.
   */
  def apply(spark: SparkSession, plan: RewindPlan, quiet: Boolean): RewindResult = {
    val run = new Run(spark, plan, quiet, None, identity)
    run.begin()
    val result = run.cut()
    run.done()
    result
  }

  /**
   * One rewind carried out in three parts, so that a cascade ([[Cascade]]) can fence every hop
   * before it deletes anything, and remove every hop's intent only at its end: [[begin]] (the
   * intent and the fence), [[cut]] (data files, logs, state, checkpoint) and [[done]] (the intent
   * removed). `finishWith`: the cascade's command, which finishes it after a failure (else the
   * rewind's own); `stepName`: the name a step has for the [[RewindStepListener]].
   */
  private[ops] class Run(
      spark: SparkSession,
      plan: RewindPlan,
      quiet: Boolean,
      finishWith: Option[String],
      stepName: String => String
  ) {
    private val again = finishWith.getOrElse(
      s"python -m batchlog rewind ${plan.sink} --checkpoint ${plan.checkpoint} --to-batch " +
        plan.toBatch
    )
    private val hadoopConf = spark.sessionState.newHadoopConf()
    private val sinkFm = CheckpointFileManager.create(plan.metadataPath, hadoopConf)
    private val cpFm = CheckpointFileManager.create(plan.checkpoint, hadoopConf)
    private val progress = new Progress(s"rewind to batch ${plan.toBatch}", quiet)
    private val listener = RewindStepListener.fromConf(spark)
    private val parallelism = BatchLogConf.deleteParallelism(spark)
    private val startNs = System.nanoTime()

    private def step(name: String)(body: => Unit): Unit = {
      try body
      catch {
        case e: BatchLogException =>
          throw e.withOutcome(
            s"The rewind of ${plan.sink} stopped in its step '$name' and is unfinished: the sink " +
              s"refuses writes until it is finished. Re-run `$again` to finish it."
          )
      }
      progress.note(s"rewind step '${stepName(name)}' done")
      listener.foreach(_.afterStep(stepName(name)))
    }

    /** The intent written, the writer fenced and the next log id claimed; nothing deleted. */
    def begin(): Unit = {
      step("intent") {
        RewindIntent.write(
          sinkFm,
          plan.metadataPath,
          RewindIntent(
            plan.toBatch,
            plan.sink.toString,
            plan.checkpoint.toString,
            System.currentTimeMillis(),
            finishWith
          )
        )
      }
      // The intent is down: a writer starting now is refused. One that is already past its checks
      // is caught here (its lease) or by the epoch bump (it re-reads the epoch before committing).
      step("fence") {
        try {
          WriterFence.refuseLiveWriter(
            sinkFm,
            plan.metadataPath,
            plan.force,
            BatchLogConf.fenceWaitMs(spark)
          )
          val log = new BatchTaggedFileStreamSinkLog(spark, plan.metadataPath.toString)
          val latest = log.getLatestBatchId().getOrElse(-1L)
          if (latest != plan.sinkLatest) {
            throw BatchLogException.sinkWrittenDuringRewind(
              plan.sink.toString,
              latest,
              plan.sinkLatest
            )
          }
        } catch {
          case e: BatchLogException =>
            if (!plan.resuming) RewindIntent.delete(sinkFm, plan.metadataPath)
            throw e.withOutcome(
              if (finishWith.isEmpty) BatchLogException.NothingChanged
              else {
                s"Nothing was changed in ${plan.sink}, but the pipeline rewind it is part of " +
                  "is unfinished (the hops before it are fenced, nothing is deleted): stop its " +
                  s"writer, then re-run `$again` to finish it."
              }
            )
        }
        if (!plan.isNoop) {
          WriterFence.bumpEpoch(sinkFm, plan.metadataPath) {
            case Some(r) => r.rewoundTo(plan.toBatch, plan.queryId, System.currentTimeMillis())
            case None =>
              val log = new BatchTaggedFileStreamSinkLog(spark, plan.metadataPath.toString)
              SinkRecord.first(plan.queryId, 0L, log.interval, System.currentTimeMillis())
          }
          // A writer checks for a rewind at its run's first batch and re-reads the epoch before each
          // commit: one whose lease had expired (stalled, or declared dead with `force`) may have
          // committed a batch between the checks above and the bump. It stops at its next batch (the
          // epoch moved); the rewind must not go on with a plan that misses that batch.
          // Then the store arbitrates: the next log id is claimed, create-once. A writer that passed
          // its checks before the bump and publishes that id now is refused; one that published it
          // first makes the claim fail, and the rewind stops before it changed anything.
          val log = new BatchTaggedFileStreamSinkLog(spark, plan.metadataPath.toString)
          val latest = log.getLatestBatchId().getOrElse(-1L)
          if (latest != plan.sinkLatest || !log.claimNext(plan.sinkLatest + 1)) {
            if (!plan.resuming) RewindIntent.delete(sinkFm, plan.metadataPath)
            throw BatchLogException.sinkWrittenDuringRewind(
              plan.sink.toString,
              math.max(latest, plan.sinkLatest + 1),
              plan.sinkLatest
            ).withOutcome(
              "Nothing was deleted; the sink's record has a new epoch, so its writer stops at " +
                "its next batch."
            )
          }
        }
      }
    }

    /** Data files, sink log, state, commits, offsets and source logs cut; the intent kept. */
    def cut(): RewindResult = {
      var deleted = 0L
      val dataFilesStartNs = System.nanoTime()
      step("data-files") {
        deleted = ParallelDelete(
          plan.dataFiles.map(_.path),
          hadoopConf,
          parallelism,
          new Progress("rewind: deleting data files", quiet)
        )
      }
      val dataFilesMs = (System.nanoTime() - dataFilesStartNs) / 1000000
      step("sink-log") {
        val src = plan.sinkLog.rebuildFrom.getOrElse(-1L)
        val log = new BatchTaggedFileStreamSinkLog(spark, plan.metadataPath.toString)
        // The planned cut, on the log files present now: the claimed id goes too, and anything a
        // writer published above the target since the plan (newest first, as planned).
        val t = plan.sinkLog
        val cut = LogTruncation.plan(sinkFm, plan.metadataPath, t.keepUpTo, t.interval)
        LogTruncation.apply(sinkFm, cut)(line => log.batchOf(LogFormat.decode(line), src))
      }
      // State, commits and offsets are listed again now that the writer is fenced: files a stalled
      // writer added above the target after the plan's listing go too.
      Rewind.cutCheckpoint(
        spark,
        plan.checkpoint,
        plan.toBatch,
        CheckpointCuts(plan.sourceLogs, plan.stateFiles, plan.removeStateDir),
        plan.commitsToDelete,
        plan.offsetsToDelete,
        progress,
        quiet
      )(name => body => step(name)(body))
      val ms = (System.nanoTime() - startNs) / 1000000
      RewindResult(plan.toBatch, deleted, plan.dataFiles.map(_.size).sum, ms, dataFilesMs)
    }

    /** The intent removed: the sink takes writes again. */
    def done(): Unit = {
      step("done")(RewindIntent.delete(sinkFm, plan.metadataPath))
      SinkMetrics.of(plan.metadataPath).rewound()
    }
  }

  /**
   * What a rewind of the checkpoint `cp` to `toBatch` cuts besides `offsets/` and `commits/`: each
   * file source's log (to the log offset of `offsets/N`, or of `offsets/N-1` when batch N is
   * `replanned`), the state store versions above N (all of `state/` for N = 0). `atN`: `offsets/N`,
   * if the query planned N; `offsets`: the retained offset ids.
   */
  private[ops] def checkpointCuts(
      spark: SparkSession,
      cp: QueryCheckpoint,
      toBatch: Long,
      atN: Option[OffsetsEntry],
      replanned: Boolean,
      offsets: Seq[Long]
  ): CheckpointCuts = {
    lazy val before =
      if (toBatch > 0 && offsets.contains(toBatch - 1)) Some(cp.offsets(toBatch - 1)) else None
    // Without `offsets/N` (never planned, or deleted by a re-planning rewind a crash interrupted:
    // its source logs may be uncut) the logs are cut to what batch N-1 had read, which is what
    // Spark would plan from: a log entry above it would hide its files from the source for good.
    val anew = replanned || atN.isEmpty
    val cutAt: Option[Int => Option[Long]] = atN match {
      case Some(entry) if !replanned => Some(entry.fileSourceLogOffset(_))
      case Some(_) if toBatch == 0 => Some(_ => Some(-1L))
      case None if toBatch == 0 => None // no batch planned: a source's log holds its start only
      case Some(entry) =>
        Some(i =>
          before.flatMap(_.fileSourceLogOffset(i)).orElse(entry.fileSourceLogOffset(i).map(_ =>
            -1L
          ))
        )
      case None => before.map(b => (i: Int) => b.fileSourceLogOffset(i))
    }

    val sourceLogs = cutAt.toSeq.flatMap { offsetOf =>
      cp.sourceIndexes.flatMap { i =>
        val dir = cp.sourceDir(i)
        offsetOf(i) match {
          case Some(k) =>
            val default = spark.sessionState.conf.fileSourceLogCompactInterval
            val interval = LogLayout.intervalOf(cp.fm, dir, default)._2.getOrElse(default)
            Some(i -> LogTruncation.planReadable(cp.fm, dir, k, interval, default))
              .filterNot(_._2.isNoop)
          case None if anew || LogLayout.listIds(cp.fm, dir).forall(_ == 0L) =>
            None // initial offsets only
          case None =>
            throw BatchLogException.unsupportedCheckpoint(
              dir.toString,
              "its source log is of a kind batchlog cannot cut back"
            )
        }
      }
    }
    val provider =
      atN.orElse(offsets.lastOption.map(cp.offsets)).flatMap(_.conf.get(StateFiles.ProviderConfKey))
    val removeStateDir = toBatch == 0 && cp.fs.exists(cp.stateDir)
    val stateFiles =
      if (toBatch == 0) Nil
      else StateFiles.toDelete(cp, toBatch, provider).map(f => f.getPath -> f.getLen)
    CheckpointCuts(sourceLogs, stateFiles, removeStateDir)
  }

  /**
   * The checkpoint's part of a rewind carried out, each part a step of `step` (the listener's
   * names: `state`, `commits`, `offsets`, `source-logs`): state versions above N (after the stopped
   * query's state store maintenance has settled), `commits/` from N, `offsets/` above N (from N if
   * in `offsetsToDelete`), then the file sources' logs. What a writer or a crash added above the
   * target since the plan is listed again and goes too.
   */
  private[ops] def cutCheckpoint(
      spark: SparkSession,
      checkpoint: Path,
      toBatch: Long,
      cuts: CheckpointCuts,
      commitsToDelete: Seq[Long],
      offsetsToDelete: Seq[Long],
      progress: Progress,
      quiet: Boolean
  )(step: String => (=> Unit) => Unit): Unit = {
    val CheckpointCuts(sourceLogs, stateFiles, removeStateDir) = cuts
    val hadoopConf = spark.sessionState.newHadoopConf()
    val cpFm = CheckpointFileManager.create(checkpoint, hadoopConf)
    val parallelism = BatchLogConf.deleteParallelism(spark)
    val cp = new QueryCheckpoint(spark, checkpoint.toString)
    step("state") {
      StateMaintenance.awaitSettled(spark, cp) { ms =>
        progress.note(
          f"rewind: waiting ${ms / 1000.0}%.1f s for the state store maintenance the stopped " +
            s"query still owes its checkpoint (${StateMaintenance.IntervalKey} after its newest " +
            "state file): a snapshot it writes later would bring back state above the target"
        )
      }
      if (removeStateDir || (toBatch == 0 && cp.fs.exists(cp.stateDir))) {
        cpFm.delete(new Path(checkpoint, "state"))
      } else ParallelDelete(
        (stateFiles.map(_._1) ++ StateFiles.toDelete(cp, toBatch, None).map(_.getPath)).distinct,
        hadoopConf,
        parallelism,
        new Progress("rewind: deleting state files", quiet)
      )
    }
    def newestFirst(planned: Seq[Long], now: Seq[Long]) = (planned ++ now).distinct.sorted.reverse
    // Each log cut also removes the checksum files a hand deletion above the cut left behind
    // (`QueryCheckpoint.removeStrayChecksums`): with one, Spark could not write that batch again.
    step("commits") {
      newestFirst(commitsToDelete, cp.commitIds.filter(_ >= toBatch))
        .foreach(n => cpFm.delete(cp.commitFile(n)))
      cp.removeStrayChecksums(cp.commitsDir, toBatch - 1)
    }
    val keepOffset = if (offsetsToDelete.contains(toBatch)) toBatch - 1 else toBatch
    step("offsets") {
      newestFirst(offsetsToDelete, cp.offsetIds.filter(_ > keepOffset))
        .foreach(n => cpFm.delete(cp.offsetsFile(n)))
      cp.removeStrayChecksums(cp.offsetsDir, keepOffset)
    }
    // Source logs last: until offsets/ and commits/ are cut back, they name log offsets above
    // the cut, and a query restarted after a crash in between would fail inside the source
    // ("batch N doesn't exist") -- or log files anew -- instead of reaching the sink's refusal.
    step("source-logs") {
      sourceLogs.foreach { case (_, t) =>
        LogTruncation.apply(cpFm, t)(JsonField.long(_, "batchId"))
        cp.removeStrayChecksums(t.dir, t.keepUpTo)
      }
    }
  }

  /**
   * True if a file source of batch `n` (`atN`, its `offsets/N`) listed a batch-tagged file, one a
   * batchlog sink wrote, that is gone: that sink was rewound (or vacuumed) under this query, so
   * batch `n` cannot run again as it was planned. It is re-planned, instead of counting on Spark to
   * skip the missing files without a word.
   */
  private def inputRewound(
      cp: QueryCheckpoint,
      n: Long,
      atN: OffsetsEntry,
      offsets: Seq[Long],
      hadoopConf: org.apache.hadoop.conf.Configuration
  ): Boolean = {
    lazy val before = if (n > 0 && offsets.contains(n - 1)) Some(cp.offsets(n - 1)) else None
    cp.sourceIndexes.exists { i =>
      atN.fileSourceLogOffset(i).exists { k =>
        val from = before.flatMap(_.fileSourceLogOffset(i)).getOrElse(-1L)
        val read = mutable.ArrayBuffer.empty[Path]
        cp.foreachSourceFile(i) { (logged, offset) =>
          val p = SparkPath.fromUrlString(logged).toPath
          if (offset > from && offset <= k && DataFileNaming.batchIdOf(p.getName).isDefined) {
            read += p
          }
        }
        read.exists(p => !p.getFileSystem(hadoopConf).exists(p))
      }
    }
  }

  private def refuseIfActive(spark: SparkSession, sink: Path): Unit = {
    val FileSink = "FileSink\\[(.*)\\]".r
    spark.streams.active.foreach { q =>
      Option(q.lastProgress).map(_.sink.description).foreach {
        case FileSink(p) =>
          val qp = new Path(p)
          if (qp.getFileSystem(spark.sessionState.newHadoopConf()).makeQualified(qp) == sink) {
            throw BatchLogException.queryActive(sink.toString)
          }
        case _ =>
      }
    }
  }
}
