package io.batchlog.log

import java.io.StringWriter
import java.nio.charset.StandardCharsets.UTF_8

import com.fasterxml.jackson.core.{JsonFactory, JsonParser, JsonToken}

import org.apache.spark.sql.types._

/**
 * The on-disk format of a batch-tagged sink log file, defined here and nowhere else.
 *
 * {{{
 *   v1
 *   {"path":"file:///out/p=1/part-00000-batch-7-<uuid>.c000.snappy.parquet","size":1234,
 *    "isDir":false,"modificationTime":1700000000000,"blockReplication":1,"blockSize":33554432,
 *    "action":"add","batchId":7}
 * }}}
 * (one JSON object per line; wrapped here for reading). The header is Spark's `v1` and every field
 * before `batchId` is Spark's `SinkFileStatus`, in Spark's order: Spark's own reader ignores the
 * extra field, so plain Spark reads the log unchanged. `batchId` is always the last field, which
 * lets compaction copy tagged lines as bytes without parsing them ([[isTagged]]).
 *
 * Resolving an entry's batch ([[resolveBatch]]): the `batchId` field; else, in a non-compact file
 * `N`, N itself (Spark writes exactly the files of batch N there); else the batch id in the data
 * file's name; else untagged.
 */
object LogFormat {
  val Version = 1
  val Header = "v1"
  val BatchIdField = "batchId"

  /** The entry as a Spark schema (for reading log files with Spark's JSON reader). */
  val sparkSchema: StructType = StructType(Seq(
    StructField("path", StringType),
    StructField("size", LongType),
    StructField("isDir", BooleanType),
    StructField("modificationTime", LongType),
    StructField("blockReplication", IntegerType),
    StructField("blockSize", LongType),
    StructField("action", StringType),
    StructField(BatchIdField, LongType)
  ))

  private val TagMarker = ",\"" + BatchIdField + "\":"
  private val json = new JsonFactory()

  /** One entry as one line, without the newline. */
  def encode(e: SinkLogEntry): String = {
    val w = new StringWriter(256)
    val g = json.createGenerator(w)
    g.writeStartObject()
    g.writeStringField("path", e.path)
    g.writeNumberField("size", e.size)
    g.writeBooleanField("isDir", e.isDir)
    g.writeNumberField("modificationTime", e.modificationTime)
    g.writeNumberField("blockReplication", e.blockReplication)
    g.writeNumberField("blockSize", e.blockSize)
    g.writeStringField("action", e.action)
    e.batchId.foreach(id => g.writeNumberField(BatchIdField, id))
    g.writeEndObject()
    g.close()
    w.toString
  }

  /**
   * Parses one line. Unknown fields are ignored (as Spark does); a missing required field or a
   * malformed line throws `IllegalArgumentException` with the reason (callers add file and line).
   */
  def decode(line: String): SinkLogEntry = {
    var path: String = null
    var size, modificationTime, blockSize = Long.MinValue
    var isDir: java.lang.Boolean = null
    var blockReplication = Int.MinValue
    var action: String = null
    var batchId: Option[Long] = None
    val p = json.createParser(line)
    try {
      if (p.nextToken() != JsonToken.START_OBJECT) fail("not a JSON object")
      while (p.nextToken() == JsonToken.FIELD_NAME) {
        val name = p.currentName()
        val t = p.nextToken()
        name match {
          case "path" => path = text(p, t, name)
          case "size" => size = long(p, t, name)
          case "isDir" => isDir = bool(t, name)
          case "modificationTime" => modificationTime = long(p, t, name)
          case "blockReplication" => blockReplication = long(p, t, name).toInt
          case "blockSize" => blockSize = long(p, t, name)
          case "action" => action = text(p, t, name)
          case BatchIdField =>
            batchId = if (t == JsonToken.VALUE_NULL) None else Some(long(p, t, name))
          case _ => p.skipChildren()
        }
      }
      if (p.currentToken() != JsonToken.END_OBJECT) fail("the line is truncated")
      if (p.nextToken() != null) fail("unexpected text after the JSON object")
    } catch {
      case e: com.fasterxml.jackson.core.JsonProcessingException =>
        fail(s"malformed JSON: ${e.getOriginalMessage}")
    } finally p.close()
    def missing(field: String) = fail(s"required field '$field' is missing")
    if (path == null) missing("path")
    if (size == Long.MinValue) missing("size")
    if (isDir == null) missing("isDir")
    if (modificationTime == Long.MinValue) missing("modificationTime")
    if (blockReplication == Int.MinValue) missing("blockReplication")
    if (blockSize == Long.MinValue) missing("blockSize")
    if (action == null) missing("action")
    SinkLogEntry(path, size, isDir, modificationTime, blockReplication, blockSize, action, batchId)
  }

  /**
   * The `batchId` of a line that ends with it (as [[encode]] writes it), read from the line's tail
   * without parsing the rest; None for an untagged line.
   */
  def taggedBatch(line: CharSequence): Option[Long] = {
    val end = line.length - 1
    if (end < 0 || line.charAt(end) != '}') return None
    var j = end - 1
    while (j >= 0 && Character.isDigit(line.charAt(j))) j -= 1
    val digits = end - 1 - j
    if (digits == 0 || digits > 19 || !startsWith(line, TagMarker, j - TagMarker.length + 1)) None
    else {
      var id = 0L
      var k = j + 1
      while (k < end && id >= 0) { id = id * 10 + (line.charAt(k) - '0'); k += 1 }
      if (id < 0) None else Some(id) // id < 0: overflow past Long.MaxValue
    }
  }

