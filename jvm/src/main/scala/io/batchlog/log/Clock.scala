package io.batchlog.log

/**
 * The time batchlog's writer fencing reads: a monotonic clock (`nanoTime`, for every duration: how
 * long a lease was seen unchanged, how old a writer's last refresh is) and the wall clock (only to
 * stamp records for people: a lease's `refreshedAtMs`, an owner's `sinceMs`). No decision ever
 * compares two hosts' wall clocks: a lease is judged by its observer alone ([[LeaseWatch]]), a
 * writer fences itself on its own monotonic clock.
 *
 * One place: the system's by default; a test installs its own ([[Clock.using]]) to skew or stall
 * time deterministically.
 */
trait Clock {
  def nanoTime(): Long
  def currentTimeMillis(): Long

  /** Waits `ms` (a manual clock moves itself on instead). */
  def sleepMs(ms: Long): Unit

  final def elapsedMs(sinceNanos: Long): Long = (nanoTime() - sinceNanos) / 1000000L
}

object Clock {

  object SystemClock extends Clock {
    def nanoTime(): Long = System.nanoTime()
    def currentTimeMillis(): Long = System.currentTimeMillis()
    def sleepMs(ms: Long): Unit = if (ms > 0) Thread.sleep(ms)
  }

  @volatile private var installed: Clock = SystemClock

  /** The clock in force (the system's unless a test installed one). */
  def current: Clock = installed

  /** Runs `body` with `clock` in force for this JVM (tests: one at a time). */
  def using[T](clock: Clock)(body: => T): T = {
    val before = installed
    installed = clock
    try body
    finally installed = before
  }
}
