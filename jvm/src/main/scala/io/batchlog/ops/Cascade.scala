package io.batchlog.ops

import scala.collection.mutable
import scala.util.control.NonFatal

import org.apache.hadoop.fs.Path

import org.apache.spark.sql.SparkSession
import io.batchlog.shim.CheckpointFileManager

import io.batchlog.{BatchLogConf, BatchLogException}
import io.batchlog.checkpoint.{BatchLogOffset, QueryCheckpoint}
import io.batchlog.log.{
  BatchTaggedFileStreamSinkLog,
  CascadeHopTarget,
  CascadeIntent,
  RewindIntent,
  SinkReaders
}

/**
 * A downstream query named by hand (`--downstream <sink>=<checkpoint>`): one that never registered
 * with the sink it reads (it started in a session without batchlog's jar, or before this version).
 * `sink` is empty for a query that writes no file sink (`=<checkpoint>`).
 */
final case class Downstream(sink: Option[String], checkpoint: String)

object Downstream {

  /** `<sink>=<checkpoint>`, or `=<checkpoint>`; anything else names the argument and its form. */
  def parse(arg: String): Downstream = arg.split("=", 2) match {
    case Array(s, c) if c.trim.nonEmpty =>
      Downstream(Some(s.trim).filter(_.nonEmpty), c.trim)
    case _ =>
      throw BatchLogException.invalidArgument(
        "downstream",
        arg,
        "write it as <its sink>=<its checkpoint> (or =<its checkpoint> for a query that writes " +
          "no file sink)"
      )
  }
}

/**
 * A hop of a cascade: its target (who, to which batch, why) and its own rewind plan, or, for a
 * query that writes no file sink, its checkpoint's rewind (`lastBatch`: the latest batch it
 * planned, so batches `toBatch..lastBatch` run again when it restarts).
 */
final case class CascadeHop(
    target: CascadeHopTarget,
    plan: Option[RewindPlan],
    checkpointOnly: Option[CheckpointRewindPlan],
    lastBatch: Long
)

/**
 * The rewind of a hop that writes no file sink (`foreachBatch`, Kafka, a table): its checkpoint
 * only, batch `toBatch` planned anew from `offsets/N-1` (its upstream's batches are new), so its
 * batches from `toBatch` run again, and what they wrote outside batchlog is written again (a
 * `foreachBatch` that writes idempotently by batch id must not skip them). No writer lease guards
 * such a query: stop it first. Its sources refuse to read a sink a cascade has not finished.
 * `cuts`: its file sources' logs and state ([[Rewind.checkpointCuts]]).
 */
final case class CheckpointRewindPlan(
    checkpoint: Path,
    toBatch: Long,
    cuts: CheckpointCuts,
    commitsToDelete: Seq[Long],
    offsetsToDelete: Seq[Long]
) {
  def summary: CheckpointRewindSummary = CheckpointRewindSummary(
    checkpoint.toString,
    toBatch,
    offsetsToDelete,
    commitsToDelete,
    RewindPlan.sourceLogCuts(cuts.sourceLogs),
    cuts.stateFiles.map(_._1.toString),
    cuts.stateFiles.map(_._2).sum,
    cuts.removeStateDir
  )

  /** Cuts the checkpoint back, each part a step of `step` ([[Rewind.cutCheckpoint]]). */
  def apply(spark: SparkSession, progress: Progress, quiet: Boolean)(
      step: String => (=> Unit) => Unit
  ): RewindResult = {
    val start = System.nanoTime()
    Rewind.cutCheckpoint(
      spark,
      checkpoint,
      toBatch,
      cuts,
      commitsToDelete,
      offsetsToDelete,
      progress,
      quiet
    )(step)
    RewindResult(toBatch, 0L, 0L, (System.nanoTime() - start) / 1000000, 0L)
  }
}

object CheckpointRewindPlan {

