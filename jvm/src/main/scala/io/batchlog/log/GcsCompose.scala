package io.batchlog.log

import java.io.ByteArrayOutputStream
import java.lang.reflect.InvocationTargetException
import java.util.UUID

import scala.util.control.NonFatal

import org.apache.hadoop.fs.{FileAlreadyExistsException, FileStatus, FileSystem, Path}

import io.batchlog.shim.CheckpointFileManager

/**
 * Server-side compaction on Google Cloud Storage: the new compact file is the store's `compose` of
 * the previous compact file and one object holding only the new lines, so only those lines and the
 * index pass through the driver (GCS joins up to 32 objects on the server, without a copy of their
 * bytes).
 *
 * Only when the new file is the previous one whole, then new lines: every run of the previous
 * compact file kept (no retention drop), its `v1` header the same. Otherwise (or before anything is
 * sent, on any failure) [[ObjectStoreCopy.Failed]]: the compaction runs again on the client side,
 * as on S3.
 *
 * Proof of the source: `compose` takes no condition on its sources here (Google's connector sends
 * none), so the previous compact file's status (length, modification time) must be the one its
 * proved [[CompactIndex]] records, once when the compaction starts and again right before the
 * compose. A compact file is written once and replaced only by `repair`, which fences the writer
 * first: the window between that check and the compose is the only one, and it is not batchlog's.
 *
 * Publish once: the compose is created with `ifGenerationMatch=0` (a generation-0 destination), so
 * the store refuses it (412) if the compact file exists, as it refuses an upload
 * ([[ObjectStorePublish.Gcs]]); only on a bucket that proved it refuses a second create. A refusal
 * is Hadoop's `FileAlreadyExistsException`, which the log settles by reading the file back
 * ([[PublishOutcome]]): the connector retries a compose whose answer was lost, and that retry is
 * refused because the compose it retried was applied. Any other failure of the compose is
 * [[ObjectStoreCopy.Failed]]: the client-side compaction then writes the same bytes with the same
 * condition, so a compose that was applied after all makes that upload's refusal, read back, this
 * writer's file.
 *
 * The new lines are one object beside the log, named as Spark's managers name a temp file
 * (`.N.compact.<uuid>.tmp`: no reader lists it), deleted after the compose. One left by a kill is
 * never read, as Spark's own temp files; a refused publish of `N.compact` deletes them all.
 */
