package io.batchlog.log

import scala.collection.mutable
import scala.util.control.NonFatal

import org.apache.hadoop.fs.{FileSystem, Path}

/**
 * Multipart uploads left open under a sink's log directories on S3A: what a driver killed during a
 * server-side compaction ([[ObjectStoreCopy]]), or during S3A's own upload of a large file, leaves
 * behind. An open upload is in no listing of the bucket's objects, yet its parts (up to the size of
 * a compact file) are stored, and billed, until it is aborted or a lifecycle rule removes it.
 * `verify` reports them and `vacuum` aborts those older than its threshold.
 *
 * Elsewhere (the local disk, HDFS, S3A without the SDK v2 client) there are none to list.
 */
object OpenUploads {

  /** An open upload: the path it would publish, its id, and when it started (epoch ms). */
  final case class Open(path: Path, uploadId: String, initiated: Long)

  /**
   * The uploads open under each of `dirs` (all on `fs`), oldest first; Left(why) where they cannot
   * be listed (not S3A, or no SDK v2 client).
   */
  def list(fs: FileSystem, dirs: Seq[Path]): Either[String, Seq[Open]] =
    s3Of(fs).map { s3 =>
      dirs.flatMap { dir =>
        val prefix = ObjectStoreCopy.keyOf(fs, dir).stripSuffix("/") + "/"
        val found = mutable.ArrayBuffer.empty[Open]
        var marker: Option[(String, String)] = None
        var more = true
        while (more) {
          val settings = Seq[(String, AnyRef)]("bucket" -> s3.bucket, "prefix" -> prefix) ++
            marker.toSeq.flatMap { case (k, u) => Seq("keyMarker" -> k, "uploadIdMarker" -> u) }
          val resp =
            s3("listMultipartUploads", s3.build("ListMultipartUploadsRequest")(settings: _*))
          val uploads =
            ObjectStoreCopy.S3.call(resp, "uploads").asInstanceOf[java.util.List[AnyRef]]
          uploads.forEach { u =>
            val key = ObjectStoreCopy.S3.call(u, "key").toString
            val started = ObjectStoreCopy.S3.call(u, "initiated").asInstanceOf[java.time.Instant]
            found += Open(
              fs.makeQualified(new Path(s"/$key")),
              ObjectStoreCopy.S3.call(u, "uploadId").toString,
              if (started == null) 0L else started.toEpochMilli
            )
          }
          more = ObjectStoreCopy.S3.call(resp, "isTruncated") == java.lang.Boolean.TRUE
          marker = Some(
            (
              String.valueOf(ObjectStoreCopy.S3.call(resp, "nextKeyMarker")),
              String.valueOf(ObjectStoreCopy.S3.call(resp, "nextUploadIdMarker"))
            )
          )
        }
        found
      }.sortBy(_.initiated)
    }

  /** Aborts `upload` (its parts are deleted by the store); false if that failed. */
  def abort(fs: FileSystem, upload: Open): Boolean =
    s3Of(fs).exists { s3 =>
      try {
        s3(
          "abortMultipartUpload",
          s3.build("AbortMultipartUploadRequest")(
            "bucket" -> s3.bucket,
            "key" -> ObjectStoreCopy.keyOf(fs, upload.path),
            "uploadId" -> upload.uploadId
          )
        )
        true
      } catch { case NonFatal(_) => false }
    }

  private def s3Of(fs: FileSystem): Either[String, ObjectStoreCopy.S3] =
    if (fs.getClass.getName != "org.apache.hadoop.fs.s3a.S3AFileSystem") {
      Left(s"${fs.getClass.getSimpleName} has no multipart uploads")
    } else ObjectStoreCopy.S3.of(fs)
}
