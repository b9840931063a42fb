package io.batchlog.log

import java.io.OutputStream
import java.util.UUID
import java.util.concurrent.ConcurrentHashMap

import scala.util.control.NonFatal

import org.apache.hadoop.fs.{Abortable, FileSystem, Path}

import org.apache.spark.internal.Logging
import org.apache.spark.sql.SparkSession

/**
 * Overwriting writes of batchlog's own small files (the JSON records beside the log, compact
 * indexes) on an object store, as one upload.
 *
 * Why: through a `CheckpointFileManager`, an atomic write is a temp file and a rename, and on S3 a
 * rename is a copy and a delete, each with its probes: about 20 requests for every lease refresh,
 * record update and index, measured against an S3-compatible server (`bench/requests.py`).
 *
 * How, with the same guarantee: an object store makes an object visible whole when its upload
 * completes (on `close`), never a part, and replaces the previous one in the same step; so the temp
 * file and the rename add nothing. A write that fails before `close` is aborted (Hadoop's
 * `Abortable`): nothing is uploaded and the previous object stays. A store says it behaves so with
 * the `fs.capability.outputstream.abortable` path capability (S3A and the other cloud connectors);
 * HDFS and the local disk do not, and keep the manager's atomic rename. S3A's create-performance
 * option skips its probes for a directory at the path (none of these names is ever one).
 *
 * Log files `N` / `N.compact` must not replace an existing file (a second writer's). Where the
 * store can refuse that itself, in the same request (S3A from Hadoop 3.5: a conditional upload,
 * `If-None-Match: *`, the `fs.option.create.conditional.overwrite` path capability), they are one
 * upload too ([[publishOnce]]): atomic, where the manager's temp file and rename check for the
 * target first and then copy, which two writers can both pass on S3. Elsewhere they are a temp file
 * and a rename, as Spark's ([[RenamePublish]]). The capability is not taken on trust: a store may
 * take the header and ignore it, so it is proved once per bucket ([[proveCreateOnce]]) before any
 * log file relies on it.
 *
 * Google Cloud Storage through Google's connector (`gs://`, [[Gcs]]) publishes whole on close too,
 * and a create that must not overwrite is sent with `ifGenerationMatch=0`: the store refuses it if
 * the object exists when the upload completes. Its streams cannot be aborted (closing one publishes
 * what was written), so on `gs://` the bytes are written aside first (memory, or a local temp file
 * for a log file) and uploaded only once whole: a failure before then uploads nothing.
 */
