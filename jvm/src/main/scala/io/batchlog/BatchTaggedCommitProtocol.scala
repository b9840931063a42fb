package io.batchlog

import java.io.IOException

import scala.collection.mutable.ArrayBuffer

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path
import org.apache.hadoop.mapreduce.{JobContext, TaskAttemptContext}

import org.apache.spark.TaskContext
import org.apache.spark.internal.io.FileCommitProtocol.TaskCommitMessage
import org.apache.spark.internal.io.FileNameSpec
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.execution.SQLExecution
import org.apache.spark.sql.execution.streaming.ManifestFileCommitProtocol
import io.batchlog.shim.{FileStreamSinkLog, SinkFileStatus}

import io.batchlog.commit.{WriterGuard, WrittenRows}
import io.batchlog.log.{BatchCommit, BatchTaggedFileStreamSinkLog, DataFileNaming, SinkLogEntry}

/**
 * The file sink's commit protocol, committing each micro-batch through a
 * [[BatchTaggedFileStreamSinkLog]]. Enable it with
 * `spark.sql.streaming.commitProtocolClass=io.batchlog.BatchTaggedCommitProtocol`.
 *
 * It must extend `ManifestFileCommitProtocol`: `FileStreamSink.addBatch` hands its log and the
 * batch id only to committers of that type. It then behaves like its parent, except that:
 *   - data files are named `part-<split>-batch-<batchId>-<uuid><ext>` ([[DataFileNaming]]);
 *   - `commitJob` writes the batch through the tagged log, every entry tagged with the batch, the
 *     first one with what the commit knows of itself ([[BatchCommit]]: query, run, rows, time);
 *   - the run must be the sink's one writer ([[WriterGuard]]): checked before the tasks run and
 *     again right before the batch is logged, so a rewind or a second query from another process
 *     makes this query fail before it commits, never after.
 *
 * Exactly-once is the parent's: the sink skips a batch id already logged before it calls us, files
 * reach the log only through committed tasks' messages, and a batch file that already exists fails
 * the commit. The parent's task and job state is private, so every callback is implemented here;
 * executors get a serialised copy, hence the `@transient` driver-side fields.
 */
