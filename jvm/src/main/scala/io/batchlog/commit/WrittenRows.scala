package io.batchlog.commit

import scala.collection.mutable

import org.apache.spark.{SparkContext, Success}
import org.apache.spark.batchlog.BusMarker
import org.apache.spark.scheduler._
import org.apache.spark.sql.execution.SQLExecution

/**
 * The rows a batch's write wrote, as Spark's write stats counted them, for its commit to record
 * ([[io.batchlog.log.BatchCommit]]).
 *
 * Each write task counts its rows and reports them in its task metrics (`recordsWritten`), but
 * Spark hands a committer only the tasks' file lists: the counts reach the driver as task-end
 * events on the listener bus, and Spark totals them only after `commitJob`. So this listener, one
 * per SparkContext, keeps the counts of the write jobs a committer announced ([[watch]], by SQL
 * execution id: each micro-batch's write runs in an execution of its own) and `commitJob` reads
 * them ([[rowsOf]]).
 *
 * By `commitJob` every event of the write job has been posted: Spark posts a task's end before it
 * hands its result to the job, and the job's end before the last result. The listener may still be
 * behind the bus, so [[rowsOf]] posts a [[org.apache.spark.batchlog.BusMarker]] and waits, a
 * bounded time, until the listener has received it: by then it has seen every job of the execution,
 * and the write is the last one that ran as many tasks as the commit has results (a broadcast or
 * subquery job of the same execution ended before it). If the marker does not come (a bus that
 * dropped events, or one minutes behind), the rows are unknown, never guessed. A task run twice
 * (speculation) is counted once: rows are kept per partition.
 */
final private[batchlog] class WrittenRows(sc: SparkContext) extends SparkListener {

  private class Job(val numTasks: Int) {
    val rows = mutable.Map.empty[Int, Long]
    var ended = false
  }

  /** Watched executions, by id: their jobs by id. */
  private val executions = mutable.Map.empty[String, mutable.Map[Int, Job]]

  /** The result stage of each job being followed: its execution and job. */
  private val resultStages = mutable.Map.empty[Int, (String, Int)]

  /** Follows the jobs of SQL execution `executionId` from now on, until [[forget]]. */
  def watch(executionId: String): Unit = synchronized {
    executions(executionId) = mutable.Map.empty
  }

  def forget(executionId: String): Unit = synchronized {
    executions.remove(executionId)
    resultStages --= resultStages.collect { case (stage, (e, _)) if e == executionId => stage }
  }

  /**
   * The rows written by the last job of `executionId` that ran `numTasks` tasks, once the listener
   * has caught up with the bus, waiting up to `timeoutMs` for it; None if it has not by then or a
   * task's count is missing. Forgets the execution.
   */
  def rowsOf(executionId: String, numTasks: Int, timeoutMs: Long): Option[Long] = {
    synchronized {
      // numbered and posted under the lock: the bus receives the markers in their order
      markers += 1
      val marker = BusMarker(this, markers)
      BusMarker.post(sc, marker)
      val deadline = System.nanoTime() + timeoutMs * 1000000L
      var left = timeoutMs
      while (seen < marker.id && left > 0) {
        wait(left)
        left = (deadline - System.nanoTime()) / 1000000L
      }
      val written =
        if (seen < marker.id) None
        else
          executions.get(executionId).map(_.filter { case (_, j) =>
            j.ended && j.numTasks == numTasks
          })
            .filter(_.nonEmpty).map(_.maxBy(_._1)._2)
      forget(executionId)
      written.filter(_.rows.size == numTasks).map(_.rows.values.sum)
    }
  }

  /** Markers posted, and the last one received: the bus delivers them in order. */
  private var markers = 0L
  private var seen = 0L

  override def onOtherEvent(e: SparkListenerEvent): Unit = e match {
    case BusMarker(owner, id) if owner eq this => synchronized { seen = id; notifyAll() }
    case _ =>
  }

  override def onJobStart(e: SparkListenerJobStart): Unit = {
    val execution =
      Option(e.properties).flatMap(p => Option(p.getProperty(SQLExecution.EXECUTION_ID_KEY)))
    execution.foreach { id =>
      synchronized {
        executions.get(id).foreach { jobs =>
          // Spark creates a job's parent stages first: its result stage has the highest id
          val result = e.stageInfos.maxBy(_.stageId)
          jobs(e.jobId) = new Job(result.numTasks)
          resultStages(result.stageId) = (id, e.jobId)
        }
      }
    }
  }

  override def onTaskEnd(e: SparkListenerTaskEnd): Unit =
    if (e.reason == Success && e.taskMetrics != null) synchronized {
      for {
        (execution, jobId) <- resultStages.get(e.stageId)
        job <- executions.get(execution).flatMap(_.get(jobId))
      } job.rows.getOrElseUpdate(e.taskInfo.index, e.taskMetrics.outputMetrics.recordsWritten)
    }

  override def onJobEnd(e: SparkListenerJobEnd): Unit = synchronized {
    executions.values.flatMap(_.get(e.jobId)).foreach(_.ended = true)
  }
}

private[batchlog] object WrittenRows {

  /** How long `commitJob` waits for the listener to see the write job's end. */
  @volatile private[batchlog] var waitMs: Long = 2000L

  private var current: Option[(SparkContext, WrittenRows)] = None

  /** The listener of `sc`, added to its bus on first use. */
  def of(sc: SparkContext): WrittenRows = synchronized {
    current match {
      case Some((c, l)) if c eq sc => l
      case _ =>
        val l = new WrittenRows(sc)
        sc.addSparkListener(l)
        current = Some(sc -> l)
        l
    }
  }
}
