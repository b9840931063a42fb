package io.batchlog

import java.util.concurrent.CountDownLatch

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.{FileStatus, LocalFileSystem, Path}

import org.apache.spark.TaskContext

/**
 * Hadoop's local file system, able to hold a task at the moment it commits its files: a task's
 * `getFileStatus` of an existing file whose name contains [[StallingFileSystem.stallOn]] waits
 * until [[StallingFileSystem.release]] opens, whatever interrupts it (as a write past Spark's last
 * check for a kill would). A real file system, not a mock: every call reaches the local disk.
 * [[StallingFileSystem.installed]] makes it the `file:` scheme's for new file system instances.
 */
class StallingFileSystem extends LocalFileSystem {

  /** Stalls only on a file that exists: a task's commit, not its writer's create. */
  override def getFileStatus(f: Path): FileStatus = {
    val status = super.getFileStatus(f)
    val on = StallingFileSystem.stallOn
    if (on != null && f.getName.contains(on) && TaskContext.get() != null) {
      val release = StallingFileSystem.release
      StallingFileSystem.stalled.countDown()
      var interrupted = false
      while (release.getCount > 0) {
        try release.await()
        catch { case _: InterruptedException => interrupted = true }
      }
      if (interrupted) Thread.currentThread().interrupt()
    }
    status
  }
}

object StallingFileSystem {

  /** A part of the file names to stall on; none when null. */
  @volatile var stallOn: String = _

  /** Opened by the first task that stalls (a test awaits it). */
  @volatile var stalled = new CountDownLatch(1)

  /** Opened by the test: every stalled task goes on. */
  @volatile var release = new CountDownLatch(1)

  private val Keys = Seq("fs.file.impl", "fs.file.impl.disable.cache")

  /** Runs `body` with this file system behind `file:` paths opened from `conf` (uncached). */
  def installed[A](conf: Configuration)(body: => A): A = {
    val before = Keys.map(k => k -> Option(conf.get(k)))
    conf.set("fs.file.impl", classOf[StallingFileSystem].getName)
    conf.setBoolean("fs.file.impl.disable.cache", true)
    try body
    finally {
      release.countDown()
      stallOn = null
      stalled = new CountDownLatch(1)
      release = new CountDownLatch(1)
      before.foreach { case (k, v) => v.fold(conf.unset(k))(conf.set(k, _)) }
    }
  }
}
