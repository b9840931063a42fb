package io.batchlog.commit

import java.util.{Collections, WeakHashMap}
import java.util.concurrent.atomic.AtomicReference

import org.apache.spark.internal.Logging
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.streaming.{StreamingQueryException, StreamingQueryListener}
import org.apache.spark.sql.streaming.StreamingQueryListener._
import io.batchlog.shim.{FileStreamSink, StreamingQueryWrapper}

import io.batchlog.BatchLogConf

/**
 * Stops a query that is not its sink's writer as it starts, before Spark's file sink skips any of
 * its batches ([[HeadStart]] says why that needs a check at the start and what it checks).
 *
 * Spark posts `QueryStartedEvent` to the listeners of the query's session synchronously, on the
 * query's own thread, before `start()` returns and before the query's state leaves `INITIALIZING`.
 * A listener's exception is only logged by Spark's listener bus, so a refused query is stopped the
 * way `stop()` stops one that has not run a batch, plus the error: its death cause is set to a
 * `StreamingQueryException` caused by the [[BatchLogException]], and its state to `TERMINATED`. The
 * query thread then runs no batch (it moves to `ACTIVE` only from `INITIALIZING`) and ends
 * normally, posting the termination with that error; `awaitTermination()` throws it. No offset or
 * commit is written to the checkpoint, nothing to the sink. Both fields are Spark internals without
 * a public setter, reached by name ([[failBeforeFirstBatch]]); if a Spark line renamed them the
 * query is left running and the committer still refuses it at its first batch past the sink's
 * latest (after the skipped ones), with a warning in the driver log.
 *
 * Only queries writing a file sink through batchlog's commit protocol are checked: one listing of
 * the sink's log and of the checkpoint's commits, and the sink's record, per query start.
 * [[HeadStartListener.register]] adds it to a session once; `BatchLogExtensions` does that for
 * every session that defines a streaming query.
 */
final class HeadStartListener private (spark: SparkSession)
    extends StreamingQueryListener
    with Logging {

  override def onQueryStarted(event: QueryStartedEvent): Unit =
    try check(event)
    catch {
      case e: Exception =>
        logWarning(s"batchlog could not check query ${event.id} against its sink's owner", e)
    }

  private def check(event: QueryStartedEvent): Unit =
    Option(spark.streams.get(event.id)).foreach {
      case w: StreamingQueryWrapper =>
        val query = w.streamingQuery
        val own = query.sink match {
          case s: FileStreamSink => Some(HeadStartListener.pathOf(s))
          case _ => None
        }
        register(event, query, query.resolvedCheckpointRoot, own)
        if (
          spark.sessionState.conf.streamingFileCommitProtocolClass ==
            BatchLogConf.CommitProtocolClass
        ) {
          query.sink match {
            case sink: FileStreamSink =>
              val output = HeadStartListener.pathOf(sink)
              val checkpoint = query.resolvedCheckpointRoot
              HeadStart.refusal(spark, output, checkpoint, event.id.toString) match {
                case Some(e) =>
                  val error = e.withOutcome(
                    "No batch ran: the sink and the checkpoint's offsets and commits are unchanged."
                  )
                  logError(error.getMessage)
                  HeadStartListener.failBeforeFirstBatch(query, event, error)
                case None => HeadStart.healStrays(spark, output, checkpoint, event.id.toString)
              }
            case _ =>
          }
        }
      case _ =>
    }

  /** The query as a reader of the batchlog sinks it reads (see `ReaderRegistration`). */
  private def register(
      event: QueryStartedEvent,
      query: AnyRef,
      checkpoint: String,
      own: Option[String]
  ): Unit =
    try ReaderRegistration.register(spark, query, event.id.toString, checkpoint, own)
    catch {
      case e: Exception =>
        logWarning(s"batchlog could not register query ${event.id} with the sinks it reads", e)
    }

  override def onQueryProgress(event: QueryProgressEvent): Unit = ()

  override def onQueryTerminated(event: QueryTerminatedEvent): Unit = ()
}

object HeadStartListener extends Logging {

  private val registered =
    Collections.synchronizedSet(Collections.newSetFromMap(new WeakHashMap[
      SparkSession,
      java.lang.Boolean
    ]()))

  /** How many sessions of `sc` have the listener (the one that defines streams, not its clones). */
  private[batchlog] def sessionsWith(sc: org.apache.spark.SparkContext): Int =
    registered.synchronized {
      val it = registered.iterator()
      var n = 0
      while (it.hasNext) if (it.next().sparkContext eq sc) n += 1
      n
    }

  /** Adds the listener to `spark`'s streaming queries, once per session. */
  def register(spark: SparkSession): Unit =
    if (registered.add(spark)) spark.streams.addListener(new HeadStartListener(spark))

  /** The output path a file sink was created with (a private field of Spark's sink). */
  private def pathOf(sink: FileStreamSink): String = {
    val f = sink.getClass.getDeclaredField("path")
    f.setAccessible(true)
    f.get(sink).asInstanceOf[String]
  }

  /**
   * Ends the query `query` (Spark's `StreamExecution`) before its first batch with `error`; called
   * on its thread from `onQueryStarted`. See the class comment for why this is safe.
   */
  private def failBeforeFirstBatch(
      query: AnyRef,
      event: QueryStartedEvent,
      error: Throwable
  ): Unit = {
    val cls = query.getClass
    val state = cls.getMethod("state").invoke(query).asInstanceOf[AtomicReference[AnyRef]]
    val terminated = Class
      .forName(state.get.getClass.getPackage.getName + ".TERMINATED$", true, cls.getClassLoader)
      .getField("MODULE$")
      .get(null)
    val params = Map(
      "id" -> event.id.toString,
      "runId" -> event.runId.toString,
      "message" -> error.getMessage
    )
    val death = classOf[StreamingQueryException]
      .getConstructor(
        classOf[String],
        classOf[Throwable],
        classOf[String],
        classOf[String],
        classOf[String],
        classOf[scala.collection.immutable.Map[_, _]]
      )
      .newInstance("", error, "", "", "STREAM_FAILED", params)
    val setDeathCause = cls.getMethods.find(_.getName == "streamDeathCause_$eq").getOrElse(
      throw new NoSuchMethodException(s"${cls.getName}.streamDeathCause_=")
    )
    setDeathCause.invoke(query, death)
    state.set(terminated)
  }
}
