package io.batchlog.bench

import java.lang.management.ManagementFactory
import javax.management.{Notification, NotificationEmitter, NotificationListener}
import javax.management.openmbean.CompositeData

import scala.jdk.CollectionConverters._

import com.sun.management.GarbageCollectionNotificationInfo

/**
 * Peak *live* heap of a piece of work: the largest heap occupancy right after a garbage collection
 * while it runs (GC notifications), and after a forced GC at its end while its result is still
 * held, minus the live heap before it. Heap "used" alone would count garbage and so depend on when
 * the collector happens to run.
 */
object HeapMeter {
  final case class Measured[A](result: A, ms: Double, peakBytes: Long)

  private def liveHeap(): Long = {
    System.gc()
    ManagementFactory.getMemoryMXBean.getHeapMemoryUsage.getUsed
  }

  def measure[A](body: => A): Measured[A] = {
    val base = liveHeap()
    @volatile var peak = base
    val listener = new NotificationListener {
      override def handleNotification(n: Notification, handback: Any): Unit =
        if (n.getType == GarbageCollectionNotificationInfo.GARBAGE_COLLECTION_NOTIFICATION) {
          val info =
            GarbageCollectionNotificationInfo.from(n.getUserData.asInstanceOf[CompositeData])
          val after = info.getGcInfo.getMemoryUsageAfterGc.asScala.collect {
            case (pool, usage) if isHeapPool(pool) => usage.getUsed
          }.sum
          if (after > peak) peak = after
        }
    }
    val emitters = ManagementFactory.getGarbageCollectorMXBeans.asScala.collect {
      case e: NotificationEmitter => e
    }
    emitters.foreach(_.addNotificationListener(listener, null, null))
    val t0 = System.nanoTime()
    val result =
      try body
      finally ()
    val ms = (System.nanoTime() - t0) / 1e6
    val end = liveHeap() // `result` is still referenced here
    emitters.foreach(e => scala.util.Try(e.removeNotificationListener(listener)))
    Measured(result, ms, math.max(peak, end) - base)
  }

  private val heapPools = ManagementFactory.getMemoryPoolMXBeans.asScala
    .filter(_.getType == java.lang.management.MemoryType.HEAP).map(_.getName).toSet

  private def isHeapPool(name: String): Boolean = heapPools.contains(name)
}
