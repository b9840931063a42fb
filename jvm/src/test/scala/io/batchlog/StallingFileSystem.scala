package io.batchlog

import java.io.InterruptedIOException
import java.util.concurrent.CountDownLatch

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.{FileStatus, FSDataOutputStream, LocalFileSystem, Path}
import org.apache.hadoop.fs.permission.FsPermission
import org.apache.hadoop.util.Progressable

import org.apache.spark.TaskContext

/**
 * Hadoop's local file system, able to hold a task at a chosen moment: as it commits its files (a
 * task's `getFileStatus` of an existing file), or with [[StallingFileSystem.atCreate]] as its
 * writer opens one (the file created, the call failing if the task was interrupted meanwhile, as
 * HDFS's client fails). With [[StallingFileSystem.onDriver]] it holds the driver instead, as it
 * deletes a batch's files (its job's abort). Only for names containing
 * [[StallingFileSystem.stallOn]]; the task waits until [[StallingFileSystem.release]] opens,
 * whatever interrupts it (as a write past Spark's last check for a kill would). A real file system,
 * not a mock: every call reaches the local disk. [[StallingFileSystem.installed]] makes it the
 * `file:` scheme's for new file system instances.
 */
class StallingFileSystem extends LocalFileSystem {

  /** A task's commit: stalls only on a file that exists, not as its writer creates it. */
  override def getFileStatus(f: Path): FileStatus = {
    val status = super.getFileStatus(f)
    if (!StallingFileSystem.atCreate && !StallingFileSystem.onDriver) stall(f)
    status
  }

  /** The driver's deletion of an aborted batch's files: stalls before the file goes. */
  override def delete(f: Path, recursive: Boolean): Boolean = {
    if (StallingFileSystem.onDriver) stall(f)
    super.delete(f, recursive)
  }

  override def create(
      f: Path,
      permission: FsPermission,
      overwrite: Boolean,
      bufferSize: Int,
      replication: Short,
      blockSize: Long,
      progress: Progressable
  ): FSDataOutputStream = {
    val out = super.create(f, permission, overwrite, bufferSize, replication, blockSize, progress)
    if (StallingFileSystem.atCreate && stall(f)) {
      // As HDFS's client does on an interrupted thread: the file is created, the call fails.
      out.close()
      throw new InterruptedIOException(s"interrupted as $f was created")
    }
    out
  }

  /** Whether the task was interrupted as it stalled (the interrupt is kept on its thread). */
  private def stall(f: Path): Boolean = {
    val on = StallingFileSystem.stallOn
    var interrupted = false
    val here = (TaskContext.get() != null) != StallingFileSystem.onDriver
    if (on != null && f.getName.contains(on) && here) {
      val release = StallingFileSystem.release
      StallingFileSystem.stalled.countDown()
      while (release.getCount > 0) {
        try release.await()
        catch {
          case _: InterruptedException =>
            interrupted = true
            StallingFileSystem.interrupted.countDown()
        }
      }
      if (interrupted) Thread.currentThread().interrupt()
    }
    interrupted
  }
}

object StallingFileSystem {

  /** A part of the file names to stall on; none when null. */
  @volatile var stallOn: String = _

  /** Stall the driver (a job's abort, its commit), not the tasks. */
  @volatile var onDriver: Boolean = false

  /** Stall as a file is created, not as it is committed. */
  @volatile var atCreate: Boolean = false

  /** Opened by the first task that stalls (a test awaits it). */
  @volatile var stalled = new CountDownLatch(1)

  /** Opened by the first stalled task that is interrupted (its job cancelled). */
  @volatile var interrupted = new CountDownLatch(1)

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
      atCreate = false
      onDriver = false
      stalled = new CountDownLatch(1)
      interrupted = new CountDownLatch(1)
      release = new CountDownLatch(1)
      before.foreach { case (k, v) => v.fold(conf.unset(k))(conf.set(k, _)) }
    }
  }
}
