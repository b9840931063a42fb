package io.batchlog.testkit

import java.io.IOException
import java.util.concurrent.ConcurrentHashMap
import java.util.concurrent.atomic.AtomicLong

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.{
  FileStatus,
  FSDataInputStream,
  Path,
  PathFilter,
  UnsupportedFileSystemException
}

import io.batchlog.shim.CheckpointFileManager
import io.batchlog.shim.CheckpointFileManager.CancellableFSDataOutputStream

/**
 * Test-only: a real `CheckpointFileManager` (Spark's default, file-context based one, or the
 * file-system based one where no `AbstractFileSystem` exists) that injects one fault at a chosen
 * call. Select it with `spark.sql.streaming.checkpointFileManagerClass` = this class (in the SQL
 * conf or as `spark.hadoop.` key; Spark reads it from the Hadoop conf, which includes both) and
 * configure the fault with the `spark.batchlog.test.fault.*` keys of [[TestkitConf]]. Without
 * `spark.batchlog.test.fault.op` it only delegates.
 *
 * The fault is read from the Hadoop conf when the manager is created (Spark creates one per
 * metadata log, i.e. per query start), so unsetting the keys and restarting the query removes it.
 * Matching calls are counted per JVM ([[FaultInjectingCheckpointFileManager.reset]] restarts the
 * count).
 */
class FaultInjectingCheckpointFileManager(path: Path, hadoopConf: Configuration)
    extends WrappingManager {
  import FaultInjectingCheckpointFileManager._

  protected val underlying: CheckpointFileManager =
    try new ManagerShim.FileContextBased(path, hadoopConf)
    catch {
      case _: UnsupportedFileSystemException =>
        new ManagerShim.FileSystemBased(path, hadoopConf)
    }

  private val fault: Option[Fault] = Fault.fromConf(hadoopConf)

  private def check(op: String, p: Path): Unit = fault.foreach(_.maybeFire(op, p))

  /**
   * Runs `call`, with the fault checked first; a `lose` fault lets the call be applied, then throws
   * as a client does whose answer was lost (a timeout, a 5xx behind a load balancer).
   */
  private def applied[T](op: String, p: Path)(call: => T): T =
    if (!fault.exists(_.losesAnswer(op, p))) { check(op, p); call }
    else {
      call
      throw new IOException(
        s"Injected fault: lose at $op($p): the call was applied, its answer lost"
      )
    }

  override def createAtomic(
      p: Path,
      overwriteIfPossible: Boolean
  ): CancellableFSDataOutputStream = {
    check("createAtomic", p)
    val inner = underlying.createAtomic(p, overwriteIfPossible)
    new CancellableFSDataOutputStream(inner) {
      // Closing an atomic stream renames its temp file onto `p`: the publish step.
      override def close(): Unit = applied("rename", p)(inner.close())
      override def cancel(): Unit = inner.cancel()
    }
  }

  override def open(p: Path): FSDataInputStream = { check("open", p); underlying.open(p) }

  override def list(p: Path, filter: PathFilter): Array[FileStatus] = {
    check("list", p); underlying.list(p, filter)
  }

  override def mkdirs(p: Path): Unit = applied("mkdirs", p)(underlying.mkdirs(p))

  override def exists(p: Path): Boolean = { check("exists", p); underlying.exists(p) }

  override def delete(p: Path): Unit = applied("delete", p)(underlying.delete(p))

  override def isLocal: Boolean = underlying.isLocal

  override def createCheckpointDirectory(): Path = underlying.createCheckpointDirectory()
}

object FaultInjectingCheckpointFileManager {

  val Ops: Set[String] = Set("createAtomic", "rename", "delete", "open", "list", "exists", "mkdirs")

  /**
   * `lose` applies the call, then fails it (for the calls that change the store: the rename that
   * publishes, `delete`, `mkdirs`); on other calls it fails them as `fail` does.
   */
  val Actions: Set[String] = Set("fail", "stall", "await", "halt", "call", "lose")
  private val Changing = Set("rename", "delete", "mkdirs")

