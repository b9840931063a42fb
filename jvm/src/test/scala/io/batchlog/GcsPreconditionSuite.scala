package io.batchlog.log

import java.io.IOException

import org.scalatest.funsuite.AnyFunSuite

/**
 * What a failed upload to GCS is taken for ([[ObjectStorePublish.Gcs.preconditionFailed]]): only
 * the store's HTTP 412 means "the file exists", however the connector's wraps word the message.
 */
class GcsPreconditionSuite extends AnyFunSuite {
  import ObjectStorePublish.Gcs.preconditionFailed

  /** An HTTP response exception as the connector's (shaded) client throws one. */
  final class ResponseException(status: Int, message: String) extends IOException(message) {
    def getStatusCode: Int = status
  }

  test("the store's 412 under the connector's wrap is a file that exists") {
    val refused = new IOException(
      "Upload failed for 'gs://b/out/_spark_metadata/7'",
      new ResponseException(412, "412 Precondition Failed PUT http://...")
    )
    assert(preconditionFailed(refused))
  }

  test("a log file named 412 failing for another reason is not taken for one that exists") {
    val broken = new IOException(
      "Upload failed for 'gs://b/out/_spark_metadata/412'",
      new ResponseException(503, "503 Service Unavailable (412 bytes sent)")
    )
    assert(!preconditionFailed(broken))
    assert(
      !preconditionFailed(new IOException("Upload failed for 'gs://b/412 Precondition Failed'"))
    )
  }
}