private[log] object GcsCompose {

  /** The store-side compose for compact file `file`, or why there is none. */
  def target(fm: CheckpointFileManager, file: Path): Either[String, Target] =
    if (!ObjectStorePublish.applies(fm)) Left(s"the log is written by ${fm.getClass.getSimpleName}")
    else
      ObjectStorePublish.storeOf(file) match {
        case Some(fs) if ObjectStorePublish.Gcs.is(fs) =>
          if (!ObjectStorePublish.canCreateOnce(fs, file)) {
            Left("the store has no proved conditional create (ifGenerationMatch=0)")
          } else Right(new Target(fs, fs.makeQualified(file)))
        case _ => Left("not Google Cloud Storage")
      }

  /** What `inspect` says of compaction on such a store. */
  val Description: String =
    "server-side compose (the previous compact file and an object of the new lines, joined by " +
      "the store with ifGenerationMatch=0; only new lines and the index through the driver)"

  /** A compact file written by `compose`. */
  final class Target private[GcsCompose] (fs: FileSystem, file: Path) extends AppendTarget(file) {
    protected def upload(prev: FileStatus): AppendUpload = new Upload(fs, file, prev)
  }

  /** The previous compact file and an object of the new lines, composed ([[AppendUpload]]). */
  final class Upload private[GcsCompose] (fs: FileSystem, file: Path, prev: FileStatus)
      extends AppendUpload(fs, file, prev) {
    protected def verb: String = "compose"

    protected def join(now: FileStatus, tail: ByteArrayOutputStream): Unit = {
      val part = new Path(file.getParent, s".${file.getName}.${UUID.randomUUID()}.tmp")
      val api =
        try new Api(fs)
        catch { case NonFatal(e) => throw failed("the connector's client is out of reach", e) }
      try {
        if (tail.size > 0) {
          try api.upload(part, tail)
          catch { case NonFatal(e) => throw failed(s"cannot upload the new lines to $part", e) }
        }
        val sources = prev.getPath +: (if (tail.size > 0) Seq(part) else Nil)
        try api.compose(sources, file)
        catch {
          case e: Throwable if ObjectStorePublish.Gcs.preconditionFailed(e) =>
            throw new FileAlreadyExistsException(
              s"$file exists: the store refused the compose (ifGenerationMatch=0)"
            )
          case NonFatal(e) => throw failed("the compose failed", e)
        }
      } finally if (tail.size > 0) {
          try api.delete(part)
          catch { case NonFatal(_) => } // a name never read; vacuum's to remove
        }
    }
  }

  /**
   * Google's connector's own client (`GoogleCloudStorage`), by reflection: its classes are shaded,
   * and this jar does not depend on the connector. Through it, one request each: an upload, a
   * compose, a delete; the `FileSystem` would add its checks of the path and its parents (about
   * four requests before a create and three around a delete, measured on fake-gcs-server).
   */
  final private class Api(fs: FileSystem) {
    private val gcs: AnyRef = {
      val gcsFs = fs.getClass.getMethod("getGcsFs").invoke(fs)
      gcsFs.getClass.getMethod("getGcs").invoke(gcsFs)
    }
    private def method(name: String, params: Int) = gcs.getClass.getMethods
      .find(m => m.getName == name && m.getParameterCount == params)
      .getOrElse(throw new NoSuchMethodException(s"${gcs.getClass.getName}.$name"))
    private val composeObjects = method("composeObjects", 3)
    private val idClass: Class[_] = composeObjects.getParameterTypes()(1)
    private val optionsClass: Class[_] = composeObjects.getParameterTypes()(2)
    private def noOverwrite: AnyRef = optionsClass.getField("DEFAULT_NO_OVERWRITE").get(null)

    /** The object `p`; with `generation` 0: a create that the store refuses over an object. */
    private def id(p: Path, generation: Option[Long] = None): AnyRef = {
      val bucket = p.toUri.getAuthority
      val key = fs.makeQualified(p).toUri.getPath.stripPrefix("/")
      generation match {
        case Some(g) =>
          idClass.getConstructor(classOf[String], classOf[String], java.lang.Long.TYPE)
            .newInstance(bucket, key, java.lang.Long.valueOf(g)).asInstanceOf[AnyRef]
        case None =>
          idClass.getConstructor(classOf[String], classOf[String])
            .newInstance(bucket, key).asInstanceOf[AnyRef]
      }
    }

    private def call(m: java.lang.reflect.Method, args: AnyRef*): AnyRef =
      try m.invoke(gcs, args: _*)
      catch { case e: InvocationTargetException => throw e.getCause }

    /** `bytes` as the new object `p` (`ifGenerationMatch=0`), one upload. */
    def upload(p: Path, bytes: ByteArrayOutputStream): Unit = {
      val create = gcs.getClass.getMethods
        .find(m => m.getName == "create" && m.getParameterTypes.toSeq == Seq(idClass, optionsClass))
        .getOrElse(throw new NoSuchMethodException(s"${gcs.getClass.getName}.create"))
      val channel = call(create, id(p, Some(0L)), noOverwrite)
        .asInstanceOf[java.nio.channels.WritableByteChannel]
      try {
        val buf = java.nio.ByteBuffer.wrap(bytes.toByteArray)
        while (buf.hasRemaining) channel.write(buf)
      } finally channel.close()
    }

    /** `compose` of `sources` into `dest` with `ifGenerationMatch=0`. */
    def compose(sources: Seq[Path], dest: Path): Unit = {
      val ids = sources.map(p => id(p))
      call(composeObjects, java.util.Arrays.asList(ids: _*), id(dest, Some(0L)), noOverwrite)
    }

    /** Deletes object `p`. */
    def delete(p: Path): Unit =
      call(method("deleteObjects", 1), java.util.Collections.singletonList(id(p)))
  }

}