  /** Plans the rewind of the checkpoint `checkpoint` to `toBatch`, changing nothing. */
  def of(spark: SparkSession, checkpoint: String, toBatch: Long): CheckpointRewindPlan = {
    val cp = new QueryCheckpoint(spark, checkpoint)
    val offsets = cp.offsetIds
    val commits = cp.commitIds
    val horizon = Horizon.ofCheckpoint(offsets, commits)
    if (toBatch < horizon) {
      throw BatchLogException.beyondHorizon(
        toBatch,
        horizon,
        s"the checkpoint ${cp.root} keeps offsets and commits from batch ${horizon - 1} only " +
          s"(${BatchLogConf.MinBatchesToRetainKey})"
      )
    }
    val atN = if (offsets.contains(toBatch)) Some(cp.offsets(toBatch)) else None
    CheckpointRewindPlan(
      cp.root,
      toBatch,
      Rewind.checkpointCuts(spark, cp, toBatch, atN, replanned = true, offsets),
      commits.filter(_ >= toBatch).reverse,
      offsets.filter(_ >= toBatch).reverse
    )
  }
}

/** A reader of a rewound sink that the cascade leaves as it is, and why. */
final case class CascadeUnaffected(checkpoint: String, upstream: String, why: String)

/**
 * What a cascade will do: one hop per query, the sink it starts from first, then its readers and
 * theirs, level by level; `resuming` when it finishes an unfinished cascade (its hops fixed by the
 * cascade's intent).
 */
final case class CascadePlan(
    sink: Path,
    checkpoint: Path,
    toBatch: Long,
    hops: Seq[CascadeHop],
    unaffected: Seq[CascadeUnaffected],
    resuming: Boolean,
    command: String
) {
  def root: RewindPlan = hops.head.plan.get

  def summary: CascadePlanSummary = CascadePlanSummary(
    sink.toString,
    checkpoint.toString,
    toBatch,
    resuming,
    hops.map { h =>
      val t = h.target
      CascadeHopSummary(
        t.depth,
        t.upstream,
        t.upstreamFrom,
        t.sourceIndex,
        t.kind,
        t.registered,
        t.sink,
        t.checkpoint,
        t.toBatch,
        h.lastBatch,
        h.plan.map(_.summary),
        h.checkpointOnly.map(_.summary)
      )
    },
    unaffected.map(u => CascadeUnaffectedReader(u.checkpoint, u.upstream, u.why)),
    command
  )
}

/**
 * Rewinds a pipeline: the sink `sink` and its query, and every query downstream of it, each to its
 * first batch that read a rewound batch of the sink it reads, transitively.
 *
 * The downstream are the sink's registered readers ([[SinkReaders]], written by each reading query
 * as it starts) and the queries named by hand ([[Downstream]]). A reader through the `batchlog`
 * source records in its `offsets/N` the upstream batch it read up to ([[BatchLogOffset]]); one
 * through Spark's file source logs the files each batch read under `sources/<i>/`, and their
 * batch-tagged names say which upstream batch wrote them. Each hop's rewind re-plans its first
 * batch (its input changed upstream): the file source's log is cut to what the batch before had
 * read, so the source lists the upstream's files again and reads the replayed ones exactly once,
 * never the deleted ones.
 *
 * Safety across hops: every hop is planned first (a live writer anywhere refuses the whole cascade,
 * naming the hop), then one intent for the pipeline is written ([[CascadeIntent]]), then every
 * hop's rewind intent and fence, before anything is deleted; then each hop is cut; then the
 * cascade's intent goes, and last the hops' intents, deepest first, so that a query upstream never
 * takes writes while one below it is unfinished. Each hop's intent names the cascade's command:
 * until it is removed, the hop's query is refused at its start and its sink refuses commits. A
 * crash at any step is finished by running the same command again.
 */
object Cascade {

  val Kind = "root"

  /** The cascade's own steps; a hop's rewind steps are named `<hop>:<step>` ([[Rewind.Steps]]). */
  val Steps: Seq[String] = Seq("cascade-intent", "cascade-done")

  private val HopStep = "([0-9]+):(.+)".r

