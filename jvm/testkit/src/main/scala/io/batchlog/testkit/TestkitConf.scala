package io.batchlog.testkit

/** The keys the test kit reads, defined once. None of them means anything to the product. */
object TestkitConf {

  /** Exit status of a halt (as a SIGKILLed process reports it). */
  val HaltStatus = 137

  /**
   * [[HaltAfterRewindStep]]: the JVM halts right after this rewind step (one of
   * `io.batchlog.ops.Rewind.Steps`).
   */
  val HaltAfterRewindStep = "spark.batchlog.test.haltAfterRewindStep"

  /** [[PauseAfterRewindStep]]: the rewind step after which it waits for the test. */
  val PauseAfterRewindStep = "spark.batchlog.test.pauseAfterRewindStep"

  /** [[PauseAfterRewindStep]]: where it creates `paused` and waits for `resume`. */
  val PauseDir = "spark.batchlog.test.pauseDir"

  // ---- FaultInjectingCheckpointFileManager (read from the Hadoop conf) ----

  /** Spark's key choosing the `CheckpointFileManager` (read from the Hadoop conf). */
  val CheckpointFileManagerClassKey = "spark.sql.streaming.checkpointFileManagerClass"

  /**
   * The operation that faults: `createAtomic`, `rename` (closing an atomic stream publishes the
   * file), `delete`, `open`, `list`, `exists`, `mkdirs`; or several, separated by commas (their
   * calls counted together). Unset: no fault.
   */
  val FaultOpKey = "spark.batchlog.test.fault.op"

  /** Only calls whose path matches this regex (`find`, on the full URI string) fault. */
  val FaultPathRegexKey = "spark.batchlog.test.fault.pathRegex"

  /**
   * `fail` (IOException), `stall` (sleep, then go on), `await` (wait until the file
   * [[FaultAwaitFileKey]] names exists, at most the stall time, then go on), `halt` (the JVM halts,
   * as if killed), `call` (runs `FaultInjectingCheckpointFileManager.callback`, then goes on) or
   * `lose` (a call that changes the store, the publishing `rename`, `delete`, `mkdirs`, is applied,
   * then fails with an IOException: a store that applied a request and lost its answer).
   */
  val FaultActionKey = "spark.batchlog.test.fault.action"

  /** The first matching call (1-based, counted per JVM) that faults. */
  val FaultNthKey = "spark.batchlog.test.fault.nth"

  /** How many matching calls fault from the nth on (default: all). */
  val FaultTimesKey = "spark.batchlog.test.fault.times"

  /** How long `stall` sleeps, and `await` waits at most. */
  val FaultStallMsKey = "spark.batchlog.test.fault.stallMs"

  /** The file whose creation (by another process, a test) lets an `await` call go on. */
  val FaultAwaitFileKey = "spark.batchlog.test.fault.awaitFile"
}
