package io.batchlog.log

import java.io.{ByteArrayOutputStream, OutputStream}
import java.lang.reflect.InvocationTargetException
import java.util.concurrent.{Callable, ConcurrentHashMap, Executors, ThreadFactory}
import java.util.concurrent.atomic.AtomicLong

import scala.util.control.NonFatal

import org.apache.hadoop.fs.{FileSystem, Path}

import org.apache.spark.internal.Logging

import io.batchlog.shim.CheckpointFileManager

/**
 * Server-side compaction on S3A: the new compact file is one multipart upload whose large parts are
 * copied by the store from byte ranges of the previous compact file (`UploadPartCopy` with a
 * `CopySourceRange`), so only the new lines and the index pass through the driver.
 *
 * Proof: a range is copied only from a previous compact file whose proved [[CompactIndex]] records
 * the store's ETag of it (taken when the index was written, right after the file), and every copy
 * (and every ranged read of a short stretch) is conditional on that ETag (`CopySourceIfMatch`,
 * `IfMatch`): a replaced or rewritten object fails the request, the upload is aborted and the
 * compaction runs again on the client-side path ([[CompactCopy]]), which checks each run's CRC32C
 * and reports damage (`CORRUPT_LOG`) as before. Before the upload starts, the object's current ETag
 * (one status request) must equal the recorded one too, for stores that ignore the condition.
 *
 * Part layout (S3: every part but the last at least 5 MiB, at most 5 GiB, at most 10,000 parts):
 * the bytes the driver writes (header, new lines) are buffered and uploaded as parts of at least
 * [[uploadPartBytes]]; a stretch of consecutive kept runs is copied as parts of its own when it is
 * at least 5 MiB long (or is the last thing in the file); a buffer shorter than 5 MiB in front of a
 * copied stretch is topped up with the first bytes of that stretch, read by the driver (at most 5
 * MiB a stretch), and a shorter stretch is read whole. The `v1` header in front of the first
 * stretch, when that stretch starts right after the previous file's identical header, is copied
 * with it. The result is byte for byte what the client-side path writes.
 *
 * Publishing keeps [[ObjectStorePublish]]'s guarantee: the upload is completed with `If-None-Match:
 * *` (a second writer's file is never replaced), and only on a store that proved it refuses a
 * second conditional create; any failure before that aborts the upload, so nothing is published.
 * The AWS SDK v2 client is S3A's own (`getS3AInternals().getAmazonS3Client`, Hadoop 3.4+), reached
 * by reflection: on Hadoop 3.3 (SDK v1) it is absent and compaction stays client-side, as on HDFS,
 * the local disk, or a store that refused a ranged copy.
 */
