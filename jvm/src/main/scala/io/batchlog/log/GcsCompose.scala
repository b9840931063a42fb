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
      try {
        if (tail.size > 0) {
          try {
            val out = fs.create(part, true)
            try tail.writeTo(out)
            finally out.close()
          } catch { case NonFatal(e) => throw failed(s"cannot upload the new lines to $part", e) }
        }
        val sources = prev.getPath +: (if (tail.size > 0) Seq(part) else Nil)
        try compose(fs, sources, file)
        catch {
          case e: Throwable if ObjectStorePublish.Gcs.preconditionFailed(e) =>
            throw new FileAlreadyExistsException(
              s"$file exists: the store refused the compose (ifGenerationMatch=0)"
            )
          case NonFatal(e) => throw failed("the compose failed", e)
        }
      } finally if (tail.size > 0) {
          try fs.delete(part, false)
          catch { case NonFatal(_) => } // a name never read; vacuum's to remove
        }
    }
  }

  /**
   * `compose` of `sources` into `dest` with `ifGenerationMatch=0`, through the connector's
   * `GoogleCloudStorage.composeObjects`: by reflection (its classes are shaded, and this jar does
   * not depend on the connector).
   */
  private def compose(fs: FileSystem, sources: Seq[Path], dest: Path): Unit = {
    val gcsFs = fs.getClass.getMethod("getGcsFs").invoke(fs)
    val gcs = gcsFs.getClass.getMethod("getGcs").invoke(gcsFs)
    val m = gcs.getClass.getMethods
      .find(m => m.getName == "composeObjects" && m.getParameterCount == 3)
      .getOrElse(throw new NoSuchMethodException(s"${gcs.getClass.getName}.composeObjects"))
    val idClass: Class[_] = m.getParameterTypes()(1)
    val optionsClass: Class[_] = m.getParameterTypes()(2)
    val bucket = dest.toUri.getAuthority
    def key(p: Path) = fs.makeQualified(p).toUri.getPath.stripPrefix("/")
    val ids: Seq[AnyRef] = sources.map { p =>
      idClass.getConstructor(classOf[String], classOf[String])
        .newInstance(bucket, key(p)).asInstanceOf[AnyRef]
    }
    val created: AnyRef = idClass
      .getConstructor(classOf[String], classOf[String], java.lang.Long.TYPE)
      .newInstance(bucket, key(dest), java.lang.Long.valueOf(0L)) // ifGenerationMatch=0
      .asInstanceOf[AnyRef]
    val options: AnyRef = optionsClass.getField("DEFAULT_NO_OVERWRITE").get(null)
    try m.invoke(gcs, java.util.Arrays.asList(ids: _*), created, options)
    catch { case e: InvocationTargetException => throw e.getCause }
  }
}