  /** True for the name of a step of a cascade. */
  def isStep(name: String): Boolean = Steps.contains(name) || (name match {
    case HopStep(_, step) => Rewind.Steps.contains(step)
    case _ => false
  })

  def plan(
      spark: SparkSession,
      sinkPath: String,
      checkpointPath: String,
      toBatch: Long,
      downstream: Seq[Downstream],
      force: Boolean
  ): CascadePlan = BatchLogException.unchanged {
    val hadoopConf = spark.sessionState.newHadoopConf()
    val meta = BatchTaggedFileStreamSinkLog.metadataPathOf(spark, sinkPath)
    val fm = CheckpointFileManager.create(meta, hadoopConf)
    val rootCp = new QueryCheckpoint(spark, checkpointPath)
    val command = commandOf(meta.getParent.toString, rootCp.root.toString, toBatch, downstream)
    def planHop(t: CascadeHopTarget): CascadeHop = {
      val plan = t.sink.map { s =>
        Rewind.plan(
          spark,
          s,
          t.checkpoint,
          t.toBatch,
          force,
          replan = t.depth > 0,
          inCascade = true
        )
      }
      val last = plan.fold(new QueryCheckpoint(spark, t.checkpoint).offsetIds.lastOption)(p =>
        Some(p.offsetsLatest)
      )
      val checkpointOnly =
        if (plan.isDefined) None else Some(CheckpointRewindPlan.of(spark, t.checkpoint, t.toBatch))
      CascadeHop(t, plan, checkpointOnly, last.getOrElse(-1L))
    }
    CascadeIntent.read(fm, meta) match {
      case Some(i) =>
        if (i.toBatch != toBatch || i.checkpoint != rootCp.root.toString) {
          throw BatchLogException.rewindInProgress(
            i.sink,
            i.toBatch,
            i.checkpoint,
            finishWith = Some(commandOf(i.sink, i.checkpoint, i.toBatch, Nil))
          )
        }
        CascadePlan(meta.getParent, rootCp.root, toBatch, i.hops.map(planHop), Nil, true, command)
      case None =>
        val root = Rewind.plan(spark, sinkPath, checkpointPath, toBatch, force, inCascade = true)
        val (targets, unaffected) = discover(spark, root, downstream)
        val hops = CascadeHop(targets.head, Some(root), None, root.offsetsLatest) +:
          targets.tail.map(planHop)
        CascadePlan(root.sink, root.checkpoint, toBatch, hops, unaffected, false, command)
    }
  }

  /** The command that runs (or finishes) this cascade. */
  private def commandOf(
      sink: String,
      checkpoint: String,
      toBatch: Long,
      downstream: Seq[Downstream]
  ): String =
    s"python -m batchlog rewind $sink --checkpoint $checkpoint --to-batch $toBatch --cascade" +
      downstream.map(d => s" --downstream ${d.sink.getOrElse("")}=${d.checkpoint}").mkString

  /** A query reading a rewound sink: by its checkpoint, the source index and how it reads. */
  private case class Reader(
      checkpoint: String,
      sourceIndex: Int,
      kind: String,
      sink: Option[String],
      registered: Boolean
  )