private[batchlog] object ObjectStoreCopy extends Logging {

  val MinPart: Long = 5L << 20
  val MaxPart: Long = 5L << 30
  private val MaxParts = 10000

  /** The driver's bytes are uploaded in parts of this size (the last one shorter). */
  @volatile private[batchlog] var uploadPartBytes: Int = 16 << 20

  /** A stretch the store copies is split into parts of about this size at most, copied at once. */
  @volatile private[batchlog] var copyPartBytes: Long = 64L << 20

  /** Parts copied at once, at most. */
  @volatile private[batchlog] var copyThreads: Int = 8

  private object CopyThreads extends ThreadFactory {
    def newThread(r: Runnable): Thread = {
      val t = new Thread(r, "batchlog-part-copy")
      t.setDaemon(true)
      t
    }
  }

  /** What the server-side path did in this JVM (tests, benchmarks). */
  object Stats {
    val compactions, fallbacks, partsCopied, partsUploaded = new AtomicLong
    val bytesCopied, bytesUploaded, bytesRead = new AtomicLong
    def json: String =
      s"""{"compactions":${compactions.get},"fallbacks":${fallbacks.get},""" +
        s""""partsCopied":${partsCopied.get},"partsUploaded":${partsUploaded.get},""" +
        s""""bytesCopied":${bytesCopied.get},"bytesUploaded":${bytesUploaded.get},""" +
        s""""bytesRead":${bytesRead.get}}"""
  }

  /** The counters as JSON (py4j: `ObjectStoreCopy.statsJson()`). */
  def statsJson(): String = Stats.json

  /**
   * A failure of the store-side path before its upload could complete, or a completion refused for
   * good: the upload is aborted, nothing is published, and the client-side path runs.
   */
  final class Failed(msg: String, cause: Throwable)
      extends Exception(msg, cause)
      with PublishOutcome.NotPublished

  /**
   * The request completing the upload failed without a definite answer (a 5xx, a timeout, a reset
   * connection, a retry that found the upload gone), and aborting the upload failed too: the store
   * may hold the compact file. The log reads it back ([[PublishOutcome]]).
   */
  final class Unanswered(msg: String, cause: Throwable) extends java.io.IOException(msg, cause)

  /**
   * Buckets whose store refused a ranged part copy, and when: not tried again for
   * [[ObjectStorePublish.RecheckIgnoredMs]].
   */
  private val refused = new ConcurrentHashMap[String, java.lang.Long]()

  private def bucketOf(file: Path) = s"${file.toUri.getScheme}://${file.toUri.getAuthority}"

  /** The object key of `p` in its bucket. */
  private[log] def keyOf(fs: FileSystem, p: Path): String =
    fs.makeQualified(p).toUri.getPath.stripPrefix("/")

  /**
   * Whether a part copy's HTTP `status` says the store does not do ranged part copies (remembered
   * for the bucket): 501, or a 4xx but 412 (the source changed: a condition, not a limit). A 5xx or
   * no answer is taken as passing: that compaction falls back, the next one copies again.
   */
  private def refusal(status: Int): Boolean =
    status == 501 || (status >= 400 && status < 500 && status != 412)

  private def refusedNow(file: Path): Boolean = Option(refused.get(bucketOf(file))).exists { at =>
    (System.nanoTime() - at) / 1000000L < ObjectStorePublish.RecheckIgnoredMs
  }

  /**
   * The store-side copy for compact file `file`, or why there is none (S3A with the SDK v2 client,
   * publishing through [[ObjectStorePublish]] with proved conditional creates, no refused copy).
   */
  def target(fm: CheckpointFileManager, file: Path): Either[String, Target] =
    if (!ObjectStorePublish.applies(fm)) Left(s"the log is written by ${fm.getClass.getSimpleName}")
    else
      ObjectStorePublish.storeOf(file) match {
        case None => Left("not an object store that publishes whole uploads")
        case Some(fs) if fs.getClass.getName != "org.apache.hadoop.fs.s3a.S3AFileSystem" =>
          Left(s"${fs.getClass.getSimpleName} is not S3A")
        case Some(fs) =>
          S3.of(fs) match {
            case Left(why) => Left(why)
            case Right(_) if refusedNow(file) => Left("the store refused a ranged part copy")
            case Right(_) if !ObjectStorePublish.canCreateOnce(fs, file) =>
              Left("the store has no proved conditional create (If-None-Match: *)")
            case Right(s3) => Right(new Target(s3, fs, file))
          }
      }

  /** How compaction writes compact file `file` (what `inspect` reports). */
  def describe(fm: CheckpointFileManager, file: Path): String =
    (GcsCompose.target(fm, file), target(fm, file)) match {
      case (Right(_), _) => GcsCompose.Description
      case (_, Left(_)) if AzureBlocks.target(fm, file).isRight => AzureBlocks.Description
      case (_, Right(_)) =>
        "server-side copy (a multipart upload: the previous compact file's kept runs copied by " +
          "the store, If-Match its recorded ETag; only new lines and the index through the driver)"
      case (_, Left(why)) => s"client-side copy ($why)"
    }

  /** The ETag a file status carries (S3A's `EtagSource`), if any: by reflection (Hadoop 3.3.2+). */
  def etagOf(status: org.apache.hadoop.fs.FileStatus): Option[String] =
    try {
      val m = status.getClass.getMethod("getEtag")
      Option(m.invoke(status)).map(_.toString).filter(e => e.nonEmpty && !e.exists(_.isWhitespace))
    } catch { case NonFatal(_) => None }

  /** S3A's SDK v2 client, called by reflection (this jar compiles against Hadoop 3.3 too). */
  final class S3 private (val client: AnyRef, val bucket: String) {
    private val loader = client.getClass.getClassLoader

    def builder(cls: String): AnyRef =
      Class.forName(s"software.amazon.awssdk.services.s3.model.$cls", true, loader)
        .getMethod("builder").invoke(null)

    def build(cls: String)(settings: (String, AnyRef)*): AnyRef = {
      val b = builder(cls)
      settings.foreach { case (name, v) => S3.call(b, name, v) }
      S3.call(b, "build")
    }

    def requestBody(bytes: Array[Byte], len: Int): AnyRef =
      Class.forName("software.amazon.awssdk.core.sync.RequestBody", true, loader)
        .getMethod("fromBytes", classOf[Array[Byte]])
        .invoke(null, java.util.Arrays.copyOf(bytes, len))

    def apply(method: String, args: AnyRef*): AnyRef = S3.call(client, method, args: _*)
  }

  object S3 {
    def of(fs: FileSystem): Either[String, S3] =
      try {
        val internals = fs.getClass.getMethod("getS3AInternals").invoke(fs)
        val client = call(internals, "getAmazonS3Client", "batchlog server-side compaction")
        val bucket = fs.getClass.getMethod("getBucket").invoke(fs).toString
        Right(new S3(client, bucket))
      } catch {
        case _: NoSuchMethodException => Left("this Hadoop's S3A has no AWS SDK v2 client")
        case NonFatal(e) => Left(s"S3A's SDK client is out of reach (${e.getClass.getSimpleName})")
        case e: LinkageError => Left(s"S3A's SDK client is out of reach (${e.getClass.getName})")
      }

    private def boxed(c: Class[_]): Class[_] = c match {
      case java.lang.Integer.TYPE => classOf[java.lang.Integer]
      case java.lang.Long.TYPE => classOf[java.lang.Long]
      case java.lang.Boolean.TYPE => classOf[java.lang.Boolean]
      case other => other
    }

    /** `target.name(args)`: the public method whose parameters take `args`. */
    def call(target: AnyRef, name: String, args: AnyRef*): AnyRef = {
      val m = target.getClass.getMethods.find { m =>
        m.getName == name && m.getParameterCount == args.length &&
        m.getParameterTypes.zip(args).forall { case (t, a) => boxed(t).isInstance(a) }
      }.getOrElse(throw new NoSuchMethodException(s"${target.getClass.getName}.$name"))
      m.setAccessible(true)
      try m.invoke(target, args: _*)
      catch { case e: InvocationTargetException => throw e.getCause }
    }

    /** The HTTP status of an SDK service exception (0: none). */
    def statusOf(e: Throwable): Int =
      try call(e, "statusCode").asInstanceOf[java.lang.Integer].intValue()
      catch { case NonFatal(_) => 0 }
  }

  /** A compact file written by a store-side copy. */
  final class Target(s3: S3, fs: FileSystem, val file: Path) extends StoreCompaction {

    /**
     * Writes `file` with `fn` (given an [[Upload]]) as one multipart upload, completed only if
     * `file` does not exist (Hadoop's `FileAlreadyExistsException` if it does); any failure aborts
     * the upload. A store's refusal is a [[Failed]].
     */
    def publish(fn: OutputStream => Unit): Unit = {
      val key = keyOf(fs, file)
      val id =
        try {
          val req = s3.build("CreateMultipartUploadRequest")("bucket" -> s3.bucket, "key" -> key)
          S3.call(s3("createMultipartUpload", req), "uploadId").toString
        } catch { case NonFatal(e) => throw new Failed(s"cannot start an upload of $file", e) }
      val upload = new Upload(s3, fs, key, id, file)
      try {
        fn(upload)
        upload.complete()
      } catch {
        case e: Throwable =>
          val aborted =
            try {
              s3(
                "abortMultipartUpload",
                s3.build("AbortMultipartUploadRequest")(
                  "bucket" -> s3.bucket,
                  "key" -> key,
                  "uploadId" -> id
                )
              )
              true
            } catch { case NonFatal(s) => e.addSuppressed(s); false }
          e match {
            // An aborted upload can no longer complete: that completion did not publish.
            case u: Unanswered if aborted =>
              throw new Failed(s"${u.getMessage}; the upload was aborted", u.getCause)
            case _ => throw e
          }
      }
      Stats.compactions.incrementAndGet()
    }
  }

  /**
   * The compact file's bytes as the compaction writes them: bytes written are buffered and uploaded
   * as parts; [[copy]] adds a stretch of the previous compact file that the store copies.
   */
  final class Upload private[ObjectStoreCopy] (
      s3: S3,
      fs: FileSystem,
      key: String,
      uploadId: String,
      file: Path
  ) extends OutputStream {
    private val buf = new ByteArrayOutputStream(1 << 16)
    private var parts = Vector.empty[AnyRef] // CompletedPart
    private var pending: Option[(Path, String, Long, Long)] = None // source, etag, offset, length
    private var written = 0L // bytes in parts so far

    override def write(b: Int): Unit = write(Array(b.toByte), 0, 1)
    override def write(b: Array[Byte], off: Int, len: Int): Unit = {
      settle(last = false)
      buf.write(b, off, len)
      if (buf.size >= math.max(uploadPartBytes.toLong, MinPart)) uploadBuffered()
    }

    /**
     * Bytes `[offset, offset + length)` of `source` (whose ETag is `etag`) come next: copied by the
     * store. Adjacent stretches are merged into one.
     */
    def copy(source: Path, etag: String, offset: Long, length: Long): Unit = pending match {
      case Some((s, e, o, l)) if s == source && e == etag && o + l == offset =>
        pending = Some((s, e, o, l + length))
      case _ => settle(last = false); pending = Some((source, etag, offset, length))
    }

    private def isHeader: Boolean =
      parts.isEmpty && java.util.Arrays.equals(buf.toByteArray, LogFiles.HeaderBytes)

    private def settle(last: Boolean): Unit = pending.foreach { case (src, etag, offset, length) =>
      pending = None
      var start = offset
      var len = length
      if (isHeader && start == CompactIndex.FirstOffset) { // the same `v1` header: copied with it
        buf.reset(); start = 0L; len += CompactIndex.FirstOffset
      }
      if (buf.size > 0 && buf.size < MinPart) {
        val need = math.min(len, MinPart - buf.size)
        read(src, etag, start, need); start += need; len -= need
      }
      if (len > 0 && (len >= MinPart || last)) {
        uploadBuffered()
        copyParts(src, etag, start, len)
      } else if (len > 0) read(src, etag, start, len)
    }

    /** Bytes of `src` read by the driver into the buffer, if `src` still has ETag `etag`. */
    private def read(src: Path, etag: String, start: Long, len: Long): Unit = {
      val req = s3.build("GetObjectRequest")(
        "bucket" -> s3.bucket,
        "key" -> keyOf(fs, src),
        "range" -> s"bytes=$start-${start + len - 1}",
        "ifMatch" -> etag
      )
      val bytes = storeCall(s"a ranged read of $src") {
        S3.call(s3("getObjectAsBytes", req), "asByteArray").asInstanceOf[Array[Byte]]
      }
      if (bytes.length != len) {
        throw new Failed(s"a ranged read of $src returned ${bytes.length} bytes, not $len", null)
      }
      buf.write(bytes, 0, bytes.length)
      Stats.bytesRead.addAndGet(len)
    }

    private def nextPart(): Int = {
      if (parts.length >= MaxParts) throw new Failed(s"$file needs more than $MaxParts parts", null)
      parts.length + 1
    }

    private def completed(n: Int, etag: AnyRef): Unit =
      parts :+= s3.build("CompletedPart")("partNumber" -> Int.box(n), "eTag" -> etag)

    private def uploadBuffered(): Unit = if (buf.size > 0) {
      val n = nextPart()
      val len = buf.size
      val req = s3.build("UploadPartRequest")(
        "bucket" -> s3.bucket,
        "key" -> key,
        "uploadId" -> uploadId,
        "partNumber" -> Int.box(n),
        "contentLength" -> Long.box(len.toLong)
      )
      val body = s3.requestBody(buf.toByteArray, len)
      val resp = storeCall(s"an upload of part $n of $file")(s3("uploadPart", req, body))
      completed(n, S3.call(resp, "eTag"))
      written += len
      buf.reset()
      Stats.partsUploaded.incrementAndGet()
      Stats.bytesUploaded.addAndGet(len.toLong)
    }

    /**
     * `[start, start + len)` of `src` as copied parts, [[copyThreads]] at a time. Why parts: a
     * store may copy one part on one stream, and one request of seconds to minutes (SeaweedFS: 5.6
     * s for a 2.4 GB part) meets clients' request timeouts; parts copied at once use the
     * parallelism a store has (SeaweedFS on two cores has none to give: 38 parts took 5.3 s). The
     * parts are of even size, at most [[copyPartBytes]] (and S3's 5 GiB), at least 5 MiB (but a
     * stretch shorter than that at the end of the file). Every part is conditional on `etag`. A
     * failed part stops the parts not yet sent; the parts in flight are waited for before the
     * failure is thrown, so the abort that follows leaves no part behind.
     */
    private def copyParts(src: Path, etag: String, start: Long, len: Long): Unit = {
      def ceil(a: Long, b: Long) = (a + b - 1) / b
      val wanted = math.max(ceil(len, MaxPart), ceil(len, math.max(copyPartBytes, MinPart)))
      val pieces = math.max(1L, math.min(len / MinPart, wanted)).toInt
      val first = parts.length + 1
      if (first - 1 + pieces > MaxParts) {
        throw new Failed(s"$file needs more than $MaxParts parts", null)
      }
      val ranges = (0 until pieces).map { i =>
        (first + i, start + len * i / pieces, start + len * (i + 1) / pieces)
      }
      val failure = new java.util.concurrent.atomic.AtomicReference[Throwable]()
      def copyOne(n: Int, from: Long, until: Long): AnyRef =
        if (failure.get != null) null
        else
          try copyPart(src, etag, n, from, until)
          catch { case e: Throwable => failure.compareAndSet(null, e); null }
      val etags =
        if (pieces == 1) ranges.map { case (n, from, until) => copyOne(n, from, until) }
        else {
          val pool = Executors.newFixedThreadPool(math.min(copyThreads, pieces), CopyThreads)
          try {
            ranges
              .map { case (n, from, until) =>
                pool.submit(new Callable[AnyRef] { def call(): AnyRef = copyOne(n, from, until) })
              }
              .map(_.get())
          } finally pool.shutdown()
        }
      Option(failure.get).foreach(e => throw e)
      ranges.zip(etags).foreach { case ((n, from, until), tag) =>
        completed(n, tag)
        written += until - from
      }
    }

    /** Part `n`: bytes `[from, until)` of `src` copied by the store; its ETag. */
    private def copyPart(src: Path, etag: String, n: Int, from: Long, until: Long): AnyRef = {
      val req = s3.build("UploadPartCopyRequest")(
        "sourceBucket" -> s3.bucket,
        "sourceKey" -> keyOf(fs, src),
        "destinationBucket" -> s3.bucket,
        "destinationKey" -> key,
        "uploadId" -> uploadId,
        "partNumber" -> Int.box(n),
        "copySourceRange" -> s"bytes=$from-${until - 1}",
        "copySourceIfMatch" -> etag
      )
      val resp =
        try s3("uploadPartCopy", req)
        catch {
          case NonFatal(e) =>
            val status = S3.statusOf(e)
            if (refusal(status)) refused.put(bucketOf(file), System.nanoTime())
            throw new Failed(
              s"a copy of bytes $from..$until of $src (part $n of $file), HTTP $status",
              e
            )
        }
      Stats.partsCopied.incrementAndGet()
      Stats.bytesCopied.addAndGet(until - from)
      S3.call(S3.call(resp, "copyPartResult"), "eTag")
    }

    private def storeCall[T](what: String)(body: => T): T =
      try body
      catch { case NonFatal(e) => throw new Failed(s"$what failed (HTTP ${S3.statusOf(e)})", e) }

    /** Uploads what is left and completes the upload, only if the file does not exist. */
    private[ObjectStoreCopy] def complete(): Unit = {
      settle(last = true)
      if (buf.size > 0 || parts.isEmpty) uploadBuffered()
      val done = s3.build("CompletedMultipartUpload")("parts" -> java.util.Arrays.asList(parts: _*))
      val req = s3.build("CompleteMultipartUploadRequest")(
        "bucket" -> s3.bucket,
        "key" -> key,
        "uploadId" -> uploadId,
        "multipartUpload" -> done,
        "ifNoneMatch" -> "*"
      )
      try s3("completeMultipartUpload", req)
      catch {
        case NonFatal(e) if S3.statusOf(e) == 412 =>
          throw new org.apache.hadoop.fs.FileAlreadyExistsException(
            s"$file exists (${e.getMessage})"
          )
        case NonFatal(e) =>
          throw new Unanswered(
            s"completing the upload of $file failed (HTTP ${S3.statusOf(e)}): the store may " +
              "have applied it",
            e
          )
      }
    }

    override def flush(): Unit = ()
    override def close(): Unit = ()
  }
}
