package io.batchlog.log

import java.util.concurrent.{Callable, Executors, ThreadFactory}

import scala.util.control.NonFatal

import org.apache.hadoop.fs.{FileStatus, FileSystem, Path, PathFilter}
import org.apache.hadoop.util.functional.FutureIO

import io.batchlog.Compat

/**
 * The batch files a compaction merges (up to `compactInterval - 1` of them), read at once before it
 * writes, on an object store. Why: there a file read the usual way is a HEAD, then a GET, each 20
 * to 100 ms, one file after the other: nine batch files were about half of a compaction's wall time
 * on S3. One listing gives every file's status, so each file is one GET (`openFile` with its
 * status), all of them in parallel.
 *
 * Only files up to [[MaxBytes]] in all are read ahead (a compaction holds its new lines in memory
 * anyway). A file that is not listed, larger than what is left, or fails to read is left to the
 * compaction's own read, which fails as before, naming it and why it is needed. Local disks and
 * HDFS, where a read costs no round trip to speak of, read as before.
 */
private[log] object BatchFilePrefetch {

  /** What a compaction reads ahead at most. */
  val MaxBytes: Long = 16L << 20

  /** Parallel reads at most. */
  private val Threads = 8

  /** The bytes of the batch files `ids` of log directory `dir` that could be read ahead, by id. */
  def apply(fs: FileSystem, dir: Path, ids: Seq[Long]): Map[Long, Array[Byte]] =
    if (ids.isEmpty || !ObjectStorePublish.mayBeObjectStore(dir)) Map.empty
    else {
      val wanted = ids.map(_.toString).toSet
      val listed =
        try fs.listStatus(dir, new PathFilter { def accept(p: Path) = wanted(p.getName) }).toSeq
        catch { case NonFatal(_) => Nil }
      var left = MaxBytes
      val picked = listed.filter(_.isFile).sortBy(_.getPath.getName.toLong).filter { st =>
        val fits = st.getLen <= left
        if (fits) left -= st.getLen
        fits
      }
      if (picked.isEmpty) Map.empty
      else {
        val pool = Executors.newFixedThreadPool(math.min(Threads, picked.length), Daemons)
        try {
          val reads = picked.map { st =>
            st.getPath.getName.toLong -> pool.submit(new Callable[Array[Byte]] {
              def call(): Array[Byte] = read(fs, st)
            })
          }
          reads.flatMap { case (id, f) =>
            try Some(id -> f.get())
            catch { case NonFatal(_) => None }
          }.toMap
        } finally pool.shutdownNow()
      }
    }

  private def read(fs: FileSystem, st: FileStatus): Array[Byte] = {
    val in = FutureIO.awaitFuture(fs.openFile(st.getPath).withFileStatus(st).build())
    try Compat.readAllBytes(in)
    finally in.close()
  }

  private object Daemons extends ThreadFactory {
    def newThread(r: Runnable): Thread = {
      val t = new Thread(r, "batchlog-batch-file-read")
      t.setDaemon(true)
      t
    }
  }
}
