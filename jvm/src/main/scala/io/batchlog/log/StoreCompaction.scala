package io.batchlog.log

import java.io.OutputStream

import org.apache.hadoop.fs.Path

/**
 * A compact file written by the store from the previous one's bytes, not through the driver:
 * [[ObjectStoreCopy]] on S3 (a multipart upload of copied ranges), [[GcsCompose]] on Google Cloud
 * Storage (`compose`). The log publishes `file` through it instead of its usual publish.
 */
private[log] trait StoreCompaction {

  /** The compact file it writes. */
  def file: Path

  /**
   * Writes `file` with `fn` and publishes it once (Hadoop's `FileAlreadyExistsException` if it
   * exists); [[ObjectStoreCopy.Failed]] if nothing was published and the client side should write
   * it instead.
   */
  def publish(fn: OutputStream => Unit): Unit
}
