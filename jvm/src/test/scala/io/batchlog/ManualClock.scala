package io.batchlog

import java.util.concurrent.atomic.AtomicLong

import io.batchlog.log.Clock

/**
 * A clock that moves only when told: its monotonic time by [[advance]] (and by `sleepMs`, which
 * runs `onSleep` first: another process's step, interleaved at an exact point), its wall clock set
 * apart from it (`wallOffsetMs`, to skew it by minutes). Installed with `Clock.using`.
 */
final class ManualClock(startWallMs: Long = System.currentTimeMillis()) extends Clock {
  private val nanos = new AtomicLong(1000000000L)
  @volatile var wallOffsetMs: Long = 0L
  @volatile var onSleep: Long => Unit = (_: Long) => ()

  def advance(ms: Long): Unit = nanos.addAndGet(ms * 1000000L)

  def nanoTime(): Long = nanos.get()

  def currentTimeMillis(): Long =
    startWallMs + wallOffsetMs + (nanos.get() - 1000000000L) / 1000000L

  def sleepMs(ms: Long): Unit = { onSleep(ms); advance(ms) }
}