  /**
   * The hops below `root`: every reader of a rewound sink that read one of its rewound batches,
   * with the batch it goes back to, the lowest over everything it reads (a query reading two
   * rewound sinks goes back to the earlier of its two batches). Found level by level; a hop whose
   * batch goes lower later is looked at again, with the readers of its sink.
   */
  private def discover(
      spark: SparkSession,
      root: RewindPlan,
      downstream: Seq[Downstream]
  ): (Seq[CascadeHopTarget], Seq[CascadeUnaffected]) = {
    val hadoopConf = spark.sessionState.newHadoopConf()
    val rootTarget = CascadeHopTarget(
      0,
      None,
      root.toBatch,
      -1,
      Kind,
      registered = true,
      Some(root.sink.toString),
      root.checkpoint.toString,
      root.toBatch
    )
    val hops = mutable.LinkedHashMap(root.checkpoint.toString -> rootTarget)
    val unaffected = mutable.LinkedHashMap.empty[(String, String), CascadeUnaffected]
    val named = downstream.map { d =>
      val cp =
        try new QueryCheckpoint(spark, d.checkpoint)
        catch {
          case e: BatchLogException =>
            throw BatchLogException.invalidArgument("downstream", d.checkpoint, e.problem)
        }
      d.copy(
        sink =
          d.sink.map(s => BatchTaggedFileStreamSinkLog.metadataPathOf(spark, s).getParent.toString),
        checkpoint = cp.root.toString
      ) -> cp
    }
    val matched = mutable.Set.empty[String]
    val work = mutable.Queue(rootTarget)
    while (work.nonEmpty) {
      val up = work.dequeue()
      val upSink = new Path(up.sink.get)
      val upMeta = BatchTaggedFileStreamSinkLog.metadataPathOf(spark, upSink.toString)
      val upFm = CheckpointFileManager.create(upMeta, hadoopConf)
      val registered = SinkReaders.list(upFm, upMeta).map { r =>
        Reader(r.checkpoint, r.sourceIndex, r.kind, r.sink, registered = true)
      }
      val byHand = named.flatMap { case (d, cp) =>
        readsOf(spark, cp, upSink).map { case (i, kind) =>
          matched += d.checkpoint
          Reader(d.checkpoint, i, kind, d.sink, registered = false)
        }
      }
      val readers = (registered ++ byHand.filterNot(h =>
        registered.exists(r => r.checkpoint == h.checkpoint && r.sourceIndex == h.sourceIndex)
      )).filterNot(_.checkpoint == up.checkpoint)
      readers.foreach { r =>
        def skip(why: String): Unit =
          unaffected((r.checkpoint, upSink.toString)) =
            CascadeUnaffected(r.checkpoint, upSink.toString, why)
        val cp =
          try Some(new QueryCheckpoint(spark, r.checkpoint))
          catch { case NonFatal(_) => None }
        cp match {
          case None => skip("its checkpoint is gone")
          case Some(c) =>
            // a hop this cascade already began (its intent names the cascade) is finished
            val begun = r.sink.flatMap { s =>
              val m = BatchTaggedFileStreamSinkLog.metadataPathOf(spark, s)
              RewindIntent.read(CheckpointFileManager.create(m, hadoopConf), m)
                .filter(i => i.finishWith.isDefined && i.checkpoint == c.root.toString)
                .map(_.toBatch)
            }
            val first = c.firstBatchReading(r.sourceIndex, r.kind, upSink, up.toBatch)
            (first ++ begun).reduceOption(_ min _) match {
              case None =>
                skip(s"it read no batch of ${upSink} from ${up.toBatch} on")
              case Some(b) =>
                unaffected.remove((r.checkpoint, upSink.toString))
                val before = hops.get(c.root.toString)
                if (before.forall(_.toBatch > b)) {
                  val t = CascadeHopTarget(
                    up.depth + 1,
                    Some(upSink.toString),
                    up.toBatch,
                    r.sourceIndex,
                    r.kind,
                    r.registered,
                    r.sink.map(s =>
                      BatchTaggedFileStreamSinkLog.metadataPathOf(spark, s).getParent.toString
                    ),
                    c.root.toString,
                    b
                  )
                  hops(c.root.toString) = t
                  if (t.sink.isDefined) work.enqueue(t)
                }
            }
        }
      }
    }
    named.filterNot { case (d, _) => matched(d.checkpoint) }.headOption.foreach { case (d, _) =>
      throw BatchLogException.invalidArgument(
        "downstream",
        d.checkpoint,
        "no source of that query reads a sink this cascade rewinds (none of its `offsets/` " +
          "match one, nor do its file source's logs name one's files)"
      )
    }
    (hops.values.toSeq.sortBy(_.depth), unaffected.values.toSeq)
  }

