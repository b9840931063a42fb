package org.apache.spark.batchlog

import org.apache.spark.SparkContext
import org.apache.spark.scheduler.SparkListenerEvent

/**
 * A marker a listener can post to its SparkContext's listener bus and wait for: once the listener
 * receives it, it has received every event posted before it. Spark's bus is private to Spark's
 * packages, so the post is made here; the marker stays out of the event log (`logEvent`), as the
 * History Server has nothing to show for it. `owner` tells the poster's markers from another's.
 */
final case class BusMarker(owner: AnyRef, id: Long) extends SparkListenerEvent {
  override protected[spark] def logEvent: Boolean = false
}

object BusMarker {

  /** Posts `marker` to `sc`'s listener bus, behind every event posted so far. */
  def post(sc: SparkContext, marker: BusMarker): Unit = sc.listenerBus.post(marker)
}