private[log] object ObjectStorePublish extends Logging {

  val AbortableStream = "fs.capability.outputstream.abortable"
  val ConditionalCreate = "fs.option.create.conditional.overwrite"
  private val CreatePerformance = "fs.s3a.create.performance"

  /**
   * True for Spark's own managers: one set with `spark.sql.streaming.checkpointFileManagerClass`
   * (such as the test kit's fault-injecting one) is always used as it is.
   */
  def applies(fm: io.batchlog.shim.CheckpointFileManager): Boolean =
    fm.getClass.getName.startsWith("org.apache.spark.")

  /**
   * Buckets (`scheme://authority`) whose store said it publishes whole on close. Only that answer
   * is kept, never a file system (Hadoop's cache serves it by scheme, authority and user, and a
   * cached one outlives `close()` and its session's credentials) and never a "no": a capability
   * lookup that failed is asked again next time.
   */
  private val wholeOnClose = ConcurrentHashMap.newKeySet[String]()

  /**
   * Whether `path` (qualified) may be on an object store: its scheme is neither the local disk's
   * nor HDFS's (what each request costs there is a round trip).
   */
  def mayBeObjectStore(path: Path): Boolean = {
    val scheme = path.toUri.getScheme
    scheme != null && scheme != "file" && scheme != "hdfs"
  }

  /**
   * The file system of `file` if it is an object store that publishes a file whole on close; None
   * elsewhere (or with no session to take the Hadoop settings from: the manager's way then).
   */
  def storeOf(file: Path): Option[FileSystem] =
    if (!mayBeObjectStore(file)) None
    else
      SparkSession.getActiveSession.orElse(SparkSession.getDefaultSession).flatMap { spark =>
        try {
          val fs = file.getFileSystem(spark.sessionState.newHadoopConf())
          val bucket = bucketOf(file)
          if (wholeOnClose.contains(bucket)) Some(fs)
          else if (Gcs.is(fs) || fs.hasPathCapability(file.getParent, AbortableStream)) {
            wholeOnClose.add(bucket)
            Some(fs)
          } else None
        } catch { case NonFatal(_) => None }
      }

  /**
   * True if `fs` can create `file` only if it is absent, in one request: it declares the capability
   * and, once per bucket, proved it ([[proveCreateOnce]]).
   */
  def canCreateOnce(fs: FileSystem, file: Path): Boolean =
    declaresCreateOnce(fs, file) && proveCreateOnce(fs, file).contains(true)

  private def declaresCreateOnce(fs: FileSystem, file: Path): Boolean =
    Gcs.is(fs) || (try fs.hasPathCapability(file, ConditionalCreate)
    catch { case NonFatal(_) => false })

  /**
   * By `scheme://authority`: what the probe found, and when (this JVM's monotonic clock). A probe
   * that failed is not kept; a store that refused the second create is, for good; one that took it
   * is asked again after [[RecheckIgnoredMs]], so a store fixed meanwhile (or a probe misled by a
   * transient answer) is not taken for one that ignores the condition for the life of the driver.
   */
  private val proofs = new ConcurrentHashMap[String, (Boolean, Long)]()

  /** How long a store seen to ignore `If-None-Match` is believed to (one probe per period). */
  val RecheckIgnoredMs: Long = 10 * 60 * 1000L

  private def kept(bucket: String): Option[Boolean] = Option(proofs.get(bucket)).collect {
    case (true, _) => true
    case (false, at) if (System.nanoTime() - at) / 1000000L < RecheckIgnoredMs => false
  }

  /**
   * What the probe of store `key` found, while it is kept ([[kept]]), or what `probe` finds now,
   * kept (None: the probe failed, nothing kept). The one memory of every conditional-write proof:
   * creates here, block-list commits on Azure ([[AzureBlocks]]).
   */
  private[log] def proved(key: String)(probe: => Option[Boolean]): Option[Boolean] =
    kept(key).orElse {
      val found = probe
      found.foreach(refused => proofs.put(key, (refused, System.nanoTime())))
      found
    }

  private def bucketOf(file: Path): String = s"${file.toUri.getScheme}://${file.toUri.getAuthority}"

  /**
   * Whether the store really refuses a second conditional create of one object: a store may take
   * the `If-None-Match` header and ignore it, and then a second writer's log file silently replaces
   * the first's. Proved once per bucket by creating a probe object `.batchlog-conditional-probe-
   * <uuid>` beside `file` twice, conditionally: the second must be refused (then removed). A store
   * that accepts it is remembered too, for [[RecheckIgnoredMs]] (its log files then go through the
   * manager, as Spark's); a probe that fails (no permission, a network error) is not remembered:
   * None.
   */
  def proveCreateOnce(fs: FileSystem, file: Path): Option[Boolean] =
    proved(bucketOf(file)) {
      val probe = new Path(file.getParent, s".batchlog-conditional-probe-${UUID.randomUUID()}")
      val once = (_: OutputStream).write(Array[Byte]('p'))
      try {
        val refused = if (Gcs.is(fs)) Gcs.refusesRacingCreate(fs, probe)
        else {
          publishOnce(fs, probe)(once)
          try { publishOnce(fs, probe)(once); false }
          catch { case _: org.apache.hadoop.fs.FileAlreadyExistsException => true }
        }
        if (!refused) {
          logWarning(
            s"The store of $file accepted a second conditional create (If-None-Match: *) of one " +
              "object: it ignores the condition. batchlog publishes log files there by a temp file " +
              "and a rename, as Spark does; set fs.s3a.create.conditional.enabled=false " +
              "to say so up front."
          )
        }
        Some(refused)
      } catch {
        case NonFatal(e) =>
          logWarning(s"Could not probe conditional creates on the store of $file: $e")
          None
      } finally {
        try fs.delete(probe, false)
        catch { case NonFatal(_) => }
      }
    }

  /** How log files beside `file` are published on `fs` (what `inspect` reports). */
  def describe(fs: FileSystem, file: Path): String =
    if (!declaresCreateOnce(fs, file)) {
      "temp file, then rename (the store declares no conditional create)"
    } else
      proveCreateOnce(fs, file) match {
        case Some(true) if Gcs.is(fs) =>
          "one upload (ifGenerationMatch=0; the store refused the second of two racing creates " +
            "of a probe)"
        case Some(true) =>
          "one conditional upload (If-None-Match: *; the store refused a second create of a probe)"
        case Some(false) =>
          "temp file, then rename: the store accepted a second " +
            "conditional create of a probe object, it ignores If-None-Match"
        case None =>
          "temp file, then rename: conditional creates could not be probed"
      }

  /** Writes `file` (replacing it) with `fn` as one upload; a failure aborts it. */
  def publish(fs: FileSystem, file: Path)(fn: OutputStream => Unit): Unit =
    if (Gcs.is(fs)) Gcs.upload(fs, file, overwrite = true, spoolToDisk = false)(fn)
    else upload(
      fs.createFile(file).overwrite(true).recursive().opt(CreatePerformance, true).build()
    )(fn)

  /**
   * Writes `file` with `fn` as one upload that the store refuses if `file` exists: Hadoop's
   * `FileAlreadyExistsException` then, and nothing changed.
   */
  def publishOnce(fs: FileSystem, file: Path)(fn: OutputStream => Unit): Unit =
    if (Gcs.is(fs)) Gcs.upload(fs, file, overwrite = false, spoolToDisk = true)(fn)
    else
      try upload(
          fs.createFile(file).overwrite(false).recursive().must(ConditionalCreate, true).build()
        )(fn)
      catch {
        // S3A's answer to a failed precondition (HTTP 412): the file exists
        case e: java.io.IOException if e.getClass.getSimpleName == "RemoteFileChangedException" =>
          throw new org.apache.hadoop.fs.FileAlreadyExistsException(
            s"$file exists (${e.getMessage})"
          )
      }

  private def upload(out: org.apache.hadoop.fs.FSDataOutputStream)(fn: OutputStream => Unit) =
    try {
      fn(out)
      out.close()
    } catch {
      case e: Throwable =>
        try out.abort()
        catch { case NonFatal(s) => e.addSuppressed(s) }
        throw e
    }

  implicit private class AbortOf(out: java.io.OutputStream) {
    def abort(): Unit = out match {
      case a: Abortable => a.abort()
      case o => o.close()
    }
  }

  /**
   * Google Cloud Storage through Google's connector. An upload becomes the object whole when it
   * completes; one created not to overwrite carries `ifGenerationMatch=0`, so the store refuses it
   * (HTTP 412) if the object exists by then, even when two writers both passed the connector's own
   * check for the object first. The connector's streams have no abort: closing one publishes what
   * it holds. So the bytes are written aside first and uploaded once whole.
   */
  object Gcs {
    private val Connector = "com.google.cloud.hadoop.fs.gcs.GoogleHadoopFileSystem"

    def is(fs: FileSystem): Boolean = fs.getClass.getName == Connector

    /**
     * `fn`'s bytes as `file`: written aside (a local temp file if `spoolToDisk`: a compact file may
     * be large; memory otherwise), then uploaded in one stream closed only once whole. A file that
     * exists (`overwrite` false) is Hadoop's `FileAlreadyExistsException`, from the connector's
     * check or from the store's refusal.
     */
    def upload(fs: FileSystem, file: Path, overwrite: Boolean, spoolToDisk: Boolean)(
        fn: OutputStream => Unit
    ): Unit = {
      val spool =
        if (spoolToDisk) Some(java.io.File.createTempFile("batchlog-gcs-", ".part")) else None
      try {
        lazy val mem = new java.io.ByteArrayOutputStream()
        val aside: OutputStream = spool.fold[OutputStream](mem)(f =>
          new java.io.BufferedOutputStream(new java.io.FileOutputStream(f), 1 << 16)
        )
        try fn(aside)
        finally aside.close()
        val out = fs.create(file, overwrite)
        spool match {
          case Some(f) => java.nio.file.Files.copy(f.toPath, out)
          case None => mem.writeTo(out)
        }
        try out.close()
        catch {
          case e: java.io.IOException if !overwrite && preconditionFailed(e) =>
            throw new org.apache.hadoop.fs.FileAlreadyExistsException(
              s"$file exists: the store refused the upload (ifGenerationMatch=0)"
            )
        }
      } finally spool.foreach(_.delete())
    }

    /**
     * True if `e` or a cause is the store's answer to a failed precondition: an HTTP response
     * exception (the connector's shaded `GoogleJsonResponseException`) of status 412, asked by its
     * `getStatusCode`. Not by message: the connector's own wraps name the file, and a log file
     * `412` failing for any other reason would read as "it exists".
     */
    def preconditionFailed(e: Throwable): Boolean =
      Iterator.iterate(e)(_.getCause).takeWhile(_ != null).take(10).exists { t =>
        try t.getClass.getMethod("getStatusCode").invoke(t) == Integer.valueOf(412)
        catch { case NonFatal(_) => false }
      }

    /**
     * Whether the store refuses the second of two creates of `probe` that both passed the
     * connector's check for the object (both opened before either completes): the proof that a log
     * file's create-once rests on the store, not on a check two writers can both pass.
     */
    def refusesRacingCreate(fs: FileSystem, probe: Path): Boolean = {
      val first = fs.create(probe, false)
      val second = fs.create(probe, false)
      first.write('p')
      second.write('q')
      first.close()
      try { second.close(); false }
      catch { case e: java.io.IOException if preconditionFailed(e) => true }
    }
  }
}