  /**
   * The sources of the query of checkpoint `cp` that read the sink `sink`, and how: a file source
   * whose log names a file inside it; a `batchlog` source whose latest offset's fingerprint is that
   * of the sink's batch it names ([[BatchLogOffset]]).
   */
  private def readsOf(spark: SparkSession, cp: QueryCheckpoint, sink: Path): Seq[(Int, String)] = {
    val latest = cp.offsetIds.lastOption.map(cp.offsets)
    val inside = sink.toUri.getPath.stripSuffix("/") + "/"
    // a `batchlog` source keeps no log under `sources/<i>/`: its index is its place in `offsets/`
    val indexes = (cp.sourceIndexes ++ latest.toSeq.flatMap(_.sourceOffsets.indices)).distinct
    indexes.sorted.flatMap { i =>
      latest.flatMap(_.sourceOffsets.lift(i).flatten).flatMap(BatchLogOffset.parse) match {
        case Some(o) =>
          val log = new BatchTaggedFileStreamSinkLog(
            spark,
            BatchTaggedFileStreamSinkLog.metadataPathOf(spark, sink.toString).toString
          )
          val files = mutable.ArrayBuffer.empty[String]
          if (o.filesBatch >= 0) {
            log.foreachLiveEntryWithin(o.filesBatch, o.filesBatch)(_.contains(o.filesBatch)) { e =>
              files += e.path
            }
          }
          if (BatchLogOffset.fingerprint(files.toSeq) == o.fingerprint) {
            Some(i -> SinkReaders.KindBatchlog)
          } else None
        case None =>
          var hit = false
          cp.foreachSourceFile(i) { (path, _) =>
            if (!hit && new Path(path).toUri.getPath.startsWith(inside)) hit = true
          }
          if (hit) Some(i -> SinkReaders.KindFile) else None
      }
    }
  }

  /**
   * Carries out `plan`: the cascade's intent, every hop's intent and fence, every hop's cut, the
   * cascade's intent removed, the hops' intents removed deepest first. Listener step names:
   * `cascade-intent`, `<hop>:<step>` for a hop's rewind step, `cascade-done`.
   */
  def apply(spark: SparkSession, plan: CascadePlan, quiet: Boolean): Seq[Option[RewindResult]] = {
    val hadoopConf = spark.sessionState.newHadoopConf()
    val meta = plan.root.metadataPath
    val fm = CheckpointFileManager.create(meta, hadoopConf)
    val listener = RewindStepListener.fromConf(spark)
    val progress = new Progress(s"cascade rewind to batch ${plan.toBatch}", quiet)
    def note(step: String): Unit = {
      require(isStep(step), step)
      progress.note(s"cascade step '$step' done")
      listener.foreach(_.afterStep(step))
    }
    if (!plan.resuming) {
      CascadeIntent.write(
        fm,
        meta,
        CascadeIntent(
          plan.toBatch,
          plan.sink.toString,
          plan.checkpoint.toString,
          plan.hops.map(_.target),
          System.currentTimeMillis()
        )
      )
    }
    note("cascade-intent")
    val runs = plan.hops.zipWithIndex.map { case (h, i) =>
      h.plan.map(p => new Rewind.Run(spark, p, quiet, Some(plan.command), s => s"$i:$s"))
    }
    runs.foreach(_.foreach(_.begin()))
    val results = runs.zip(plan.hops).zipWithIndex.map {
      case ((Some(run), _), _) => Some(run.cut())
      case ((None, h), i) =>
        h.checkpointOnly.map { c =>
          c(spark, progress, quiet) { name => body =>
            try body
            catch {
              case e: BatchLogException =>
                throw e.withOutcome(
                  s"The pipeline rewind stopped in the step '$i:$name' of the checkpoint " +
                    s"${c.checkpoint} and is unfinished. Re-run `${plan.command}` to finish it."
                )
            }
            note(s"$i:$name")
          }
        }
    }
    CascadeIntent.delete(fm, meta)
    note("cascade-done")
    runs.reverse.foreach(_.foreach(_.done()))
    results
  }
}