  def isTagged(line: String): Boolean = taggedBatch(line).isDefined

  /**
   * True if `line` is a complete, valid tagged entry exactly as [[encode]] writes it: every field
   * in its order, each of its type, strings well escaped, nothing else. Such a line decodes without
   * error to the entry it says, so compaction can copy it as text instead of decoding it (a line
   * for which this is false is decoded: any other valid form, or the error naming a corrupt one).
   */
  def isCanonical(line: CharSequence): Boolean = new CanonicalScan(line).ok

  /** `s` holds `t` at `at` (String.startsWith for any CharSequence). */
  private def startsWith(s: CharSequence, t: String, at: Int): Boolean =
    at >= 0 && at + t.length <= s.length && {
      var k = 0
      while (k < t.length && s.charAt(at + k) == t.charAt(k)) k += 1
      k == t.length
    }

  /**
   * The bytes `[from, to)` of a line read as bytes, as characters for [[isCanonical]] and
   * [[taggedBatch]] without decoding them: an ASCII byte is its character; any other byte reads as
   * NUL, which no canonical line holds, so a line with a non-ASCII byte is decoded instead (UTF-8
   * checked), never copied unchecked.
   */
  final class AsciiView(bytes: Array[Byte], from: Int, to: Int) extends CharSequence {
    def length: Int = to - from
    def charAt(i: Int): Char = { val b = bytes(from + i); if (b < 0) 0.toChar else b.toChar }
    def subSequence(start: Int, end: Int): CharSequence =
      new AsciiView(bytes, from + start, from + end)
    override def toString: String = new String(bytes, from, to - from, UTF_8)
  }

  private val PathStart = "{\"path\":\"".length

  final private class CanonicalScan(s: CharSequence) {
    private var i = 0
    private var escapes = 0
    private var pathEscapes = -1
    var pathEnd: Int = -1

    /** The path held no escape: its text between the quotes is the path. */
    def plainPath: Boolean = pathEnd > PathStart && pathEscapes == 0
    private def lit(t: String): Boolean =
      if (startsWith(s, t, i)) { i += t.length; true }
      else false
    private def str(): Boolean = {
      if (!lit("\"")) return false
      while (i < s.length) {
        val c = s.charAt(i)
        if (c == '"') { i += 1; return true }
        if (c < ' ') return false
        if (c == '\\') {
          escapes += 1
          if (i + 1 >= s.length) return false
          s.charAt(i + 1) match {
            case '"' | '\\' | '/' | 'b' | 'f' | 'n' | 'r' | 't' => i += 2
            case 'u' =>
              if (i + 6 > s.length) return false
              var k = i + 2
              while (k < i + 6) {
                if (Character.digit(s.charAt(k), 16) < 0) return false
                k += 1
              }
              i += 6
            case _ => return false
          }
        } else i += 1
      }
      false
    }

    /** An integer of at most `maxDigits` digits (no overflow possible), without leading zeros. */
    private def int(maxDigits: Int): Boolean = {
      if (i < s.length && s.charAt(i) == '-') i += 1
      val start = i
      while (i < s.length && s.charAt(i) >= '0' && s.charAt(i) <= '9') i += 1
      val n = i - start
      n >= 1 && n <= maxDigits && (n == 1 || s.charAt(start) != '0')
    }
    val ok: Boolean =
      lit("{\"path\":") && str() && { pathEnd = i - 1; pathEscapes = escapes; true } &&
        lit(",\"size\":") && int(18) && lit(",\"isDir\":") &&
        (lit("true") || lit("false")) && lit(",\"modificationTime\":") && int(18) &&
        lit(",\"blockReplication\":") && int(9) && lit(",\"blockSize\":") && int(18) &&
        lit(",\"action\":") && str() && lit(TagMarker) && int(18) && lit("}") && i == s.length
  }

  /**
   * The `path` of a line that is canonical ([[isCanonical]]) and holds no JSON escape in its path,
   * cut from the line without decoding it; None otherwise (decode it: that also names what is wrong
   * with a damaged line, which this never passes over).
   */
  def pathOf(line: String): Option[String] = {
    val scan = new CanonicalScan(line)
    if (scan.ok && scan.plainPath) Some(line.substring(PathStart, scan.pathEnd)) else None
  }

  /**
   * Adds `"batchId":id` to an untagged line without re-serialising it: every Spark-written line is
   * one flat JSON object ending in `}`.
   */
  def tagLine(line: String, batchId: Long): String =
    line.substring(0, line.lastIndexOf('}')) + TagMarker + batchId + "}"

  /** The batch of an entry read from log file `logBatchId` (a compact file if `inCompact`). */
  def resolveBatch(e: SinkLogEntry, logBatchId: Long, inCompact: Boolean): Option[Long] =
    e.batchId
      .orElse(if (inCompact) None else Some(logBatchId))
      .orElse(DataFileNaming.batchIdOf(e.path))

  private def fail(msg: String): Nothing = throw new IllegalArgumentException(msg)

  private def text(p: JsonParser, t: JsonToken, name: String): String =
    if (t == JsonToken.VALUE_STRING) p.getText else fail(s"field '$name' is not a string")

  private def long(p: JsonParser, t: JsonToken, name: String): Long =
    if (t == JsonToken.VALUE_NUMBER_INT) p.getLongValue
    else fail(s"field '$name' is not an integer")

  private def bool(t: JsonToken, name: String): java.lang.Boolean = t match {
    case JsonToken.VALUE_TRUE => true
    case JsonToken.VALUE_FALSE => false
    case _ => fail(s"field '$name' is not a boolean")
  }
}