  /**
   * What the `call` action runs, with the operation and the path of the call, before the call goes
   * on: another writer's step, set by a test in this JVM, to interleave it at an exact point.
   */
  @volatile var callback: (String, Path) => Unit = (_, _) => ()

  /** Exit status of a `halt` (as a SIGKILL'd process reports it). */
  val HaltStatus: Int = TestkitConf.HaltStatus

  private val counters = new ConcurrentHashMap[String, AtomicLong]()

  /** Calls a `lose` fault applied and then failed, since the last [[reset]]. */
  val lostAnswers = new AtomicLong()

  /** Forgets how many matching calls each fault has seen. */
  def reset(): Unit = { counters.clear(); lostAnswers.set(0) }

  final private case class Fault(
      ops: Set[String],
      pathRegex: String,
      action: String,
      nth: Long,
      times: Long,
      stallMs: Long,
      awaitFile: Option[java.io.File]
  ) {
    private val regex = pathRegex.r
    private val counter =
      counters.computeIfAbsent(
        s"${ops.toSeq.sorted.mkString(",")}|$pathRegex|$action|$nth|$times",
        _ => new AtomicLong()
      )

    /** True if this call of a changing op is to be applied and then failed (counted as fired). */
    def losesAnswer(calledOp: String, p: Path): Boolean =
      action == "lose" && Changing(calledOp) && matches(calledOp, p) && {
        val n = counter.incrementAndGet()
        val fire = n >= nth && n - nth < times
        if (fire) {
          lostAnswers.incrementAndGet()
          System.err.println(s"[batchlog-fault] lose at call $n of $calledOp($p)")
        }
        fire
      }

    private def matches(calledOp: String, p: Path) =
      ops(calledOp) && regex.findFirstIn(p.toString).isDefined

    def maybeFire(calledOp: String, p: Path): Unit = {
      if (!matches(calledOp, p)) return
      val n = counter.incrementAndGet()
      if (n < nth || n - nth >= times) return
      val what = s"$action at call $n of $calledOp($p)"
      action match {
        case "fail" | "lose" => throw new IOException(s"Injected fault: $what")
        case "stall" =>
          System.err.println(s"[batchlog-fault] stalling ${stallMs} ms: $what")
          Thread.sleep(stallMs)
        case "await" =>
          // Another process's step, to interleave it at an exact point: the test creates the
          // file when the call may go on (or stallMs passes).
          val file = awaitFile.getOrElse(
            throw new IllegalArgumentException(s"${TestkitConf.FaultAwaitFileKey} is not set")
          )
          System.err.println(s"[batchlog-fault] awaiting $file: $what")
          val deadline = System.currentTimeMillis() + stallMs
          while (!file.exists() && System.currentTimeMillis() < deadline) Thread.sleep(20)
          System.err.println(s"[batchlog-fault] going on (${file.exists()}): $what")
        case "call" => callback(calledOp, p)
        case "halt" =>
          System.err.println(s"[batchlog-fault] halting the JVM: $what")
          System.err.flush()
          Runtime.getRuntime.halt(HaltStatus)
      }
    }
  }

  private object Fault {
    def fromConf(conf: Configuration): Option[Fault] =
      Option(conf.get(TestkitConf.FaultOpKey)).map(_.trim).filter(_.nonEmpty).map { value =>
        val ops = value.split(",").map(_.trim).toSet
        require(
          ops.forall(Ops),
          s"${TestkitConf.FaultOpKey}=$value: expected one or more of ${Ops.mkString("|")}, " +
            "separated by commas"
        )
        val action = conf.get(TestkitConf.FaultActionKey, "fail").trim
        require(
          Actions(action),
          s"${TestkitConf.FaultActionKey}=$action: expected one of ${Actions.mkString("|")}"
        )
        Fault(
          ops,
          conf.get(TestkitConf.FaultPathRegexKey, ".*"),
          action,
          conf.getLong(TestkitConf.FaultNthKey, 1L),
          conf.getLong(TestkitConf.FaultTimesKey, Long.MaxValue),
          conf.getLong(TestkitConf.FaultStallMsKey, 5000L),
          Option(conf.get(TestkitConf.FaultAwaitFileKey)).map(new java.io.File(_))
        )
      }
  }
}
