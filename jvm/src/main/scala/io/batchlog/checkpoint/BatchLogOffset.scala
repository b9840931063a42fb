package io.batchlog.checkpoint

import java.nio.charset.StandardCharsets.UTF_8

import scala.util.Try

import org.json4s.{DefaultFormats, Formats}
import org.json4s.JsonAST.{JInt, JObject, JString}
import org.json4s.jackson.{JsonMethods, Serialization}

import org.apache.spark.sql.connector.read.streaming.{Offset => OffsetV2}
import org.apache.spark.sql.execution.streaming.Offset

import io.batchlog.{BatchLogException, Compat}

/**
 * The offset of a `readStream.format("batchlog")` source, as a downstream query's `offsets/N`
 * records it: `{"batchId":7,"filesBatch":6,"fingerprint":"3:1a2b3c4d"}`. Every upstream batch up to
 * `batchId` was emitted (-1: none); `filesBatch` is the last of them that wrote files (batches
 * after it up to `batchId` wrote none), and `fingerprint` identifies what it wrote (the count and a
 * CRC32C of its file paths). A rewind of the upstream sink deletes its batches' files and its query
 * writes them again under new names, so a batch the downstream consumed that is gone or changed is
 * detected, never read twice or skipped silently.
 */
final case class BatchLogOffset(batchId: Long, filesBatch: Long, fingerprint: String)
    extends Offset {
  override def json(): String = Serialization.write(this)(BatchLogOffset.formats)
}

object BatchLogOffset {
  implicit private val formats: Formats = DefaultFormats

  /**
   * Our offset, or the one Spark read back from the checkpoint `checkpoint` (`SerializedOffset`);
   * anything else (another source's offset, or one of a newer batchlog with other fields) fails
   * naming the checkpoint and the way out.
   */
  def of(o: OffsetV2, checkpoint: => String): BatchLogOffset = o match {
    case b: BatchLogOffset => b
    case other =>
      parse(other.json()).getOrElse(
        throw BatchLogException.invalidArgument(
          "checkpointLocation",
          checkpoint,
          s"its offsets log holds ${other.json()} for a batchlog source, which is not a batchlog " +
            "source offset of this version ({\"batchId\":..,\"filesBatch\":..,\"fingerprint\":..}): " +
            "a newer batchlog or another source wrote it. Run the query with the batchlog " +
            "version that wrote its checkpoint, or start it from a new checkpoint (with option " +
            "startingBatch set to the first upstream batch to read)"
        )
      )
  }

  /** A batchlog source offset from its JSON, or None for any other source's offset. */
  def parse(json: String): Option[BatchLogOffset] =
    Try(JsonMethods.parse(json)).toOption.collect {
      case JObject(
            List(("batchId", JInt(b)), ("filesBatch", JInt(fb)), ("fingerprint", JString(f)))
          ) =>
        BatchLogOffset(b.toLong, fb.toLong, f)
    }

  /** The fingerprint of a batch's files: their count and a CRC32C of their sorted paths. */
  def fingerprint(paths: Seq[String]): String = {
    val crc = Compat.crc32c()
    paths.sorted.foreach { p =>
      val bytes = (p + "\n").getBytes(UTF_8)
      crc.update(bytes, 0, bytes.length)
    }
    f"${paths.length}%d:${crc.getValue}%08x"
  }
}
