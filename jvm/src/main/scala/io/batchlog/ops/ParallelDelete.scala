package io.batchlog.ops

import java.util.concurrent.{Executors, TimeUnit}
import java.util.concurrent.atomic.AtomicLong

import org.apache.hadoop.conf.Configuration
import org.apache.hadoop.fs.Path

/**
 * Deletes many files with a pool of threads: on object stores and HDFS each delete is a round trip,
 * so 100k deletes must not wait on one another. A file already gone counts as deleted (a re-run
 * after a crash finds some gone).
 */
object ParallelDelete {

  /** Deletes `paths`; returns how many existed. Fails with the first error after all tried. */
  def apply(paths: Seq[Path], conf: Configuration, parallelism: Int, progress: Progress): Long = {
    if (paths.isEmpty) return 0L
    val pool = Executors.newFixedThreadPool(math.max(1, math.min(parallelism, paths.length)))
    val done = new AtomicLong()
    val existed = new AtomicLong()
    @volatile var failure: Throwable = null
    try {
      paths.foreach { p =>
        pool.execute { () =>
          try {
            if (p.getFileSystem(conf).delete(p, false)) existed.incrementAndGet()
          } catch { case e: Throwable => if (failure == null) failure = e }
          progress.step(done.incrementAndGet(), paths.length)
        }
      }
      pool.shutdown()
      while (!pool.awaitTermination(1, TimeUnit.SECONDS)) {}
    } finally pool.shutdownNow()
    if (failure != null) throw failure
    existed.get()
  }
}