class BatchTaggedCommitProtocol(jobId: String, path: String)
    extends ManifestFileCommitProtocol(jobId, path) {
  import BatchTaggedCommitProtocol._

  // Spark builds the committer on the driver for each batch: refuse a jar of another Spark line
  // here, before Spark's own log could take over (see BuildInfo).
  BuildInfo.requireMatchingSpark()

  @transient private var sinkLog: BatchTaggedFileStreamSinkLog = _
  @transient private var guard: WriterGuard = _
  private var batchId: Long = -1L

  /** Files written by this task attempt (executor side). */
  @transient private var addedFiles: ArrayBuffer[String] = _

  /** Files of committed tasks, deleted if the job aborts (driver side). */
  @transient private var pendingCommitFiles: ArrayBuffer[Path] = _

  /** Set as the job aborts: a task's commit arriving later is deleted (driver side, guarded). */
  @transient private var jobAborted = false
  @transient private var jobConf: Configuration = _

  /** The batch's write (driver side): its session, start and SQL execution, for [[BatchCommit]]. */
  @transient private var spark: SparkSession = _
  @transient private var jobStartNs = 0L
  @transient private var executionId: Option[String] = None

  override def setupManifestOptions(fileLog: FileStreamSinkLog, batchId: Long): Unit = {
    super.setupManifestOptions(fileLog, batchId)
    val spark = SparkSession.active
    this.spark = spark
    this.guard =
      try WriterGuard.forSink(spark, fileLog, batchId)
      catch {
        case e: BatchLogException =>
          throw e.withOutcome(s"Batch $batchId was not written to the sink; nothing was changed.")
      }
    this.sinkLog = guard.taggedLog
    this.batchId = batchId
  }

  override def setupJob(jobContext: JobContext): Unit = {
    require(sinkLog != null, "setupManifestOptions must be called before this function")
    try guard.beforeBatch(batchId)
    catch {
      case e: BatchLogException =>
        throw e.withOutcome(s"Batch $batchId was not written to the sink; nothing was changed.")
    }
    synchronized {
      pendingCommitFiles = new ArrayBuffer[Path]
      jobAborted = false
    }
    jobStartNs = System.nanoTime()
    executionId = Option(spark.sparkContext.getLocalProperty(SQLExecution.EXECUTION_ID_KEY))
    executionId.foreach(WrittenRows.of(spark.sparkContext).watch)
  }

  override def commitJob(jobContext: JobContext, taskCommits: Seq[TaskCommitMessage]): Unit = {
    require(sinkLog != null, "setupManifestOptions must be called before this function")
    val startNs = System.nanoTime()
    val entries = taskCommits
      .flatMap(_.obj.asInstanceOf[Seq[SinkFileStatus]])
      .map(SinkLogEntry(_, batchId))
      .toArray
    if (entries.nonEmpty) entries(0) = entries(0).copy(commit = Some(commitOf(taskCommits.size)))
    // Until the batch's log file is published its files are in no log: on a failure abortJob
    // deletes them. Once it is published they are live: never delete them after. A publish that
    // failed was settled by the log reading the store back (PublishOutcome): adopted if the store
    // holds this batch's file, refused if it holds another's, unknown if it may still appear.
    val notCommitted = s"Batch $batchId was not committed; its data files are deleted."
    val added =
      try {
        guard.beforeCommit(batchId)
        sinkLog.add(batchId, entries)
      } catch {
        case _: java.util.ConcurrentModificationException =>
          // Log file N is there and not this batch's: another writer's, or a rewind's claim of it.
          // This batch's files are in no log: abortJob deletes them.
          refused(BatchLogException.raceCommittingBatch(batchId, sinkLog.metadataPath.toString))
        case e: BatchLogException if e.code == BatchLogException.CommitOutcomeUnknown =>
          // A late application of the publish could still list them: kept, for vacuum
          pendingCommitFiles.clear(); throw e
        case e: Throwable if sinkLog.isLogged(batchId) => pendingCommitFiles.clear(); throw e
        case e: BatchLogException => throw e.withOutcome(notCommitted)
      }
    if (added) {
      pendingCommitFiles.clear()
      sinkLog.metrics.committed(batchId, (System.nanoTime() - startNs) / 1000000)
      logInfo(s"Committed batch $batchId (${entries.length} files)")
    } else refused(BatchLogException.raceCommittingBatch(batchId, sinkLog.metadataPath.toString))
  }

  /**
   * What this commit knows of itself: the streaming query and run that write the batch, the rows
   * its `numTasks` tasks wrote ([[WrittenRows]]) and the time since the write job started. Spark's
   * query thread names both ids in its local properties on every line: the query id as its own
   * property, the run id as the job group (which a UUID check tells from a group set otherwise).
   */
  private def commitOf(numTasks: Int): BatchCommit = {
    val sc = spark.sparkContext
    val queryId = Option(sc.getLocalProperty(QueryIdKey))
    val runId = Option(sc.getLocalProperty(JobGroupKey)).filter(g =>
      queryId.isDefined && scala.util.Try(java.util.UUID.fromString(g)).isSuccess
    )
    val rows = executionId.flatMap(WrittenRows.of(sc).rowsOf(_, numTasks, WrittenRows.waitMs))
    if (rows.isEmpty) logInfo(s"The rows of batch $batchId are unknown: not recorded")
    BatchCommit(queryId, runId, rows, Some((System.nanoTime() - jobStartNs) / 1000000L))
  }

  /**
   * Log file `batchId` exists: another writer's, or a rewind's claim of it. The sink's record says
   * which (a moved epoch: the sink was rewound or taken over); either way this batch's files are in
   * no log and abortJob deletes them.
   */
  private def refused(e: BatchLogException): Nothing = {
    val notCommitted = s"Batch $batchId was not committed; its data files are deleted."
    try guard.afterRefusedPublish(batchId, e)
    catch { case b: BatchLogException => throw b.withOutcome(notCommitted) }
  }

  /**
   * The batch failed (a task, or its commit): its committed tasks' files are deleted, and the run
   * ends here ([[WriterGuard.abortRun]]): Spark ends the query with the failure, and the run's
   * lease goes before the failure reaches the caller. If the run was fenced meanwhile (its lease
   * lost, the sink rewound or taken over), that is the failure reported ([[WriterGuard.
   * fencedError]]): a task of a writer paused and fenced in the middle of its batch fails on a file
   * the rewind deleted, a symptom that says neither what happened nor what to do.
   */
  override def abortJob(jobContext: JobContext): Unit = uninterruptibly {
    val pending = synchronized {
      jobAborted = true
      jobConf = jobContext.getConfiguration
      val files = if (pendingCommitFiles == null) Nil else pendingCommitFiles.toList
      if (pendingCommitFiles != null) pendingCommitFiles.clear()
      files
    }
    if (spark != null) executionId.foreach(WrittenRows.of(spark.sparkContext).forget)
    val fenced = if (guard == null || guard.isEnded) None else guard.fencedError(batchId)
    try deleteFiles(pending, jobConf, s"aborted batch $batchId")
    finally if (guard != null) guard.abortRun()
    fenced.foreach { e =>
      throw e.withOutcome(s"Batch $batchId was not committed; its data files are deleted.")
    }
  }

  /**
   * Runs `body` to its end on a thread of its own, whatever interrupts the caller meanwhile. A
   * `stop()` cancels the batch's job, then interrupts the query's thread: the interrupt can land as
   * the abort runs, and an interrupted thread fails a lock's timed wait, HDFS's and S3's clients at
   * once (the lease would outlive `stop()`, a file would stay). Once interrupted, the caller waits
   * [[BatchTaggedCommitProtocol.abortGraceMs]] more at most (a store that hangs must not hold
   * `stop()` for ever); the abort then finishes behind it. The interrupt is kept for after, so the
   * query's thread ends as Spark expects.
   */
  private def uninterruptibly(body: => Unit): Unit = {
    var interruptedAt = if (Thread.interrupted()) System.nanoTime() else 0L
    @volatile var failure: Throwable = null
    val worker = new Thread(
      () =>
        try body
        catch { case e: Throwable => failure = e },
      s"batchlog-abort-batch-$batchId"
    )
    worker.setDaemon(true)
    worker.start()
    def waitedOut = interruptedAt != 0L &&
      System.nanoTime() - interruptedAt >= BatchTaggedCommitProtocol.abortGraceMs * 1000000L
    while (worker.isAlive && !waitedOut) {
      try
        if (interruptedAt == 0L) worker.join()
        else worker.join(math.max(1L, BatchTaggedCommitProtocol.abortGraceMs))
      catch {
        case _: InterruptedException => if (interruptedAt == 0L) interruptedAt = System.nanoTime()
      }
    }
    if (worker.isAlive) {
      logWarning(
        s"The abort of batch $batchId still runs ${BatchTaggedCommitProtocol.abortGraceMs} ms " +
          s"after the query's thread was interrupted; it finishes in the background ($worker)"
      )
    }
    if (interruptedAt != 0L) Thread.currentThread().interrupt()
    if (!worker.isAlive && failure != null) throw failure
  }

  /**
   * Deletes `files`, which no log will name (`whose`: for the warning), on the driver or in a task.
   * Most of these deletes come with a `stop()` or a task kill, which interrupts the thread, and an
   * interrupted thread fails the next call of HDFS's or S3's client at once: the interrupt is held
   * until the files are gone, then restored. A delete that fails is logged, not thrown: the file is
   * an orphan, in no log, which `vacuum` deletes.
   */
  private def deleteFiles(files: Seq[Path], conf: Configuration, whose: => String): Unit =
    if (files.nonEmpty) {
      val interrupted = Thread.interrupted()
      try {
        val fs = files.head.getFileSystem(conf)
        files.foreach { p =>
          try fs.delete(p, false)
          catch { case e: IOException => logWarning(s"Failed to remove $p of $whose", e) }
        }
      } finally if (interrupted) Thread.currentThread().interrupt()
    }

  /**
   * A task's files, as its commit reaches the driver. A `stop()` interrupts the query's thread
   * while the job still runs: the batch is aborted there at once, and a task that finished its
   * files just then may report them afterwards, on Spark's scheduler thread. Those are deleted as
   * they arrive. (If Spark cancelled the job first, it drops the report: that file is an orphan, in
   * no log, which `vacuum` deletes; `CommitProtocolQuerySuite`: "a stop() in the middle ...".)
   */
  override def onTaskCommit(taskCommit: TaskCommitMessage): Unit = {
    val paths = taskCommit.obj.asInstanceOf[Seq[SinkFileStatus]].map(_.toFileStatus.getPath)
    val late = synchronized {
      if (!jobAborted) pendingCommitFiles ++= paths
      jobAborted
    }
    if (late && paths.nonEmpty) {
      logWarning(s"Removing ${paths.size} files a task of aborted batch $batchId committed late")
      deleteFiles(paths, jobConf, s"aborted batch $batchId")
    }
  }

  /**
   * A task whose commit will not reach the driver deletes the files it created, wherever it
   * stopped. Spark calls `abortTask` only for a failure inside its write loop, not for one as the
   * writer opens its first file (Spark 3.5 opens it before that loop: a kill there left the file),
   * nor for one after the commit. And a task killed after its commit returned (as its completion
   * listeners run) is reported killed by Spark's executor, its commit message dropped. So: a failed
   * task deletes its files, and a task that completes killed deletes them too (the mark is never
   * cleared, so the executor reports it killed). A kill landing after the last completion listener,
   * before the executor's own check, still leaves the file: an orphan, as a task result Spark
   * drops.
   */
  override def setupTask(taskContext: TaskAttemptContext): Unit = {
    val added = new ArrayBuffer[String]
    addedFiles = added
    val conf = taskContext.getConfiguration
    Option(TaskContext.get()).foreach { tc =>
      tc.addTaskFailureListener((_, _) => deleteTaskFiles(added, conf))
      tc.addTaskCompletionListener[Unit](ctx =>
        if (ctx.isInterrupted()) deleteTaskFiles(added, conf)
      )
    }
  }

  override def newTaskTempFile(
      taskContext: TaskAttemptContext,
      dir: Option[String],
      spec: FileNameSpec
  ): String = {
    val split = taskContext.getTaskAttemptID.getTaskID.getId
    val name = DataFileNaming.fileName(spec.prefix, split, batchId, spec.suffix)
    val file = dir.map(d => new Path(new Path(path, d), name)).getOrElse(new Path(path, name))
    addedFiles += file.toString
    file.toString
  }

  /**
   * The older overload: Spark 3.5 and 4.0 call it for a sink without partition columns, and their
   * `ManifestFileCommitProtocol` implements it on its own (an untagged name, recorded in the
   * parent's list, not ours): every file must go through the batch-tagged naming above.
   */
  override def newTaskTempFile(
      taskContext: TaskAttemptContext,
      dir: Option[String],
      ext: String
  ): String = newTaskTempFile(taskContext, dir, FileNameSpec("", ext))

  override def commitTask(taskContext: TaskAttemptContext): TaskCommitMessage =
    if (addedFiles.isEmpty) new TaskCommitMessage(Seq.empty[SinkFileStatus])
    else {
      val fs = new Path(addedFiles.head).getFileSystem(taskContext.getConfiguration)
      new TaskCommitMessage(
        addedFiles.map(f => SinkFileStatus(fs.getFileStatus(new Path(f)))).toSeq
      )
    }

  override def abortTask(taskContext: TaskAttemptContext): Unit =
    if (addedFiles != null) deleteTaskFiles(addedFiles, taskContext.getConfiguration)

  private def deleteTaskFiles(files: ArrayBuffer[String], conf: Configuration): Unit =
    deleteFiles(files.map(new Path(_)).toSeq, conf, "a failed task")
}

object BatchTaggedCommitProtocol {

  /**
   * How long a batch's abort may still hold the query's thread once that thread is interrupted (a
   * `stop()`): the deletes and the lease's removal take milliseconds, unless the store hangs.
   */
  @volatile private[batchlog] var abortGraceMs: Long = 10000L

  /** Spark's local properties naming a batch's streaming query and run. */
  private val QueryIdKey = "sql.streaming.queryId"
  private val JobGroupKey = "spark.jobGroup.id"
}
