package io.batchlog.log

import java.util.concurrent.ConcurrentHashMap

/**
 * A lease judged by its observer alone. The writer's `refreshedAtMs` is its own wall clock:
 * compared with another host's, a skew of a minute makes a live writer look dead (or a dead one
 * live). So an observer (a rewind, a takeover, a repair, a vacuum, a starting writer) remembers
 * *when, on its own monotonic clock, it first saw the lease's current version*; every refresh
 * writes a new version (a counter inside the lease, [[WriterLease.refreshes]]). A lease is dead
 * once this observer has seen the same version for the lease's whole timeout; an observer that has
 * never seen it must watch it that long. Observations last as long as the JVM: re-running an
 * operation in the same session counts the time already watched.
 */
object LeaseWatch {

  /** What an observer saw: the lease's version and when it first saw it (monotonic nanos). */
  final private case class Seen(lease: WriterLease, sinceNanos: Long)

  private val seen = new ConcurrentHashMap[String, Seen]()

  /**
   * Notes `lease`, read now from `file`, and returns for how long (ms) this JVM has seen it
   * unchanged: 0 the first time it sees this version.
   */
  def unchangedMs(file: String, lease: WriterLease, clock: Clock): Long = {
    // One entry per lease watched. A driver watching ever new sinks starts over now and then:
    // forgetting an observation only makes the next one watch longer, never judge a lease dead
    // sooner.
    if (seen.size > JsonRecordFile.MaxRemembered && !seen.containsKey(file)) seen.clear()
    val s = seen.compute(
      file,
      (_, prev) =>
        if (prev != null && prev.lease == lease) prev else Seen(lease, clock.nanoTime())
    )
    math.max(0L, clock.elapsedMs(s.sinceNanos))
  }

  /** How many leases this JVM has an observation of. */
  private[batchlog] def watched: Int = seen.size

  /** Forgets what was seen of `file` (the lease is gone). */
  def forget(file: String): Unit = seen.remove(file)

  /** The outcome of watching a lease: absent or dead (no writer), or live. */
  sealed trait Verdict
  case object NoWriter extends Verdict

  /** `unchangedMs`: how long it was seen unchanged; `refreshed`: seen to change while watched. */
  final case class Live(lease: WriterLease, unchangedMs: Long, refreshed: Boolean) extends Verdict

  /**
   * Watches the lease `read()` returns for up to `waitMs` (negative: the lease's own timeout):
   * [[NoWriter]] when it is absent, or once it has been seen unchanged for its timeout; [[Live]] as
   * soon as it changes (a refresh: the writer lives), or when the wait ends first. Polled every
   * quarter of the lease's timeout (its refresh interval), so a refresh is seen within one
   * interval. Before each wait, `waiting(unchangedMs, timeoutMs)` is told how far it is.
   */
  def watch(
      file: String,
      waitMs: Long,
      clock: Clock,
      waiting: (Long, Long) => Unit = (_, _) => ()
  )(read: () => Option[WriterLease]): Verdict = {
    val start = clock.nanoTime()
    var first: Option[WriterLease] = None
    var verdict: Verdict = null
    while (verdict == null) {
      read() match {
        case None => forget(file); verdict = NoWriter
        case Some(l) =>
          val unchanged = unchangedMs(file, l, clock)
          if (first.exists(_ != l)) verdict = Live(l, unchanged, refreshed = true)
          else if (unchanged >= l.timeoutMs) verdict = NoWriter
          else {
            first = Some(l)
            val needed = l.timeoutMs - unchanged
            val left = if (waitMs < 0) needed else waitMs - clock.elapsedMs(start)
            if (left <= 0 || left < needed) verdict = Live(l, unchanged, refreshed = false)
            else {
              waiting(unchanged, l.timeoutMs)
              clock.sleepMs(math.max(1L, math.min(needed, l.timeoutMs / 4)))
            }
          }
      }
    }
    verdict
  }
}
